"""DuckDB over a warehouse: staging views from the current snapshot, then the layered ``sql/`` views.

``connect(root)`` returns a DuckDB connection where

* ``stg_<table>`` reads exactly the files of the current snapshot (never a glob: see warehouse.py),
  with ``run_id`` taken from the Hive path. A small table (its snapshot files total at most
  ``small_table_bytes``) is copied once into a TEMP table ``stg_<table>`` instead: every Parquet
  scan pays per-file set-up (about 1-3 ms here) however few its rows, which dominates queries on small
  tables, and the copy is exact because a connection reads one snapshot for its whole life;
* every ``.sql`` file under ``sql/<layer>/`` is executed, layers in :data:`LAYERS` order, except the
  ``exports`` layer: only exports read it, so :func:`install_exports` adds it to a connection on demand
  (``shopsim_wh.export`` calls it). A file may depend on views of earlier layers and, within its layer, on others
  (resolved by retrying).

On a DuckDB that has ``CREATE VIEW ... WITH (DEFER_BINDING)`` (2.0 and later; 1.5.x answers "Not implemented")
an in-memory connection creates the views unbound: DuckDB binds a view's query each time a query reads it anyway,
so binding every view of the deep stacks at ``CREATE`` (~0.15 s of CPU per connection, ~0.7 s for the exports
layer: bench/bench_connect.py) bought nothing but an early error. A database file (``connect(database=...)``, the BI catalog) keeps bound views: older DuckDBs and BI tools
read their column lists from the file. A broken view therefore fails when it is read; the tests read every one.

User values never reach SQL text: callers pass them as parameters. The only text this module
splices into SQL is file paths and identifiers, through :func:`sql_string` / :func:`ident`.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import duckdb
import pyarrow as pa

from ..core.errors import WarehouseError
from ..core.schema import TABLES
from ..core.sqltext import ident, sql_string  # noqa: F401  (re-exported: the SQL helpers' old home)
from ..store.warehouse import Snapshot, Warehouse, staging_sql

LAYERS = ("base", "ir", "analytics", "exports")
ON_DEMAND_LAYERS = ("exports",)  # installed by install_exports(), not by connect()
SMALL_TABLE_BYTES = 512 << 10  # on-disk bytes: at 5,000 episodes runs, episodes, agents, tools and the other small tables


def sql_dir() -> Path:
    """The shipped SQL: ``shopsim_wh/sql`` in a wheel, ``<repo>/sql`` in a source checkout."""
    packaged = Path(str(resources.files("shopsim_wh"))) / "sql"
    if packaged.is_dir():
        return packaged
    repo = Path(__file__).resolve().parents[2] / "sql"
    if repo.is_dir():
        return repo
    raise WarehouseError("cannot find the shipped sql/ directory; reinstall shopsim-wh")


def sql_files() -> list[Path]:
    root = sql_dir()
    return [f for layer in LAYERS for f in sorted((root / layer).glob("*.sql"))]


_DEFINES = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP\s+)?(?:VIEW|MACRO|TABLE)\s+(\w+)", re.IGNORECASE)


@functools.lru_cache(maxsize=4)
def ordered_sql(root: str) -> tuple[tuple[str, str], ...]:
    """The shipped SQL files in dependency order: layers in LAYERS order, within a layer a file after every
    file whose views/macros it names (a topological sort on the names each file defines)."""
    out: list[tuple[str, str]] = []
    for layer in LAYERS:
        files = {f.name: f.read_text() for f in sorted((Path(root) / layer).glob("*.sql"))}
        code = {name: re.sub(r"--[^\n]*", "", text) for name, text in files.items()}  # names in comments are no deps
        defines = {name: {n.lower() for n in _DEFINES.findall(text)} for name, text in code.items()}
        used = {name: {w.lower() for w in re.findall(r"\w+", text)} for name, text in code.items()}  # one pass a file
        deps = {name: {other for other, names in defines.items() if other != name and (names - defines[name]) & used[name]}
                for name in code}
        done: set[str] = set()
        while len(done) < len(files):
            ready = [n for n in files if n not in done and deps[n] <= done] or [n for n in files if n not in done][:1]
            for n in ready:
                out.append((f"{layer}/{n}", files[n]))
                done.add(n)
    return tuple(out)


def words(sql: str) -> set[str]:
    """The lower-cased words of ``sql``, comments aside: the names it may read."""
    return {w.lower() for w in re.findall(r"\w+", re.sub(r"--[^\n]*", "", sql))}


@functools.lru_cache(maxsize=1)
def shipped_definitions() -> dict[str, str]:
    """The code (comments stripped) of every shipped statement, by the view, table or macro it defines
    (lower-cased; a macro defined more than once: all its definitions)."""
    out: dict[str, str] = {}
    for _, text in ordered_sql(str(sql_dir())):
        name = None
        for stmt in re.sub(r"--[^\n]*", "", text).split(";"):
            m = _DEFINES.search(stmt)
            name = m.group(1).lower() if m else name  # no CREATE: the rest of one cut at a ';' in a string
            if name:
                out[name] = out.get(name, "") + stmt
    return out


@functools.lru_cache(maxsize=1)
def shipped_refs() -> dict[str, set[str]]:
    """Each shipped view, table or macro and the words of its code (:func:`words`, :func:`shipped_definitions`)."""
    return {name: words(code) for name, code in shipped_definitions().items()}


def reachable(start, refs: dict[str, set[str]]) -> set[str]:
    """The names of ``refs`` that ``start`` (names or words) reaches, themselves included, following each name's
    ``refs`` transitively: what a query or a view stack reads. The export layer (which views to install and
    materialize, which base columns to copy) and Spark's registration ask it."""
    out: set[str] = set()
    todo = set(start) & refs.keys()
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            todo |= refs[name] & refs.keys()
    return out


