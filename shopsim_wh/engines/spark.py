"""The warehouse views on Spark SQL, translated from the one source of truth in ``sql/``.

``register(spark, warehouse)`` creates in a SparkSession

* ``stg_<table>``: a temporary view over exactly the current snapshot's files of each table (never a glob), with
  ``run_id`` from the Hive path (``basePath`` partition discovery, typed STRING by the declared schema), like
  :func:`shopsim_wh.store.warehouse.staging_sql` on DuckDB;
* every base, IR and analytics view and (``exports=True``) the exports layer, each statement of ``sql/`` parsed
  as DuckDB SQL and written as Spark SQL by sqlglot after :mod:`shopsim_wh.engines.spark_sql` rewrote the DuckDB-only
  constructs (macros inlined, ``getvariable`` as session variables, JSON and list functions mapped; see
  docs/scale.md "Views on Spark" for the table).

Views that do not translate yet are listed in :data:`UNSUPPORTED` with the reason; ``register`` skips them (and
whatever reads them) and returns what it created. pyspark and sqlglot are imported lazily (extra ``spark``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import WarehouseError
from ..core.schema import PARTITION_KEY, TABLES

# view -> why it is not created on Spark (the list can only shrink: tests/test_spark.py asserts it exactly)
UNSUPPORTED: dict[str, str] = {
    "export_slime_samples": (
        "slime's `Sample.to_dict()` keeps JSON nulls (`label`, `generate_function_path`, ...): Spark's `to_json` "
        "drops null fields and its JSON path reads give a JSON null as the text `null`; export it with the DuckDB "
        "engine"),
}

# view -> why it is created on Spark but its rows are not yet DuckDB's (tests/test_spark.py asserts they still
# differ, so the list can only shrink)
NOT_EQUAL: dict[str, str] = {}

# export parameters (DuckDB variables) and their Spark session-variable types
EXPORT_VARIABLES = {
    "export_window": "BIGINT", "export_max_tokens": "BIGINT", "export_include_reasoning": "BOOLEAN",
    "export_include_persona": "BOOLEAN", "export_gamma": "DOUBLE", "export_min_margin": "DOUBLE",
    "export_min_step_margin": "DOUBLE", "export_max_pairs": "BIGINT", "export_prm_threshold": "DOUBLE",
    "export_decisions_subset": "BOOLEAN", "export_tool_version": "STRING",
}


def _spark_type(t) -> str:
    import pyarrow as pa

    names = {pa.string(): "STRING", pa.int16(): "SMALLINT", pa.int32(): "INT", pa.int64(): "BIGINT",
             pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN", pa.timestamp("us", tz="UTC"): "TIMESTAMP",
             pa.int8(): "TINYINT"}
    if pa.types.is_list(t):
        return f"ARRAY<{_spark_type(t.value_type)}>"
    return names[t]


def table_ddl_schema(table: str) -> str:
    """The Spark DDL schema of a warehouse table, ``run_id`` (the partition column) last."""
    cols = [f"`{c.name}` {_spark_type(c.type)}" for c in TABLES[table].columns]
    return ", ".join([*cols, f"`{PARTITION_KEY}` STRING"])


def _files(root: Path, table: str, snap) -> list[str]:
    return [str((root / e.path).resolve()) for e in snap.files(table)]


def staging_frames(spark, root, snap=None) -> dict:
    """{``stg_<table>``: DataFrame} over exactly the snapshot's files."""
    from ..store.warehouse import Warehouse

    wh = Warehouse(root)
    snap = snap or wh.snapshot()
    out = {}
    for table in TABLES:
        schema = table_ddl_schema(table)
        files = _files(wh.root, table, snap)
        if files:
            df = spark.read.schema(schema).option("basePath", str((wh.root / table).resolve())).parquet(*files)
        else:
            df = spark.createDataFrame([], schema)
        out["stg_" + table] = df.select(PARTITION_KEY, *TABLES[table].column_names)  # run_id first, as on DuckDB
    return out


