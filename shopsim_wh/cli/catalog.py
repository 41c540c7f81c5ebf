"""`catalog`: write the BI-ready DuckDB file of a warehouse (docs/bi.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ..engines.catalog import (
    DEFAULT_STORAGE_VERSION,  # a light module: duckdb is imported inside its functions
)
from .options import WarehouseOpt


def catalog(
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Catalog file to write (default: <warehouse>/catalog.duckdb); replaced atomically.")] = None,
    warehouse: WarehouseOpt = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing on success.")] = False,
    storage_version: Annotated[str, typer.Option(
        "--storage-version", help="Oldest DuckDB release that must open the file: v1.0.0 (the default: every DuckDB "
        "since 1.0, as BI drivers ship it), v1.2.0, ..., or latest (the installed DuckDB's format). Refreshes "
        "keep the version a file was built with.")] = DEFAULT_STORAGE_VERSION,
) -> None:
    """Write a DuckDB file with every view and macro over the current snapshot, for BI tools (open it read-only)."""
    from ..engines.catalog import build_catalog
    from ..store.warehouse import default_root

    info = build_catalog(default_root(warehouse), out, storage_version)
    if fmt == "json":
        typer.echo(json.dumps(info.as_dict()))
    elif not quiet:
        typer.echo(f"wrote {info.path} ({info.views} views, {info.macros} macros, {info.comments} comments; "
                   f"snapshot {info.snapshot_version}) in {info.seconds:.1f} s")
        typer.echo(f"open it read-only: duckdb -readonly {info.path}   (docs/bi.md has a recipe per BI tool)")


def register(app: typer.Typer) -> None:
    app.command()(catalog)
