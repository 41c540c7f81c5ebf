"""`ingest`, `dump`: historical traces in, one episode back out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .options import QuietOpt, WarehouseOpt, check_output, emit_json


def ingest(
    paths: Annotated[list[str], typer.Argument(help="Files, directories (recursive) or globs; .gz and .zst are read as well.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="auto, shopsimrl-v4, agent-multi-turn, claude-code, openai-messages or atif.")] = "auto",
    warehouse: WarehouseOpt = None,
    source: Annotated[str | None, typer.Option(help="Source name used in run ids and runs.experiment.")] = None,
    output: Annotated[str, typer.Option("--output", help="text, or json: one JSON object on stdout (--format "
                                        "names the input's trace format here).")] = "text",
    quiet: QuietOpt = False,
    catalog: Annotated[Path | None, typer.Option("--catalog", help="BI catalog file to rebuild afterwards (docs/bi.md); <warehouse>/catalog.duckdb is rebuilt whenever it exists.")] = None,
) -> None:
    """Land historical traces in the same tables the runner writes; bad records become ingest_errors rows."""
    from ..ingest import ingest as ingest_paths
    from ..warehouse import default_root

    check_output(output)
    root = default_root(warehouse)
    if quiet or output == "json":
        summary = ingest_paths(paths, root, format=fmt, source=source)
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

            summary = ingest_paths(paths, root, format=fmt, source=source, progress=progress)
    d = summary.as_dict()
    from ..catalog import refresh_existing
    from ..warehouse import Warehouse

    if Warehouse(root).exists():
        for info in refresh_existing(root, catalog):
            if not quiet and output != "json":
                typer.echo(f"catalog {info.path} refreshed (snapshot {info.snapshot_version})", err=True)
    if output == "json":
        emit_json({**d, "warehouse": str(root)})
        return
    if quiet:
        return
    typer.echo(f"{d['units_read']} unit(s) read, {d['episodes_landed']} episode(s) landed, "
               f"{d['records_rejected']} record(s) rejected in {d['seconds']:.1f} s ({d['mb_per_s']:.1f} MB/s) -> warehouse {root}")
    for f in summary.files:
        if f.status != "landed":
            typer.echo(f"  {f.status:>18}  {f.path}" + (f"  ({f.message})" if f.message else ""))
    if d["records_rejected"]:
        typer.echo("  rejected records: shopsim-wh sql \"select source_file, line, error_class, message from ingest_errors\"")
    unusable = [f for f in summary.files if f.status in ("unrecognised", "no_valid_record", "failed")]
    if unusable and not summary.episodes_landed:  # nothing usable came in: say so with the exit code too
        typer.secho(f"error: no episode landed from {len(unusable)} input(s); pass --format to force a reader, or "
                    "check the files (ingest_errors holds the rejected records)", fg="red", err=True)
        raise typer.Exit(2)


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
    from ..errors import ShopsimError
    from ..ingest import dump_episode
    from ..ingest.dump import dump_run
    from ..warehouse import default_root

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