def staging_ddl(root, snap=None) -> list[str]:
    """The ``stg_`` views as Spark SQL DDL (for ``shopsim-wh spark-views``): per table, one temporary view per
    snapshot file (``USING parquet`` with ``path`` and ``basePath``, so ``run_id`` comes from the Hive path) and
    their ``UNION ALL``. (A ``USING parquet`` view reads the ``path`` option only: Spark's ``paths`` list is for
    ``DataFrameReader.load``, and a view given it reads nothing.)"""
    from ..store.warehouse import Warehouse

    wh = Warehouse(root)
    snap = snap or wh.snapshot()
    out = []
    for table in TABLES:
        files = _files(wh.root, table, snap)
        name = f"stg_{table}"
        if not files:
            cols = ", ".join(f"CAST(NULL AS {t.split(' ', 1)[1]}) AS {t.split(' ', 1)[0]}"
                             for t in [table_ddl_schema(table).split(", ")[-1], *table_ddl_schema(table).split(", ")[:-1]])
            out.append(f"CREATE OR REPLACE TEMPORARY VIEW {name} AS SELECT {cols} WHERE false")
            continue
        cols = ", ".join(f"`{c}`" for c in [PARTITION_KEY, *TABLES[table].column_names])
        base = _quote(str((wh.root / table).resolve()))
        for i, f in enumerate(files):
            out.append(f"CREATE OR REPLACE TEMPORARY VIEW {name}__f{i} ({table_ddl_schema(table)}) USING parquet "
                       f"OPTIONS (path {_quote(f)}, basePath {base})")
        out.append(f"CREATE OR REPLACE TEMPORARY VIEW {name} AS "
                   + " UNION ALL ".join(f"SELECT {cols} FROM {name}__f{i}" for i in range(len(files))))
    return out


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass
class Registered:
    views: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # view -> reason


def view_statements(exports: bool = False) -> list[tuple[str, str, str]]:
    """(file, view name, Spark SELECT) for every shipped view in dependency order (macros are inlined, so they
    have no statement of their own). The translation is a pure function of the SQL text, the translator and
    sqlglot: computed once per process and kept in a file cache across processes (:func:`_cache_dir`)."""
    from .db import ON_DEMAND_LAYERS

    return [st for st in _statements() if exports or st[0].split("/")[0] not in ON_DEMAND_LAYERS]