def _defined(text: str) -> set[str]:
    return {n.lower() for n in _DEFINES.findall(re.sub(r"--[^\n]*", "", text))}


def _reaching(files: list[tuple[str, str]], reads: set[str]) -> list[tuple[str, str]]:
    """``files`` less the analytics files that nothing in ``reads`` (words of the SQL to be run) reaches; a kept
    file's other statements are followed too, so every view a kept file creates can bind."""
    refs, keep = shipped_refs(), set()
    want = reachable({w.lower() for w in reads}, refs)
    while True:
        more = {n for n, t in files if n not in keep and (not n.startswith("analytics/") or _defined(t) & want)}
        if not more:
            return [(n, t) for n, t in files if n in keep]
        keep |= more
        want |= reachable(set().union(*(_defined(t) for n, t in files if n in more)), refs)


def install_views(con: duckdb.DuckDBPyConnection, wh: Warehouse, snap: Snapshot | None = None,
                  small_table_bytes: int = 0, reads: set[str] | None = None) -> None:
    """Create the ``stg_`` views of ``snap`` (default: the current snapshot), then every shipped view.

    A table whose files total at most ``small_table_bytes`` on disk becomes a TEMP table ``stg_<table>``
    holding its rows instead (a table, not a view over one: each view layer costs planning time on every
    query); 0 keeps every table on Parquet. ``reads`` (the words of the SQL the connection will run, e.g. an
    export's): the base and ir layers as always, of the analytics layer only the files that SQL reaches (where
    creating a view binds it, before DuckDB 2.0 or in a database file, the analytics layer is half of the ~0.25 s
    a connection spends on views).
    """
    snap = snap or wh.snapshot()
    db = ident(con.execute("SELECT current_database()").fetchone()[0])
    for table in TABLES:
        name, select = ident("stg_" + table), staging_sql(wh, snap, table)
        entries = snap.files(table)
        # each branch drops the other kind first: re-installing on a connection may switch a table's kind
        if entries and sum(e.bytes for e in entries) <= small_table_bytes:
            con.execute(f"DROP VIEW IF EXISTS {db}.main.{name}")
            con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {select}")
        else:
            con.execute(f"DROP TABLE IF EXISTS temp.main.{name}")
            con.execute(f"CREATE OR REPLACE VIEW {db}.main.{name} AS {select}")
    files = [(n, t) for n, t in ordered_sql(str(sql_dir())) if n.split("/")[0] not in ON_DEMAND_LAYERS]
    _execute_all(con, files if reads is None else _reaching(files, reads))


def install_exports(con: duckdb.DuckDBPyConnection, views: set[str] | None = None) -> None:
    """Add the exports layer (sql/exports: building blocks and kinds) to a connection from :func:`connect`;
    a no-op when it is there already. ``views``: install the building blocks (``00_*.sql``) and only the kind
    files defining one of these views (where creating a view binds it, all the kinds cost ~0.8 CPU-s, one
    export's a fraction of that; unbound, ~0.05 s); for a connection of its own, since a later call without
    ``views`` is then a no-op."""
    if con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'export_decisions'").fetchone()[0]:
        return
    _execute_all(con, export_files(views))


def export_files(views: set[str] | None = None) -> list[tuple[str, str]]:
    """The files of sql/exports that :func:`install_exports` runs for ``views`` (None: all)."""
    files = [(n, t) for n, t in ordered_sql(str(sql_dir())) if n.startswith("exports/")]
    if views is not None:
        files = [(n, t) for n, t in files if n.startswith("exports/00_")
                 or set(_DEFINES.findall(re.sub(r"--[^\n]*", "", t))) & views]
    return files


_VIEW_HEAD = re.compile(r"(CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP(?:ORARY)?\s+)?VIEW\s+\w+)(\s+AS\b)", re.IGNORECASE)


