"""`sql`, `tables`: query the warehouse."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer

from .options import MemoryOpt, OutputOpt, TimeoutOpt, WarehouseOpt, check_output, emit_json
from .spark import EngineOpt, check_engine


def _root(warehouse: str | None) -> Path:
    from ..store.warehouse import Warehouse, default_root

    root = default_root(warehouse)
    if not Warehouse(root).exists():
        raise typer.BadParameter(f"no warehouse at {root}; pass --warehouse DIR or create one with `shopsim-wh run CONFIG`")
    return root


def _open(warehouse: str | None):
    from ..engines.db import connect

    return connect(_root(warehouse))


def _read_query(query: str | None, file: Path | None) -> str:
    if file is not None:
        if query is not None:
            raise typer.BadParameter("give the query as an argument or with --file, not both")
        try:
            return file.read_text(encoding="utf-8")
        except OSError as exc:
            raise typer.BadParameter(f"cannot read --file {file}: {exc.strerror}; pass an existing .sql file") from None
    if query is None:
        raise typer.BadParameter("give a query: shopsim-wh sql \"select ...\", --file query.sql, or - to read stdin")
    if query == "-":
        text = sys.stdin.read()
        if not text.strip():
            raise typer.BadParameter("stdin held no query; pipe one in: echo 'select 1' | shopsim-wh sql -")
        return text
    return query


def _write(out: Path, text: str) -> None:
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise typer.BadParameter(f"cannot write --out {out}: {exc.strerror}; choose a file in an existing, "
                                 "writable directory") from None


def sql(
    query: Annotated[str | None, typer.Argument(help="SQL over the warehouse views (see `shopsim-wh tables`); - reads it from stdin.")] = None,
    warehouse: WarehouseOpt = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table (vertical when wider than the terminal), vertical, csv, json or parquet.")] = "table",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write to this file instead of stdout.")] = None,
    param: Annotated[list[str], typer.Option("--param", "-p", help="Bind a named parameter: -p name=value, used as $name.")] = [],  # noqa: B006
    file: Annotated[Path | None, typer.Option("--file", help="Read the query from this file.")] = None,
    engine: EngineOpt = "duckdb",
    timeout: TimeoutOpt = None,
    memory_limit: MemoryOpt = None,
) -> None:
    """Run one read-only SELECT over the warehouse views (it can read nothing else); -p values are bound, never pasted.

    The query stops at its time limit (default 120 s) and memory cap (default the smaller of 4 GB and a quarter
    of RAM; DuckDB spills to disk before it fails), with exit code 2 and a message saying which limit it hit."""
    from ..analytics.summary import absent_runs_note, render, run_query
    from ..engines.sandbox import Limits, check_query, limited
    from ..engines.sandbox import connect as sandboxed

    text = check_query(_read_query(query, file))  # refuse before paying for the views
    if fmt not in {"table", "vertical", "csv", "json", "parquet"}:
        raise typer.BadParameter(f"unknown format {fmt!r}; use table, vertical, csv, json or parquet")
    if fmt == "parquet" and out is None:
        raise typer.BadParameter("--format parquet needs --out FILE")
    bad = [p for p in param if "=" not in p]
    if bad:
        raise typer.BadParameter(f"--param {bad[0]!r}: write name=value")
    params = dict(p.split("=", 1) for p in param)
    if out is not None and not out.resolve().parent.is_dir():
        raise typer.BadParameter(f"cannot write --out {out}: {out.parent} is not a directory; choose a file in an "
                                 "existing, writable directory")
    if check_engine(engine) == "spark":
        if fmt == "parquet":
            raise typer.BadParameter("--format parquet is not offered with --engine spark; use csv or json")
        from ..analytics.summary import QueryResult
        from .spark import run_sql_spark

        cols, rows = run_sql_spark(_root(warehouse), text, params)
        rendered = render(QueryResult(cols, rows), fmt, width=None if out else shutil.get_terminal_size((120, 24)).columns)
        if out:
            _write(out, rendered + "\n")
            typer.echo(f"wrote {out}")
        else:
            typer.echo(rendered)
        return
    limits = Limits.resolve(timeout, memory_limit)
    con = sandboxed(_root(warehouse), limits=limits)
    if note := absent_runs_note(con, text):  # e.g. a cookbook query on a warehouse without its runs
        typer.secho(note, fg="yellow", err=True)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        from ..engines.sandbox import fetch_arrow as sandboxed_arrow

        with limited(con, limits):
            table = sandboxed_arrow(con, text, params)
        try:
            pq.write_table(table, out, compression="zstd")
        except OSError as exc:
            raise typer.BadParameter(f"cannot write --out {out}: {exc}; choose a file in an existing, writable "
                                     "directory") from None
        typer.echo(f"wrote {table.num_rows} rows to {out}")
        return
    width = None if out else shutil.get_terminal_size((120, 24)).columns
    with limited(con, limits):
        result = run_query(con, text, params)
    rendered = render(result, fmt, width=width)
    if out:
        _write(out, rendered + "\n")
        typer.echo(f"wrote {out}")
    else:
        typer.echo(rendered)


def tables(warehouse: WarehouseOpt = None, fmt: OutputOpt = "text") -> None:
    """List tables and views with row counts, then the SQL macros with their parameters."""
    from ..engines.db import ident, macro_signatures, view_names

    check_output(fmt)
    con = _open(warehouse)
    relations = []
    for name, kind in view_names(con):
        if name.startswith("stg_"):
            continue
        try:
            n = con.execute(f"SELECT count(*) FROM {ident(name)}").fetchone()[0]
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
