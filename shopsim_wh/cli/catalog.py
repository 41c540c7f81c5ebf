"""`catalog`: write the BI-ready DuckDB file of a warehouse (docs/bi.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from .options import WarehouseOpt


def catalog(
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Catalog file to write (default: <warehouse>/catalog.duckdb); replaced atomically.")] = None,
    warehouse: WarehouseOpt = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing on success.")] = False,
) -> None:
    """Write a DuckDB file with every view and macro over the current snapshot, for BI tools (open it read-only)."""
    from ..catalog import build_catalog
    from ..warehouse import default_root

    info = build_catalog(default_root(warehouse), out)
    if fmt == "json":
        typer.echo(json.dumps(info.as_dict()))
    elif not quiet:
        typer.echo(f"wrote {info.path} ({info.views} views, {info.macros} macros, {info.comments} comments; "
                   f"snapshot {info.snapshot_version}) in {info.seconds:.1f} s")
        typer.echo(f"open it read-only: duckdb -readonly {info.path}   (docs/bi.md has a recipe per BI tool)")


def register(app: typer.Typer) -> None:
    app.command()(catalog)
