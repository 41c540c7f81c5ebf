"""A persistent DuckDB catalog of a warehouse, for BI tools (docs/bi.md): ``shopsim-wh catalog``.

:func:`build_catalog` writes one ``.duckdb`` file holding every view and macro of ``sql/`` over the
warehouse's current snapshot, exactly as :func:`shopsim_wh.engines.db.connect` installs them, with two differences:

* ``stg_<table>`` is always a view over the snapshot's own file list (absolute paths, never a glob), never a
  TEMP copy: TEMP tables do not outlive a connection, and the file must work when a BI tool opens it without
  shopsim-wh. Queries read the Parquet files at query time, so the catalog shows exactly the snapshot it was
  built from; ``catalog_info`` says which one (``doctor`` reports a catalog older than the warehouse).
* every table, view, column and macro carries a ``COMMENT`` taken from ``schema.py`` (tables and their
  columns) and the ``.sql`` files' comment headers (views, macros, derived columns), so a BI tool's schema
  browser explains what it shows.

The file is written under a temporary name in the target directory and renamed over the old one, so a
reader opens the old catalog or the new one, never a half-written file. A catalog pins the files of its
snapshot: after ``compact`` or ``runs rm`` those files are deleted by ``vacuum`` once the grace period is
over, so every command that commits refreshes the warehouse's default catalog (:func:`refresh_existing`).
"""

from __future__ import annotations

import os
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from .. import __version__
from ..core.errors import WarehouseError

DEFAULT_NAME = "catalog.duckdb"
# The DuckDB release whose storage format the file is written in: v1.0.0 (storage version 64) is read by every
# DuckDB since 1.0, so by the 1.x drivers BI tools and notebooks still ship (a file in the installed DuckDB's
# newest format is refused by them: "can only read version 64"). Nothing the catalog holds needs newer storage
# (views and macros are stored as SQL text, catalog_info is a small VARCHAR table, comments exist since 0.10).
DEFAULT_STORAGE_VERSION = "v1.0.0"
_CREATE = re.compile(r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP\s+)?(VIEW|MACRO|TABLE)\s+(\w+)",
                     re.IGNORECASE | re.MULTILINE)
RUN_ID_DOC = "Run id: the warehouse partition of the row (taken from the Hive path `run_id=<id>`)."


def default_catalog_path(root: str | os.PathLike) -> Path:
    """Where ``shopsim-wh catalog`` writes without ``--out``: ``<warehouse>/catalog.duckdb``."""
    from ..store.storage import is_url

    if is_url(str(root)):
        raise WarehouseError(f"{root} is in object storage: pass --out FILE.duckdb for the catalog (a local file)")
    return Path(root) / DEFAULT_NAME


@dataclass
class CatalogInfo:
    path: Path
    snapshot_version: int
    views: int
    macros: int
    comments: int
    seconds: float

    def as_dict(self) -> dict:
        return {"path": str(self.path), "snapshot_version": self.snapshot_version, "views": self.views,
                "macros": self.macros, "comments": self.comments, "seconds": round(self.seconds, 3)}


@dataclass
class SqlObject:
    name: str
    kind: str  # view | macro | table
    file: str  # layer/file.sql
    doc: str  # the comment block above its CREATE (else the file's header), one line
    block: list[str]  # that comment block's lines
    body: str  # the statement text
    reads: frozenset[str] = frozenset()  # the warehouse tables its text names (table or stg_table)


def _comment_block(lines: list[str], end: int) -> list[str]:
    """The contiguous ``--`` lines right above line ``end``."""
    out: list[str] = []
    i = end - 1
    while i >= 0 and lines[i].lstrip().startswith("--"):
        out.insert(0, lines[i].lstrip()[2:].strip())
        i -= 1
    return out


def sql_objects() -> list[SqlObject]:
    """Every view / macro the shipped SQL creates, with the comment that documents it."""
    from ..core.schema import TABLES
    from .db import ordered_sql, sql_dir

    objects: list[SqlObject] = []
    for name, text in ordered_sql(str(sql_dir())):
        lines = text.splitlines()
        header = _comment_block(lines, next((i for i, ln in enumerate(lines) if not ln.lstrip().startswith("--")),
                                            len(lines)))
        matches = list(_CREATE.finditer(text))
        for n, m in enumerate(matches):
            line_no = text.count("\n", 0, m.start())
            block = _comment_block(lines, line_no) or header
            body = text[m.start(): matches[n + 1].start() if n + 1 < len(matches) else len(text)]
            doc = " ".join(x for x in block if x)
            words = set(re.findall(r"\w+", body))
            reads = frozenset(t for t in TABLES if t in words or f"stg_{t}" in words)
            objects.append(SqlObject(m.group(2), m.group(1).lower(), name, f"{doc} (sql/{name})".strip(), block, body,
                                     reads))
    return objects


