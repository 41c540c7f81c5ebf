"""`ingest`, `dump`: historical traces in, one episode back out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from . import exits
from .options import QuietOpt, WarehouseOpt, check_output, emit_json


# statuses of inputs the warehouse holds already: the same bytes (`skipped_same_hash`) or the same attempts
# (`already_present`: a dump ingested back); re-running an ingest over them is not an error
def _already_in(status: str) -> bool:
    return status.startswith(("skipped", "already"))


def ingest(
    paths: Annotated[list[str], typer.Argument(help="Files, directories (recursive) or globs; .gz and .zst are read as well.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="auto, shopsimrl-v4, agent-multi-turn, claude-code, openai-messages, atif, shopsimrl-trace2skill (ShopSimRL round directories: found by their shape under auto; docs/loop.md), or slime (slime's rollout_data_*.pt dumps and ShopSimRL's runs/slime-training traces: found by their content and layout under auto; docs/ingest.md).")] = "auto",
    warehouse: WarehouseOpt = None,
    source: Annotated[str | None, typer.Option(help="Source name used in run ids and runs.experiment.")] = None,
    output: Annotated[str, typer.Option("--output", help="text, or json: one JSON object on stdout (--format "
                                        "names the input's trace format here).")] = "text",
    quiet: QuietOpt = False,
    catalog: Annotated[Path | None, typer.Option("--catalog", help="BI catalog file to rebuild afterwards (docs/bi.md); <warehouse>/catalog.duckdb is rebuilt whenever it exists.")] = None,
    max_record_bytes: Annotated[str | None, typer.Option("--max-record-bytes", help="Longest record (JSONL line, or file read as one JSON document) held in memory, e.g. 64MB; a longer one is one record_too_large error row, skipped unread. Default $SHOPSIM_WH_MAX_RECORD_BYTES or 64MiB.")] = None,
    tokenizer: Annotated[str | None, typer.Option("--tokenizer", help="slime dumps: the tokenizer their token ids belong to (a Hugging Face name or tokenizer directory, or builtin:shopsim-bytes-v1), stored as training_samples.tokenizer_id (and its hash when it can be loaded).")] = None,
    traces: Annotated[list[str] | None, typer.Option("--traces", help="slime dumps: a directory to look for their ShopSimRL traces in (by the tail <round>/group-…/rollout-N.json) when the recorded paths do not exist here; repeatable. Default: the dump's directory and slime-training/, runs/slime-training/ under it and its ancestors.")] = None,
) -> None:
    """Land historical traces in the same tables the runner writes; bad records become ingest_errors rows.

    Exits 0 when episodes landed or every input was already in the warehouse (the same bytes, or the same episode
    attempts such as a dump ingested back: a re-run adds nothing),
    2 when nothing landed and nothing was there already (no input held a trace: the message says what was read)."""
    from ..ingest import IngestOptions
    from ..ingest import ingest as ingest_paths
    from ..ingest._io import expand_paths
    from ..ingest._io import max_record_bytes as resolve_max_record
    from ..store.warehouse import default_root

    check_output(output)
    limit = resolve_max_record(max_record_bytes)  # a bad value: exit 2 before anything is read
    options = IngestOptions(format=fmt, source=source, max_record_bytes=limit, tokenizer=tokenizer,
                            traces=tuple(traces or ()))
    root = default_root(warehouse)
    from ..ingest.slime import dump_files

    if not expand_paths(paths) and not dump_files(paths):  # no data file: say what is there, touch no warehouse
        _fail(output, _nothing_to_read(paths), {"units_read": 0, "episodes_landed": 0, "files": [],
                                                "warehouse": str(root)})
    if quiet or output == "json":
        summary = ingest_paths(paths, root, options)
    else:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        with Progress(TextColumn("[bold]ingest"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                      TimeRemainingColumn(), console=Console(stderr=True)) as bar:
            task = bar.add_task("ingest", total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            summary = ingest_paths(paths, root, options, progress=progress)
    d = summary.as_dict()
    from ..engines.catalog import refresh_existing
    from ..store.warehouse import Warehouse

    if Warehouse(root).exists():
        for info in refresh_existing(root, catalog):
            if not quiet and output != "json":
                typer.echo(f"catalog {info.path} refreshed (snapshot {info.snapshot_version})", err=True)
    already = [f for f in summary.files if _already_in(f.status)]
    error = None if summary.episodes_landed or summary.units_read or already else _nothing_landed(summary.files)
    if error:
        _fail(output, error, {**d, "warehouse": str(root)}, None if quiet or output == "json" else summary)
    if output == "json":
        emit_json({**d, "warehouse": str(root), "exit_code": exits.OK})
        return
    if quiet:
        return
    _report(d, root, summary)
    if already and not summary.episodes_landed and not summary.units_read:
        same = sum(f.status == "skipped_same_hash" for f in already)
        why = ", ".join(part for part in (f"{same} with the same bytes ingested before" if same else "",
                                          f"{len(already) - same} holding only attempts the warehouse has (each "
                                          "line above names its run)" if len(already) - same else "") if part)
        typer.echo(f"nothing new: {len(already)} input(s) already in the warehouse ({why})")


def _report(d: dict, root, summary) -> None:
    held = f", {d['units_already_present']} already in the warehouse" if d.get("units_already_present") else ""
    typer.echo(f"{d['units_read']} unit(s) landed{held}, {d['episodes_landed']} episode(s) landed, "
               f"{d['records_rejected']} record(s) rejected in {d['seconds']:.1f} s ({d['mb_per_s']:.1f} MB/s) -> warehouse {root}")
    for f in summary.files:
        if f.status != "landed" or f.format in ("shopsimrl-trace2skill", "slime"):  # a round, a dump: what landed
            typer.echo(f"  {f.status:>18}  {f.path}" + (f"  ({f.message})" if f.message else ""))
    if d["records_rejected"]:
        typer.echo("  rejected records: shopsim-wh sql \"select source_file, line, error_class, message from ingest_errors\"")


def _fail(output: str, message: str, doc: dict, summary=None) -> None:
    """Nothing landed: the same exit code in every output mode (the JSON document too, then the error)."""
    if output == "json":
        emit_json({**doc, "exit_code": exits.USAGE, "error": message})
    elif summary is not None:
        _report(doc, doc["warehouse"], summary)
    typer.secho(f"error: {message}", fg="red", err=True)
    raise typer.Exit(exits.USAGE)


def _nothing_landed(files) -> str:
    """What was read when no input landed an episode: how many inputs, by status, the first few names."""
    counts: dict[str, int] = {}
    for f in files:
        counts[f.status] = counts.get(f.status, 0) + 1
    names = ", ".join(Path(f.path).name for f in files[:5]) + (", ..." if len(files) > 5 else "")
    by_status = ", ".join(f"{n} {status}" for status, n in counts.items())
    failed = next((f for f in files if f.status == "failed" and f.message), None)
    name = Path(failed.path).name if failed else ""
    why = "" if not failed else f"; {failed.message}" if failed.message.startswith(name) else f"; {name}: {failed.message}"
    return (f"no episode landed from {len(files)} input(s) ({by_status}: {names}){why}; pass --format to force a "
            "reader, or check the files (ingest_errors holds the rejected records)")


def _nothing_to_read(paths: list[str]) -> str:
    """The paths held no data file: how many files were looked at and which."""
    import glob

    from ..ingest._io import COMPRESSED_SUFFIXES, DATA_SUFFIXES, SIDECAR_NAMES

    seen: list[Path] = []
    for raw in paths:
        matches = [Path(m) for m in sorted(glob.glob(raw, recursive=True))] if glob.has_magic(raw) else [Path(raw)]
        for p in matches:
            seen += [f for f in sorted(p.rglob("*")) if f.is_file()] if p.is_dir() else [p]
    where = ", ".join(paths)
    if not seen:
        return f"nothing to ingest: {where} holds no file; pass the files or directories that hold the traces"
    names = ", ".join(f.name for f in seen[:5]) + (", ..." if len(seen) > 5 else "")
    suffixes = ", ".join(f"*{x}" for x in DATA_SUFFIXES)
    return (f"no trace file under {where}: {len(seen)} file(s) looked at ({names}), none of them a trace file "
            f"({suffixes}, also {'/'.join(COMPRESSED_SUFFIXES)} compressed; {' and '.join(sorted(SIDECAR_NAMES))} "
            "come with their traces.jsonl); pass the files that hold the traces")


def dump(
    episode_id: Annotated[str | None, typer.Argument(help="Episode id (e.g. task-001234__sample-000); omit it with --run and --out to write the whole run.")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="shopsimrl-v4 or atif.")] = "shopsimrl-v4",
    warehouse: WarehouseOpt = None,
    run_id: Annotated[str | None, typer.Option("--run", help="Run id, when the episode id exists in several runs (or the run to write).")] = None,
    attempt: Annotated[int | None, typer.Option(help="Attempt to write (default: the last, the one the episodes view keeps).")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write to this file instead of stdout; without an episode id: the run directory to create.")] = None,
) -> None:
    """Re-emit one episode in a trace format, or a whole run as a ShopSimRL run directory
    (traces.jsonl with every attempt, manifest.json, summary.json)."""
    from ..core.errors import ShopsimError
    from ..ingest import dump_episode
    from ..ingest.dump import dump_run
    from ..store.warehouse import default_root

    root = default_root(warehouse)
    if episode_id is None:
        if run_id is None or out is None or fmt != "shopsimrl-v4":
            raise ShopsimError("to write a whole run pass --run RUN_ID and --out DIR (format shopsimrl-v4); "
                               "to write one episode pass its id")
        d = dump_run(root, run_id, out)
        typer.echo(f"wrote {d}/traces.jsonl, manifest.json, summary.json")
        return
    text = dump_episode(root, episode_id, fmt, run_id=run_id, attempt=attempt)
    if out:
        out.write_text(text if text.endswith("\n") else text + "\n")
        typer.echo(f"wrote {out}")
    else:
        typer.echo(text)


def register(app: typer.Typer) -> None:
    app.command()(ingest)
    app.command()(dump)
