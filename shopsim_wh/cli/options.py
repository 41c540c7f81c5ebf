"""Options shared by every verb, declared once."""

from __future__ import annotations

from typing import Annotated

import typer

WarehouseOpt = Annotated[
    str | None,
    typer.Option("--warehouse", "-w", help="Warehouse directory or s3://bucket/prefix (default: $SHOPSIM_WH_HOME, else ./warehouse)."),
]
# only for commands that read a config: its output.warehouse comes before the environment variable
RunWarehouseOpt = Annotated[
    str | None,
    typer.Option("--warehouse", "-w", help="Warehouse directory or s3://bucket/prefix (default: the config's output.warehouse, "
                                           "$SHOPSIM_WH_HOME, else ./warehouse)."),
]
FormatOpt = Annotated[str, typer.Option("--format", "-f", help="Output format: table, csv, json or parquet.")]
ConfigArg = Annotated[str, typer.Argument(help="Experiment config (YAML).")]
# commands that print results: `--format json` prints one JSON object on stdout (diagnostics go to stderr)
OutputOpt = Annotated[str, typer.Option("--format", "-f", help="text, or json: one JSON object on stdout.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no summary; errors still go to stderr.")]


def check_output(fmt: str, allowed: tuple[str, ...] = ("text", "json")) -> str:
    if fmt not in allowed:
        raise typer.BadParameter(f"--format must be one of {', '.join(allowed)}, not {fmt!r}")
    return fmt


def emit_json(doc: object) -> None:
    """One JSON object on stdout (NaN/inf become null: strict JSON for jq and friends)."""
    import json
    import math

    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    def other(v):
        if hasattr(v, "isoformat"):  # datetime, date
            return v.isoformat()
        return float(v) if type(v).__name__ == "Decimal" else str(v)

    typer.echo(json.dumps(clean(doc), ensure_ascii=False, default=other))

# the limits of a user's query (shopsim_wh.engines.sandbox.Limits): `sql`, `gate`
TimeoutOpt = Annotated[float | None, typer.Option(
    "--timeout", help="Stop the query after this many seconds (0: no limit); default 120, or $SHOPSIM_WH_QUERY_TIMEOUT.")]
MemoryOpt = Annotated[str | None, typer.Option(
    "--memory-limit", help="DuckDB memory cap for the query, e.g. 2GB (it spills to disk first); default the smaller "
    "of 4GB and a quarter of RAM, or $SHOPSIM_WH_QUERY_MEMORY.")]
