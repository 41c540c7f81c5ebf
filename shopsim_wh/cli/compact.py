"""`compact`: merge runs' small files into few large sorted ones (one atomic commit)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from .options import WarehouseOpt


def compact(
    run_ids: Annotated[list[str] | None, typer.Option("--run", "-r", help="Run id to compact; repeatable (default: every run).")] = None,
    warehouse: WarehouseOpt = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing on success.")] = False,
) -> None:
    """Merge each run's files per table (and rewrite files of an older schema version); replaced files stay for
    the grace period, then `vacuum` deletes them."""
    from ..engines.catalog import refresh_existing
    from ..store.maintenance import compact as run_compact
    from ..store.warehouse import default_root

    root = default_root(warehouse)
    res = run_compact(root, run_ids or None)
    refresh_existing(root)
    if fmt == "json":
        typer.echo(json.dumps(res))
    elif not quiet:
        typer.echo(f"compacted {res['runs']} run(s): {res['files_replaced']} file(s) replaced in {res['seconds']:.1f} s")


def register(app: typer.Typer) -> None:
    app.command()(compact)
