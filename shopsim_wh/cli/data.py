"""`sql`, `tables`: query the warehouse."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .options import FormatOpt, OutputOpt, WarehouseOpt, check_output, emit_json


def _open(warehouse: str | None):
    from ..db import connect
    from ..warehouse import Warehouse, default_root

    root = default_root(warehouse)
    if not Warehouse(root).exists():
        raise typer.BadParameter(f"no warehouse at {root}; pass --warehouse DIR or create one with `shopsim-wh run CONFIG`")
    return connect(root)


def sql(
    query: Annotated[str, typer.Argument(help="SQL over the warehouse views (see `shopsim-wh tables`).")],
    warehouse: WarehouseOpt = None,
    fmt: FormatOpt = "table",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write to this file instead of stdout.")] = None,
    param: Annotated[list[str], typer.Option("--param", "-p", help="Bind a named parameter: -p name=value, used as $name.")] = [],  # noqa: B006
) -> None:
    """Run a SQL query; values given with -p are bound as parameters, never pasted into the SQL."""
    from ..db import fetch_arrow
    from ..summary import absent_runs_note, render, run_query

    con = _open(warehouse)
    params = dict(p.split("=", 1) for p in param)
    if note := absent_runs_note(con, query):  # e.g. a cookbook query on a warehouse without its runs
        typer.secho(note, fg="yellow", err=True)
    if fmt == "parquet":
        if out is None:
            raise typer.BadParameter("--format parquet needs --out FILE")
        import pyarrow.parquet as pq

        table = fetch_arrow(con, query, params)
        pq.write_table(table, out, compression="zstd")
        typer.echo(f"wrote {table.num_rows} rows to {out}")
        return
    if fmt not in {"table", "csv", "json"}:
        raise typer.BadParameter(f"unknown format {fmt!r}; use table, csv, json or parquet")
    text = render(run_query(con, query, params), fmt)
    if out:
        out.write_text(text + "\n")
        typer.echo(f"wrote {out}")
    else:
        typer.echo(text)


def tables(warehouse: WarehouseOpt = None, fmt: OutputOpt = "text") -> None:
    """List tables and views with row counts, then the SQL macros with their parameters."""
    from ..db import macro_signatures, view_names

    check_output(fmt)
    con = _open(warehouse)
    relations = []
    for name, kind in view_names(con):
        if name.startswith("stg_"):
            continue
        try:
            n = con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
        except Exception:  # table macros and parameterised views have no plain count
            n = None
        relations.append({"name": name, "kind": "table" if kind == "BASE TABLE" else "view", "rows": n})
    macros = [{"name": name, "kind": kind, "parameters": list(params)} for name, kind, params in macro_signatures(con)]
    if fmt == "json":
        emit_json({"relations": relations, "macros": macros})
        return
    for r in relations:
        typer.echo(f"{r['name']:32} {r['kind']:5} {'-' if r['rows'] is None else r['rows']}")
    for m in macros:
        call = f"{m['name']}({', '.join(m['parameters'])})"
        typer.echo(f"{call:70} {'table macro' if m['kind'] == 'table_macro' else 'macro'}")


def register(app: typer.Typer) -> None:
    app.command()(sql)
    app.command()(tables)
