"""Options shared by every verb, declared once."""

from __future__ import annotations

from typing import Annotated

import typer

WarehouseOpt = Annotated[
    str | None,
    typer.Option("--warehouse", "-w", help="Warehouse directory (default: config's output.warehouse, $SHOPSIM_WH_HOME, ./warehouse)."),
]
FormatOpt = Annotated[str, typer.Option("--format", "-f", help="Output format: table, csv, json or parquet.")]
ConfigArg = Annotated[str, typer.Argument(help="Experiment config (YAML).")]
