"""`ingest`, `dump`: historical traces in, one episode back out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from ..warehouse import default_root
from .options import WarehouseOpt


def ingest(
    paths: Annotated[list[str], typer.Argument(help="Files, directories (recursive) or globs; .gz and .zst are read as well.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="auto, shopsimrl-v4, agent-multi-turn, claude-code, openai-messages or atif.")] = "auto",
    warehouse: WarehouseOpt = None,
    source: Annotated[str | None, typer.Option(help="Source name used in run ids and runs.experiment.")] = None,
) -> None:
    """Land historical traces in the same tables the runner writes; bad records become ingest_errors rows."""
    from ..ingest import ingest as ingest_paths

    root = default_root(warehouse)
    with Progress(TextColumn("[bold]ingest"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn()) as bar:
        task = bar.add_task("ingest", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        summary = ingest_paths(paths, root, format=fmt, source=source, progress=progress)
    d = summary.as_dict()
    typer.echo(f"{d['units_read']} unit(s) read, {d['episodes_landed']} episode(s) landed, "
               f"{d['records_rejected']} record(s) rejected in {d['seconds']:.1f} s ({d['mb_per_s']:.1f} MB/s) -> warehouse {root}")
    for f in summary.files:
        if f.status != "landed":
            typer.echo(f"  {f.status:>18}  {f.path}" + (f"  ({f.message})" if f.message else ""))
    if d["records_rejected"]:
        typer.echo("  rejected records: shopsim-wh sql \"select source_file, line, error_class, message from ingest_errors\"")


def dump(
    episode_id: Annotated[str, typer.Argument(help="Episode id (e.g. task-001234__sample-000 or a session id).")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="shopsimrl-v4 or atif.")] = "shopsimrl-v4",
    warehouse: WarehouseOpt = None,
    run_id: Annotated[str | None, typer.Option("--run", help="Run id, when the episode id exists in several runs.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write to this file instead of stdout.")] = None,
) -> None:
    """Re-emit one episode in a trace format."""
    from ..ingest import dump_episode

    text = dump_episode(default_root(warehouse), episode_id, fmt, run_id=run_id)
    if out:
        out.write_text(text if text.endswith("\n") else text + "\n")
        typer.echo(f"wrote {out}")
    else:
        typer.echo(text)


def register(app: typer.Typer) -> None:
    app.command()(ingest)
    app.command()(dump)