def _clause(block: list[str], column: str) -> str | None:
    """What the header says about ``column``: the clauses (split at ';' and sentence ends) that define it
    (``column = ...`` / ``column: ...``), else those that name it as a word; None when none does."""
    text = " ".join(x for x in block if x)
    clauses = [c.strip() for c in re.split(r"(?<=[;.])\s+|\s{2,}", text) if c.strip()]
    word = rf"(?<![\w.$]){re.escape(column)}(?![\w(])"
    defines = [c for c in clauses if re.search(word + r"\s*(=|:|\()", c)]
    hits = defines or [c for c in clauses if re.search(word, c)]
    return " ".join(hits[:2])[:400] if hits else None


def column_doc(view: str, column: str, obj: SqlObject | None) -> str:
    """A column's description: schema.py for a table's own columns, else the view header's clause naming it,
    else the declared column of the same name in a table the view reads, else a pointer to its SQL file."""
    from ..core.schema import TABLES

    if column == "run_id":
        return RUN_ID_DOC
    table = TABLES.get(view.removeprefix("stg_"))
    if table is not None and column in table.column_names:
        return next(c.doc for c in table.columns if c.name == column)
    if obj is None:
        return f"Column {column} of {view}."
    clause = _clause(obj.block, column)
    if clause:
        return clause
    for t in TABLES.values():
        if t.name in obj.reads and column in t.column_names:
            return f"As {t.name}.{column}: " + next(c.doc for c in t.columns if c.name == column)
    return f"Column {column} of {view} (sql/{obj.file})."


def _comment(out: list[str], kind: str, name: str, text: str) -> None:
    from .db import ident, sql_string

    out.append(f"COMMENT ON {kind} {name if kind == 'COLUMN' else ident(name)} IS {sql_string(text)}")


def build_catalog(root: str | os.PathLike, out: str | os.PathLike | None = None,
                  storage_version: str = DEFAULT_STORAGE_VERSION) -> CatalogInfo:
    """Write (or atomically replace) the catalog file of warehouse ``root``; ``out`` defaults to
    ``<root>/catalog.duckdb``. ``storage_version``: the oldest DuckDB release that must read the file (``v1.0.0``,
    ``v1.2.0``, ...) or ``latest`` (the installed DuckDB's own format)."""
    import duckdb

    from ..core.schema import SCHEMA_VERSION, TABLES
    from ..store.warehouse import Warehouse, location
    from .db import ident, install_views, macro_signatures, sql_string

    t0 = time.perf_counter()
    wh = Warehouse(root)
    if not wh.exists():
        raise WarehouseError(f"no warehouse at {root}; pass --warehouse DIR or create one with `shopsim-wh run CONFIG`")
    out = Path(out) if out is not None else default_catalog_path(root)
    if out.exists() and out.is_dir():
        raise WarehouseError(f"{out} is a directory; pass --out FILE.duckdb")
    out.parent.mkdir(parents=True, exist_ok=True)
    snap = wh.snapshot()
    tmp = out.with_name(f".{out.stem}-{uuid.uuid4().hex[:12]}.tmp.duckdb")
    try:
        con = _connect_new(duckdb, tmp, storage_version)
        try:
            wh.register(con, snap)  # s3://: the file's views need the same registration when reopened (docs/scale.md)
            install_views(con, wh, snap, small_table_bytes=0)
            con.execute("BEGIN")
            con.execute("CREATE TABLE catalog_info (key VARCHAR, value VARCHAR)")
            info = {"warehouse": location(root), "snapshot_version": str(snap.version),
                    "snapshot_committed_at": str(snap.committed_at), "schema_version": str(SCHEMA_VERSION),
                    "tool_version": __version__, "duckdb_version": duckdb.__version__,
                    "storage_version": storage_version, "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            con.executemany("INSERT INTO catalog_info VALUES (?, ?)", list(info.items()))
            n = _comment_all(con, snap, TABLES, ident, sql_string)
            macros = macro_signatures(con)
            n_views = con.execute("SELECT count(*) FROM duckdb_views() WHERE NOT internal AND schema_name = 'main'").fetchone()[0]
            con.execute("COMMIT")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        if Path(f"{tmp}.wal").exists():
            raise WarehouseError(f"DuckDB left a write-ahead log beside {tmp}; the catalog was not replaced")
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}.wal").unlink(missing_ok=True)
    return CatalogInfo(out, snap.version, int(n_views), len(macros), n, time.perf_counter() - t0)


