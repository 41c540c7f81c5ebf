"""DuckDB over a warehouse: staging views from the current snapshot, then the layered ``sql/`` views.

``connect(root)`` returns a DuckDB connection where

* ``stg_<table>`` reads exactly the files of the current snapshot (never a glob: see warehouse.py),
  with ``run_id`` taken from the Hive path;
* every ``.sql`` file under ``sql/<layer>/`` is executed, layers in :data:`LAYERS` order. A file may
  depend on views of earlier layers and, within its layer, on others (resolved by retrying).

User values never reach SQL text: callers pass them as parameters. The only text this module
splices into SQL is file paths and identifiers, through :func:`sql_string` / :func:`ident`.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import duckdb
import pyarrow as pa

from .errors import WarehouseError
from .schema import PARTITION_KEY, TABLES
from .warehouse import Snapshot, Warehouse

LAYERS = ("base", "ir", "analytics", "exports")

_DUCK_TYPES = {
    pa.string(): "VARCHAR", pa.int16(): "SMALLINT", pa.int32(): "INTEGER", pa.int64(): "BIGINT",
    pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN", pa.timestamp("us", tz="UTC"): "TIMESTAMPTZ",
}


def sql_string(value: str) -> str:
    """Quote a string literal (for paths in DDL, where parameters are not allowed)."""
    return "'" + str(value).replace("'", "''") + "'"


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sql_dir() -> Path:
    """The shipped SQL: ``shopsim_wh/sql`` in a wheel, ``<repo>/sql`` in a source checkout."""
    packaged = Path(str(resources.files("shopsim_wh"))) / "sql"
    if packaged.is_dir():
        return packaged
    repo = Path(__file__).resolve().parent.parent / "sql"
    if repo.is_dir():
        return repo
    raise WarehouseError("cannot find the shipped sql/ directory; reinstall shopsim-wh")


def sql_files() -> list[Path]:
    root = sql_dir()
    return [f for layer in LAYERS for f in sorted((root / layer).glob("*.sql"))]


def staging_sql(wh: Warehouse, snap: Snapshot, table: str) -> str:
    spec = TABLES[table]
    entries = snap.files(table)
    if not entries:
        cols = [f"CAST(NULL AS VARCHAR) AS {PARTITION_KEY}"] + [
            f"CAST(NULL AS {_DUCK_TYPES[c.type]}) AS {ident(c.name)}" for c in spec.columns
        ]
        return f"SELECT {', '.join(cols)} WHERE false"
    paths = ", ".join(sql_string(str(wh.abspath(e).resolve())) for e in entries)
    return (
        f"SELECT {PARTITION_KEY}, * EXCLUDE ({PARTITION_KEY}) FROM read_parquet([{paths}], "
        f"hive_partitioning = true, hive_types = {{'{PARTITION_KEY}': VARCHAR}}, union_by_name = true)"
    )


def install_views(con: duckdb.DuckDBPyConnection, wh: Warehouse, snap: Snapshot | None = None) -> None:
    snap = snap or wh.snapshot()
    for table in TABLES:
        con.execute(f"CREATE OR REPLACE VIEW {ident('stg_' + table)} AS {staging_sql(wh, snap, table)}")
    pending = [(f, f.read_text()) for f in sql_files()]
    while pending:
        failed = []
        for path, text in pending:
            try:
                con.execute(text)
            except duckdb.CatalogException as exc:
                failed.append((path, text, exc))
        if len(failed) == len(pending):
            path, _, exc = failed[0]
            raise WarehouseError(f"cannot create the views in {path.name}: {exc}")
        pending = [(p, t) for p, t, _ in failed]


def connect(root: str | os.PathLike, database: str = ":memory:", threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """Open DuckDB with every warehouse view installed (reads the current snapshot once)."""
    wh = Warehouse(root)
    con = duckdb.connect(database)
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    install_views(con, wh)
    return con


def view_names(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    rows = con.execute(
        "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = 'main' ORDER BY 1"
    ).fetchall()
    return [(n, t) for n, t in rows]


def fetch_arrow(result: duckdb.DuckDBPyConnection) -> pa.Table:
    """The executed query's result as an Arrow table (DuckDB 2.x `to_arrow_table`, 1.x `fetch_arrow_table`)."""
    fn = getattr(result, "to_arrow_table", None) or result.fetch_arrow_table
    return fn()