@functools.lru_cache(maxsize=1)
def defers_binding() -> bool:
    """Whether this DuckDB creates a view without binding its query (``WITH (DEFER_BINDING)``)."""
    try:
        duckdb.connect().execute("CREATE VIEW probe WITH (DEFER_BINDING) AS SELECT * FROM no_such_table")
    except duckdb.Error:
        return False
    return True


def deferred(text: str) -> str:
    """``text`` with every ``CREATE [OR REPLACE] [TEMP] VIEW name AS`` made ``... name WITH (DEFER_BINDING) AS``."""
    return _VIEW_HEAD.sub(r"\1 WITH (DEFER_BINDING)\2", text)


def _in_memory(con: duckdb.DuckDBPyConnection) -> bool:
    return con.execute("SELECT path IS NULL FROM duckdb_databases() WHERE database_name = current_database()"
                       ).fetchone()[0]


def _execute_all(con: duckdb.DuckDBPyConnection, files: list[tuple[str, str]]) -> None:
    if _in_memory(con) and defers_binding():  # the module docstring says why, and why not for a database file
        files = [(name, deferred(text)) for name, text in files]
    pending = list(files)
    while pending:  # the order is a sort on names found in the text; a retry covers what a regex misses
        failed = []
        for name, text in pending:
            try:
                con.execute(text)
            except duckdb.CatalogException as exc:
                failed.append((name, text, exc))
        if len(failed) == len(pending):
            name, _, exc = failed[0]
            raise WarehouseError(f"cannot create the views in sql/{name}: {exc}")
        pending = [(n, t) for n, t, _ in failed]


def connect(root: str | os.PathLike, database: str = ":memory:", threads: int | None = None,
            small_table_bytes: int | None = None) -> duckdb.DuckDBPyConnection:
    """Open DuckDB with every warehouse view installed (reads the current snapshot once).

    ``small_table_bytes`` (default :data:`SMALL_TABLE_BYTES`; 0 turns it off) is the on-disk size up to which
    a table is copied into memory at connect. A ``database`` file never gets the copies: its views must still
    work when a BI tool reopens the file without this function, and TEMP tables do not outlive a connection.
    """
    if small_table_bytes is None:
        small_table_bytes = SMALL_TABLE_BYTES if database == ":memory:" else 0
    elif small_table_bytes and database != ":memory:":
        raise WarehouseError(
            "small_table_bytes needs an in-memory database: a database file's views must outlive this connection; "
            "pass small_table_bytes=0 (or leave it unset) with database=...")
    wh = Warehouse(root)
    snap = wh.snapshot()
    con = duckdb.connect(database)
    wh.register(con, snap)  # an s3:// warehouse: DuckDB reads its objects through s3fs (docs/scale.md)
    con.execute("SET parquet_metadata_cache = true")  # footers are read once per connection, not per query
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    install_views(con, wh, snap, small_table_bytes=small_table_bytes)
    return con


def macro_signatures(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str, list[str]]]:
    """The shipped SQL macros: (name, 'table_macro' | 'macro', parameter names)."""
    return con.execute(
        "SELECT DISTINCT function_name, function_type, parameters FROM duckdb_functions() "
        "WHERE schema_name = 'main' AND NOT internal AND function_type IN ('table_macro', 'macro') ORDER BY 1"
    ).fetchall()


def view_names(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    rows = con.execute(
        "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = 'main' ORDER BY 1"
    ).fetchall()
    return [(n, t) for n, t in rows]


def fetch_arrow(con: duckdb.DuckDBPyConnection, query: str | None = None, params: dict | list | None = None) -> pa.Table:
    """A query's result as an Arrow table, read from a relation (``con.sql``): DuckDB 2.x warns ("makes an extra
    copy of the rows") when Arrow is fetched from a DB-API ``execute`` result. Without ``query``, ``con`` is such an
    executed result (the old call form)."""
    if query is None:
        fn = getattr(con, "to_arrow_table", None) or con.fetch_arrow_table
        return fn()
    rel = con.sql(query, params=params or None)
    if rel is None:
        raise WarehouseError("the statement returns no rows to write; give a SELECT (or a query that returns rows)")
    fn = getattr(rel, "to_arrow_table", None) or rel.arrow
    return fn()


def as_connection(con_or_warehouse: duckdb.DuckDBPyConnection | str | os.PathLike,
                  opener: Callable[[str | os.PathLike], duckdb.DuckDBPyConnection] | None = None
                  ) -> duckdb.DuckDBPyConnection:
    """The library entry points take an open connection or a warehouse path; this is the one place that decides.
    A path is opened with ``opener``: :func:`connect` by default, :func:`shopsim_wh.engines.sandbox.connect` for entry
    points that run user SQL."""
    if isinstance(con_or_warehouse, duckdb.DuckDBPyConnection):
        return con_or_warehouse
    return (opener or connect)(con_or_warehouse)