@functools.lru_cache(maxsize=1)
def _statements() -> tuple[tuple[str, str, str], ...]:
    from .db import LAYERS, ordered_sql, sql_dir

    files = [(n, t) for n, t in ordered_sql(str(sql_dir())) if n.split("/")[0] in LAYERS]
    path = _cache_file(files)
    try:
        return tuple(tuple(x) for x in json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        pass
    tr = translator()
    out = tuple((name, view, sql) for name, text in files for view, sql in tr.file(text))
    try:  # a cache that cannot be written (read-only home) only costs the translation next time
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(out), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass
    return out


def _cache_dir() -> Path:
    """``SHOPSIM_WH_CACHE_DIR``, else ``$XDG_CACHE_HOME/shopsim-wh`` (``~/.cache/shopsim-wh``)."""
    if os.environ.get("SHOPSIM_WH_CACHE_DIR"):
        return Path(os.environ["SHOPSIM_WH_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "shopsim-wh"


def _cache_file(files: list[tuple[str, str]]) -> Path:
    """The cache file of a translation: named by the sha256 of everything it depends on (the SQL files, the
    translator's source, sqlglot's version), so a changed input never reads a stale translation."""
    import sqlglot

    from . import spark_sql

    h = hashlib.sha256(f"{sqlglot.__version__}\0".encode())
    h.update(Path(spark_sql.__file__).read_bytes())
    for name, text in files:
        h.update(f"\0{name}\0{text}".encode())
    return _cache_dir() / f"spark-views-{h.hexdigest()[:24]}.json"


@functools.lru_cache(maxsize=1)
def _translator():
    from .db import ordered_sql, sql_dir
    from .spark_sql import Translator

    tr = Translator()
    tr.learn_macros([t for _, t in ordered_sql(str(sql_dir()))])
    return tr


def translator():
    """A translator that knows every shipped macro (for user queries: `sql --engine spark`); one per process."""
    return _translator()


def needed(names, exports: bool = True) -> set[str]:
    """The shipped views that ``names`` (view names, or the text of a query) read, transitively, themselves
    included: what :func:`register` creates with ``only=``."""
    import re

    from .db import reachable

    by_view = {v: set(re.findall(r"\w+", sql)) for _, v, sql in view_statements(exports)}
    return reachable(set(re.findall(r"\w+", names)) if isinstance(names, str) else set(names), by_view)


def variable_ddl() -> list[str]:
    return [f"DECLARE OR REPLACE VARIABLE {n} {t} DEFAULT NULL" for n, t in EXPORT_VARIABLES.items()]


@dataclass(frozen=True)
class ExportsLayer:
    """How :func:`register` creates the exports layer: ``base=False`` creates only that layer (over the views created
    before); ``scope`` (run ids) replaces the default ``export_scope``; ``variables`` sets the export parameters
    (session variables) first. A view keeps the plan it was created with, so both must be in place before the layer
    is."""

    base: bool = True
    scope: list[str] | None = None
    variables: dict | None = None


def register(spark, warehouse, exports: bool = True, snap=None, materialize: tuple[str, ...] | bool = (), *,
             only=None, layer: ExportsLayer | None = None) -> Registered:
    """Create the ``stg_`` views of the warehouse's current snapshot (or ``snap``) and every translated view in
    ``spark``; returns the views created and those skipped (with the reason).

    ``only``: create just the views these names (or this query text) read, transitively (:func:`needed`):
    a query or an export registers what it needs, not the ~100 views. ``materialize``: views computed once
    (``localCheckpoint``) when created, as DuckDB's export computes its building blocks into TEMP tables; the
    views above them then analyse a leaf instead of the whole stack below (on a deep stack such as the exports'
    this is most of Spark's planning time); ``True`` materializes every view, in dependency order (each view
    then runs over its dependencies' rows: what the parity tests do). ``layer`` (:class:`ExportsLayer`): the
    exports layer alone, its scope and its parameters."""
    layer = layer if layer is not None else ExportsLayer()
    base, scope = layer.base, layer.scope
    root = Path(warehouse)
    if not (root / "_catalog").is_dir():
        raise WarehouseError(f"no warehouse at {root}; point --warehouse at one built by `run` or `ingest`")
    if base:
        for name, df in staging_frames(spark, root, snap).items():
            df.createOrReplaceTempView(name)
    if exports:
        for stmt in variable_ddl():
            spark.sql(stmt)
        for name, value in (layer.variables or {}).items():
            spark.sql(f"SET VAR {name} = :value", args={"value": value}) if value is not None else \
                spark.sql(f"SET VAR {name} = NULL")
    out = Registered()
    wanted = needed(only, exports) if only is not None else None
    pending = [(f, v, q) for f, v, q in view_statements(exports) if (base or f.startswith("exports/"))
               and (wanted is None or v in wanted)]
    for group in _levels(pending):
        created = []
        for file, view, sql in group:
            blocked = UNSUPPORTED.get(view) or next((f"reads {d} ({out.skipped[d]})" for d in out.skipped
                                                     if _names(sql, d)), None)
            if blocked:
                out.skipped[view] = blocked
                continue
            try:  # a DataFrame's temp view keeps its analysed plan: views over views are not re-analysed per use
                if view == "export_scope" and scope is not None:
                    df = spark.createDataFrame([(r,) for r in scope], "run_id STRING")
                else:
                    df = spark.sql(sql)
            except Exception as exc:  # noqa: BLE001 - the analyzer's reason is reported per view
                _failed(out, file, view, exc)
                continue
            created.append((file, view, df))
        # the views of one level read none of each other: their materializations run as concurrent Spark jobs
        with ThreadPoolExecutor(max_workers=2) as pool:
            done = [(file, view, pool.submit(df.localCheckpoint) if materialize is True or view in (materialize or ())
                     else df) for file, view, df in created]
            for file, view, df in done:
                try:
                    (df.result() if isinstance(df, Future) else df).createOrReplaceTempView(view)
                except Exception as exc:  # noqa: BLE001 - a failure at run time is reported per view too
                    _failed(out, file, view, exc)
                    continue
                out.views.append(view)
    return out


def _failed(out: Registered, file: str, view: str, exc: Exception) -> None:
    if os.environ.get("SHOPSIM_WH_SPARK_STRICT"):
        raise WarehouseError(f"Spark cannot create {view} (sql/{file}): {exc}") from exc
    out.skipped[view] = "Spark: " + " ".join(str(exc).split())[:300]


def _levels(statements: list[tuple[str, str, str]]) -> list[list[tuple[str, str, str]]]:
    """The statements grouped by depth: a view comes one level after the deepest view it names. Names in the text
    over-approximate the reads (a column may share a view's name), which only delays a view; should that close a
    cycle, the rest goes one view per level in file order (DuckDB's own order)."""
    views = {v for _, v, _ in statements}
    deps = {v: {d for d in views - {v} if _names(q, d)} for _, v, q in statements}
    level: dict[str, int] = {}
    rest = list(statements)
    while rest:
        ready = [st for st in rest if deps[st[1]] <= level.keys()]
        if not ready:  # a cycle of names: file order
            ready = rest[:1]
            deps[ready[0][1]] = deps[ready[0][1]] & level.keys()
        for st in ready:
            level[st[1]] = 1 + max((level[d] for d in deps[st[1]]), default=-1)
        rest = [st for st in rest if st[1] not in level]
    out: list[list] = [[] for _ in range(1 + max(level.values(), default=-1))]
    for st in statements:
        out[level[st[1]]].append(st)
    return out


def _names(sql: str, name: str) -> bool:
    import re

    return re.search(rf"(?<![\w.`]){re.escape(name)}(?![\w`])", sql) is not None


# the local session for small data (tests, a laptop's warehouse): a query over a few thousand rows spends its time
# compiling generated code and planning adaptive stages, not computing; measured on the test warehouse (16 views,
# materialized, 2 loaded cores): 32 s with these settings against 54 s with Spark's defaults
SMALL_DATA = {"spark.sql.adaptive.enabled": "false", "spark.sql.codegen.wholeStage": "false",
              "spark.sql.codegen.factoryMode": "NO_CODEGEN", "spark.sql.shuffle.partitions": "1"}
# and for the JVM a small-data session starts (options of its launch: no effect on a running one): the client JIT
# only (C1: the server compiler's CPU is not paid back in a short session) and the serial collector (one thread; the
# heap is at most 2 GB); on the test warehouse (every view materialized, 2 loaded cores) 89 CPU s against 131 with the JVM's
# defaults, and 9 CPU s against 16 to start the session. The client compiler fills the default 48 MB code cache
# about half-way through the views ("CodeCache is full. Compiler has been disabled": the rest runs interpreted);
# 240 MB holds them all: every view materialized in 43 s against 57 s
SMALL_DATA_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m"


def session(app: str = "shopsim-wh", master: str | None = None, small_data: bool = False):
    """A local SparkSession for the CLI (``local[2]``, 2 shuffle partitions, UI off, UTC) unless ``SPARK_REMOTE``
    or ``master`` names a cluster; ``small_data`` (or ``SHOPSIM_WH_SPARK_SMALL=1``): interpreted expressions, no
    adaptive planning, one shuffle partition (:data:`SMALL_DATA`), and a JVM launched for a short session
    (:data:`SMALL_DATA_JVM`)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise WarehouseError("Spark needs pyspark and sqlglot: pip install 'shopsim-wh[spark]' (and Java 17+)") from exc
    small = small_data or os.environ.get("SHOPSIM_WH_SPARK_SMALL") == "1"
    b = SparkSession.builder.appName(app)
    if small and not os.environ.get("SPARK_REMOTE"):
        b = b.config("spark.driver.extraJavaOptions", SMALL_DATA_JVM)
    if master or not os.environ.get("SPARK_REMOTE"):
        b = b.master(master or os.environ.get("SHOPSIM_WH_SPARK_MASTER", "local[2]"))
    spark = (b.config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "2g")
             .config("spark.sql.autoBroadcastJoinThreshold", "-1")  # the exports' wide plans broadcast too much
             .config("spark.ui.enabled", "false")
             .config("spark.sql.session.timeZone", "UTC").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    if small:
        for key, value in SMALL_DATA.items():
            spark.conf.set(key, value)
    spark.sparkContext.setLogLevel("ERROR")
    import logging

    # pyspark logs every failed statement with its JVM stack; register() reports the views it skips instead
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    return spark


def spark_ddl(root, exports: bool = True) -> str:
    """The whole Spark SQL script: ``stg_`` views over the current snapshot's files, the export session variables,
    then each translated view (views of :data:`UNSUPPORTED` left out, named in a comment)."""
    lines = [f"-- shopsim-wh views for Spark SQL over {Path(root).resolve()} (generated; do not edit)",
             *[s + ";" for s in staging_ddl(root)]]
    if exports:
        lines += [s + ";" for s in variable_ddl()]
    for file, view, sql in (st for group in _levels(view_statements(exports)) for st in group):  # dependency order
        if view in UNSUPPORTED:
            lines.append(f"-- {view} (sql/{file}) is not available on Spark: {UNSUPPORTED[view]}")
            continue
        lines.append(f"-- sql/{file}\nCREATE OR REPLACE TEMPORARY VIEW {view} AS {sql};")
    return "\n".join(lines)