def _connect_new(duckdb, path: Path, storage_version: str):
    """A new database file in the storage format of DuckDB release ``storage_version`` (DuckDB 1.1, which has no
    such setting, writes the 1.0 format anyway)."""
    if tuple(int(x) for x in re.findall(r"\d+", duckdb.__version__)[:2]) < (1, 2):
        return duckdb.connect(str(path))
    try:
        return duckdb.connect(str(path), config={"storage_compatibility_version": storage_version})
    except duckdb.InvalidInputException as exc:
        raise WarehouseError(f"--storage-version {storage_version!r} is not a DuckDB release this DuckDB "
                             f"({duckdb.__version__}) knows: pass one such as v1.0.0 (read by every DuckDB since 1.0, "
                             "the default), v1.2.0, or latest") from exc


def _comment_all(con, snap, tables, ident, sql_string) -> int:
    """Every COMMENT statement (run inside the caller's transaction: a commit per statement costs more than the
    statement); returns how many."""
    objects = {o.name: o for o in sql_objects()}
    stmts: list[str] = []
    _comment(stmts, "TABLE", "catalog_info", "Which warehouse snapshot this catalog file was built from (key/value): "
             "warehouse, snapshot_version, schema_version, tool_version, duckdb_version, built_at. Rebuild with `shopsim-wh catalog`.")
    for name, spec in tables.items():
        files = len(snap.files(name))
        _comment(stmts, "VIEW", f"stg_{name}", f"Table {name}: {spec.grain}. Reads exactly the {files} Parquet file(s) "
                 f"of warehouse snapshot {snap.version} (all attempts; the view without stg_ keeps the final one).")
    views = [r[0] for r in con.execute(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal AND schema_name = 'main'").fetchall()]
    for view in views:
        if view in objects:
            _comment(stmts, "VIEW", view, objects[view].doc)
    # one duckdb_columns() call: each call binds every view, which costs more than all the comments together
    for view, col in con.execute("SELECT table_name, column_name FROM duckdb_columns() WHERE schema_name = 'main' "
                                 "AND table_name IN (SELECT unnest(?)) ORDER BY table_name, column_index",
                                 [views]).fetchall():
        _comment(stmts, "COLUMN", f"{ident(view)}.{ident(col)}", column_doc(view, col, objects.get(view)))
    for name, kind, _ in con.execute(
            "SELECT DISTINCT function_name, function_type, parameters FROM duckdb_functions() WHERE schema_name = 'main' "
            "AND NOT internal AND function_type IN ('table_macro', 'macro')").fetchall():
        obj = objects.get(name)
        text = obj.doc if obj else f"Macro {name}."
        stmts.append(f"COMMENT ON MACRO {'TABLE ' if kind == 'table_macro' else ''}{ident(name)} IS {sql_string(text)}")
    for (col,) in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'catalog_info'").fetchall():
        _comment(stmts, "COLUMN", f"catalog_info.{ident(col)}", "Setting name." if col == "key" else "Its value (text).")
    for stmt in stmts:  # one at a time: as a single script DuckDB takes twice as long
        con.execute(stmt)
    return len(stmts)


def refresh_existing(root: str | os.PathLike, *paths: str | os.PathLike | None) -> list[CatalogInfo]:
    """Rebuild the warehouse's default catalog when it exists, and every path given (a configured
    ``output.catalog``), each in the storage version it was built with; returns what was written."""
    from ..store.storage import is_url

    targets = [Path(p) for p in paths if p]
    if not is_url(str(root)):  # an object-store warehouse has no default catalog beside it
        default = default_catalog_path(root)
        if default.exists() and all(t.resolve() != default.resolve() for t in targets):
            targets.insert(0, default)
    return [build_catalog(root, t, _info(t, "storage_version") or DEFAULT_STORAGE_VERSION) for t in targets]


def catalog_snapshot(path: str | os.PathLike) -> int | None:
    """The snapshot version a catalog file was built from (None when the file has no catalog_info)."""
    value = _info(path, "snapshot_version")
    return int(value) if value is not None else None


def _info(path: str | os.PathLike, key: str) -> str | None:
    """One value of a catalog file's ``catalog_info`` (None: no file, no such table or key)."""
    import duckdb

    if not Path(path).is_file():
        return None
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:  # not a DuckDB file (or one this DuckDB cannot read): rebuilt in the default version
        return None
    try:
        row = con.execute("SELECT value FROM catalog_info WHERE key = ?", [key]).fetchone()
    except duckdb.Error:
        return None
    finally:
        con.close()
    return row[0] if row else None
