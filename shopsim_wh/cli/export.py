"""`export`: training data out of the warehouse (NTP, SFT kinds, and the kinds of sql/exports/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from .options import WarehouseOpt
from .spark import EngineOpt, check_engine


def export(
    kind: Annotated[str | None, typer.Argument(help="Export kind (see --list): ntp, sft-action, sft-trajectory, ...")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="New (or empty) directory for the shards and manifest.json.")] = None,
    warehouse: WarehouseOpt = None,
    runs: Annotated[list[str] | None, typer.Option("--runs", help="Run id to read (repeat for several; default: every run).")] = None,
    experiment: Annotated[str | None, typer.Option(help="Read only the runs of this experiment.")] = None,
    where: Annotated[str | None, typer.Option(help="Boolean SQL over the kind's filter columns; replaces the kind's default selection.")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="Shard format: parquet (JSON logical type for message columns) or jsonl.")] = "parquet",
    shard_rows: Annotated[int, typer.Option(help="Target rows per shard (shards = ceil(rows / N), rows assigned by a hash of episode_id).")] = 100_000,
    window: Annotated[int | None, typer.Option(help="Context: keep the global prefix plus the last K turns (default: all).")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Context: trim whole turns, oldest first, to this many estimated tokens.")] = None,
    allow_test: Annotated[bool, typer.Option("--allow-test", help="Allow runs holding test-split episodes (evaluation exports only).")] = False,
    include_reasoning: Annotated[bool, typer.Option("--include-reasoning", help="Include reasoning_content (excluded by default).")] = False,
    include_persona: Annotated[bool, typer.Option("--include-persona", help="Include the user persona of system prompts (excluded by default).")] = False,
    gamma: Annotated[float, typer.Option(help="Discount for return-to-go (offline-rl).")] = 1.0,
    prm_shape: Annotated[str | None, typer.Option("--prm-shape", help="prm: steps (default: shopsim-wh's stepwise schema) or trl-stepwise (TRL <= 1.13's prompt / completions / labels).")] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the kinds with grain, columns and an example row, then exit.")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="Print the export's plan (scope, filter, strategy and why, batches, shards) and write nothing.")] = False,
    summary_format: Annotated[str, typer.Option("--summary-format", help="How to print the result: text or json (one object on stdout).")] = "text",
    progress: Annotated[bool, typer.Option("--progress/--quiet", help="Show a progress bar on stderr (--quiet: print nothing but the summary).")] = True,
    engine: EngineOpt = "duckdb",
) -> None:
    """Write one kind of training data as deterministic shards plus manifest.json (see docs/export.md)."""
    from ..core.errors import ShopsimError

    if summary_format not in ("text", "json"):
        raise ShopsimError(f"--summary-format must be text or json, not {summary_format!r}")
    if list_:
        _list(warehouse, summary_format)
        return
    from ..export import ExportOptions
    from ..store.warehouse import default_root

    root = default_root(warehouse)
    options = ExportOptions(runs=runs or None, experiment=experiment, where=where, format=fmt, shard_rows=shard_rows,
                            window=window, max_tokens=max_tokens, allow_test=allow_test,
                            include_reasoning=include_reasoning, include_persona=include_persona, gamma=gamma,
                            prm_shape=prm_shape)
    if explain:
        if kind is None:
            raise ShopsimError("pass a KIND to explain (e.g. `shopsim-wh export sft-action --explain`)")
        if check_engine(engine) == "spark":
            raise ShopsimError("--explain describes the default engine's plan; drop --engine spark")
        from ..export import explain as explain_export

        plan = explain_export(kind, root, options)
        typer.echo(json.dumps(plan.explain(), sort_keys=True, default=str) if summary_format == "json"
                   else plan.explain_text())
        return
    if kind is None or out is None:
        raise ShopsimError("pass a KIND and --out DIR (e.g. `shopsim-wh export sft-action --out data/sft`); "
                           "`shopsim-wh export --list` shows the kinds")
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from ..export import export as run_export

    if check_engine(engine) == "spark":
        from ..export.spark import export_spark as run_export

    if progress:
        columns = (TextColumn(f"[bold]export {kind}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[rate]} rows/s"), TimeRemainingColumn())
        with Progress(*columns, console=Console(stderr=True)) as bar:
            task = bar.add_task("export", total=None, rate="-")

            def tick(done: int, total: int) -> None:
                elapsed = bar.tasks[0].elapsed or 0
                bar.update(task, completed=done, total=total, rate=f"{done / elapsed:,.0f}" if elapsed else "-")

            result = run_export(kind, root, out, options, progress=tick)
    else:
        result = run_export(kind, root, out, options)
    if summary_format == "json":
        typer.echo(json.dumps(result.as_dict(), sort_keys=True))
        return
    d = result.decontamination
    typer.echo(f"{result.rows} row(s) of {result.kind} in {len(result.shards)} shard(s), "
               f"{result.duplicates_removed} duplicate(s) removed, in {result.seconds:.1f} s -> {result.out}")
    typer.echo(f"  decontamination: {'clean' if d.get('clean') else 'NOT clean'} "
               f"(splits {', '.join(d.get('splits_exported', []))}); manifest: {result.manifest}")
    fallback = result.engine.get("record_fallback")
    if fallback is not None:  # a record kind on Spark: the dump writer's share, read with DuckDB
        why = ", ".join(f"{k} {v}" for k, v in fallback.items()) or "none needed"
        typer.echo(f"  engine spark: {result.engine['records_by_dump_writer']} record(s) built by the dump writer, "
                   f"which reads the warehouse with DuckDB (record_fallback: {why})")


def _list(warehouse: str | None, summary_format: str) -> None:
    from ..export.describe import describe_kinds
    from ..store.warehouse import default_root

    root = default_root(warehouse)
    kinds = describe_kinds(root if not isinstance(root, str) and Path(root).is_dir() else None)
    if summary_format == "json":
        typer.echo(json.dumps(kinds, default=str, ensure_ascii=False))
        return
    for k in kinds:
        typer.echo(f"{k['name']}  [{k['trl']}]\n  grain: {k['grain']}\n  {k['description']}")
        typer.echo("  columns: " + ", ".join(f"{n} {t}" for n, t in k["columns"]))
        typer.echo("  example: " + json.dumps(k["example"], ensure_ascii=False, default=str)[:600] + "\n")


def register(app: typer.Typer) -> None:
    app.command()(export)
