"""`spark-views`: the Spark SQL DDL of the warehouse views (the same views `connect` creates on DuckDB)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .options import WarehouseOpt

EngineOpt = Annotated[str, typer.Option("--engine", help="duckdb (default, in-process) or spark (a local Spark "
                                                         "session, or the cluster SPARK_REMOTE names; extra `spark`).")]


def check_engine(engine: str) -> str:
    if engine not in ("duckdb", "spark"):
        raise typer.BadParameter(f"--engine {engine!r}: use duckdb or spark")
    return engine


def spark_views(
    warehouse: WarehouseOpt = None,
    exports: Annotated[bool, typer.Option("--exports/--no-exports", help="Include the exports layer (export_* views).")] = True,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the DDL to this file instead of stdout.")] = None,
) -> None:
    """Print the Spark SQL that creates every view over the current snapshot's files: paste it into a Spark SQL
    session (spark-sql, a notebook, Spark Connect) or use shopsim_wh.engines.spark.register(spark, warehouse) from Python."""
    from ..engines.spark import spark_ddl
    from ..store.warehouse import default_root

    text = spark_ddl(default_root(warehouse), exports=exports)
    if out:
        out.write_text(text, encoding="utf-8")
        typer.echo(f"wrote {out}")
    else:
        typer.echo(text)


def run_sql_spark(root, text: str, params: dict):
    """One query on Spark over the translated views: (columns, rows)."""
    from ..engines.spark import register, session, translator
    from ..engines.spark_guard import bind_on_duckdb, check, run_guarded, temp_views

    bind_on_duckdb(root, text, params)  # DuckDB's sandbox first: its functions, the warehouse's views only
    query = translator().query(text)
    spark = session()
    register(spark, root, exports=False, only=query)  # the views the query reads, not every view
    return run_guarded(spark, check(query, temp_views(spark)), params)


def register(app: typer.Typer) -> None:
    app.command("spark-views")(spark_views)
