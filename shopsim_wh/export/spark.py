"""``export --engine spark``: a kind's rows computed on Spark, written in the same shard/manifest layout.

Steps: register the views the kind reads (``register(only=...)``, :func:`shopsim_wh.engines.spark.needed`) on the
warehouse's current snapshot, choose the runs exactly as the DuckDB path does (``select_runs``, here over Spark),
set the export parameters as Spark session variables and the scope as the ``export_scope`` view, create the
exports layer (the building blocks materialized, as DuckDB's exporter does), then compute the kind's view
filtered by ``--where`` on Spark. The rows come back to the driver as Arrow, typed as the DuckDB path types them
(JSON columns as Arrow's JSON extension type), and the DuckDB exporter's phases 2 and 3
(:mod:`shopsim_wh.export.batches`, as one batch) shard them (by ranges of an md5 of ``episode_id``, ordered by
``sample_id``, exact duplicates dropped) before the manifest is written. The driver therefore holds one kind's
rows at a time: fine for the exports of a run, not for a whole fleet at once. A kind with ``-- decisions:``
(preference) computes every decision's context on Spark (DuckDB's exporter computes only the pairs'): the same
rows, more work.

Record kinds (``shopsimrl-v4``, ``atif``): Spark computes the view's rows (JSON text in ``record``) and
:func:`shopsim_wh.export.records.finish` finishes them in the driver, in Python over Arrow (orjson re-spelling, the
privacy scrub), as the DuckDB exporter does. The episodes whose ``record`` is NULL (``record_fallback`` says why:
few) are built by the dump writer, which reads them from the same snapshot with DuckDB (``stg_`` views only); the
manifest's ``engine_detail`` and the summary count them.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from .registry import ExportError

# kind -> why ``export --engine spark`` refuses it (tests/test_spark.py holds docs/scale.md to it; it can only shrink)
UNSUPPORTED_KINDS: dict[str, str] = {
    "slime-samples": "its view export_slime_samples is not on Spark (docs/scale.md, Not on Spark)",
}


class _SparkRuns:
    """The two calls ``select_runs`` makes on a connection, answered by Spark (the query translated) and by
    remembering the chosen run ids (``export_scope``)."""

    def __init__(self, spark, translator):
        self.spark, self.tr, self.scope, self._rows = spark, translator, [], []

    def execute(self, sql: str, params=None):
        if "export_scope" in sql:  # CREATE OR REPLACE TEMP TABLE export_scope: kept here, made a view later
            self.scope = []
            return self
        self._rows = [tuple(r) for r in self.spark.sql(self.tr.query(sql)).collect()]
        return self

    def executemany(self, sql: str, rows) -> None:
        self.scope.extend(r[0] for r in rows)

    def fetchall(self):
        return self._rows


def _conform(arr, t):
    """A column Spark returned (JSON as text, ints maybe narrower) as the type DuckDB's export gives it."""
    import pyarrow as pa

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.type == t:
        return arr
    if isinstance(t, pa.ExtensionType):
        return pa.ExtensionArray.from_storage(t, _conform(arr, t.storage_type))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        values = _conform(arr.values, t.value_type)
        cls, width = (pa.ListArray, pa.int32()) if pa.types.is_list(t) else (pa.LargeListArray, pa.int64())
        return cls.from_arrays(arr.offsets.cast(width), values, type=t, mask=arr.is_null())
    if pa.types.is_struct(t):
        return pa.StructArray.from_arrays([_conform(arr.field(f.name), f.type) for f in t], fields=list(t),
                                          mask=arr.is_null())
    return arr.cast(t)


def _duckdb_schema(view: str):
    from ..engines.spark_sql import oracle

    con = oracle()
    con.execute("SET arrow_lossless_conversion = true")
    try:
        return con.sql(f"SELECT * FROM {view} LIMIT 0").to_arrow_table().schema
    finally:
        con.execute("SET arrow_lossless_conversion = false")


def export_spark(kind: str, warehouse, out, options=None, *, spark=None, progress=None, **fields):
    """Write one kind like :func:`shopsim_wh.export.export` (the same ``options``, an ExportOptions, or its fields
    as keyword arguments), its rows computed on ``spark`` (a local session when None)."""
    import duckdb
    import pyarrow as pa

    from .. import __version__
    from ..engines import spark_guard
    from ..engines.spark import ExportsLayer, needed, register, session
    from ..engines.spark_sql import oracle
    from ..store.warehouse import Warehouse
    from . import batches
    from .core import ExportResult, Written, manifest_of, shard_spill, write_manifest
    from .plan import ExportOptions, ExportPlan, blocks_of, kind_for
    from .scope import select_runs, where_clause
    from .writer import publish

    t0 = time.perf_counter()
    opts = replace(options or ExportOptions(), **fields)
    opts.check()
    spec = kind_for(kind, opts)
    if spec.name in UNSUPPORTED_KINDS:
        raise ExportError(f"kind {spec.name} does not run on Spark ({UNSUPPORTED_KINDS[spec.name]}); "
                          "export it with the default engine (drop --engine spark)")
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out} is not empty; choose a new --out directory (an export never mixes with old shards)")
    if not Path(warehouse).is_dir():
        raise ExportError(f"no warehouse at {warehouse}; point --warehouse at one built by `run` or `ingest`")
    root = str(Path(warehouse).resolve())
    snap = Warehouse(root).snapshot()
    spark = spark or session()
    blocks = ("export_episodes", "export_messages", "export_step_tools", *blocks_of(spec))
    wanted = needed([spec.view, *blocks, "runs", "episodes"])  # only what the kind reads is created
    register(spark, root, exports=False, snap=snap, only=wanted)
    from ..engines.spark import translator

    tr = translator()
    chooser = _SparkRuns(spark, tr)
    selected = select_runs(chooser, opts.runs, opts.experiment, opts.allow_test)
    expr, is_default = where_clause(oracle(), spec, opts.where)
    params = opts.params
    layer = ExportsLayer(base=False, scope=chooser.scope, variables={**params, "export_tool_version": __version__})
    reg = register(spark, root, exports=True, snap=snap, materialize=blocks, only=wanted, layer=layer)
    if spec.view not in reg.views:
        raise ExportError(f"kind {spec.name} does not run on Spark: {reg.skipped.get(spec.view, 'not translated')}")
    query = tr.query(f"SELECT * FROM {spec.view}" + (f" WHERE ({expr})" if expr else ""))
    spark_guard.check(query, spark_guard.temp_views(spark))  # --where: no reflect(), no files
    try:
        table = spark.sql(query).toArrow()
    except Exception as exc:  # noqa: BLE001 - Spark's analyser names the problem
        raise ExportError(f"cannot read kind {spec.name} on Spark with --where {expr!r}: {exc}; "
                          f"fix the expression (filter columns: {', '.join(spec.filters)})") from exc
    schema = _duckdb_schema(spec.view)
    table = pa.table([_conform(table.column(f.name), f.type) for f in schema], schema=schema)
    columns = schema.names
    fallback = _fallbacks(table) if spec.record else None
    out.mkdir(parents=True, exist_ok=True)
    spill = Path(tempfile.mkdtemp(prefix="shopsim-wh-export-"))
    con = duckdb.connect()
    # the dump writer reads the fallback episodes from the same snapshot, with DuckDB (its own connection: the
    # rows stream from ``con`` meanwhile)
    dump = _staging(root, snap) if fallback else con
    try:  # the DuckDB exporter's phases 2 and 3 (batches.py) over the rows Spark computed, as one batch
        con.register(spec.view, table)
        con.execute("SET arrow_lossless_conversion = true")
        buckets = batches.Spill(spill, 1)
        query = batches.compute_sql(spec, None, opts.format, columns)
        buckets.add(batches.batch_reader(con, spec, query, opts.format, params, dump=dump).read_all())
        written = Written(*shard_spill(con, buckets.close(), out, opts, progress))
    finally:
        con.close()
        dump.close()
        shutil.rmtree(spill, ignore_errors=True)
    stats = written.stats
    if "split" not in written.columns:
        stats.splits = _splits(spark, stats.tasks)
    publish(out, stats)
    plan = ExportPlan(kind=spec, options=opts, selected=selected, where=expr, where_is_default=is_default,
                      episodes_where=None, columns=written.columns, blocks=blocks, strategy="spark",
                      why="--engine spark: the rows computed by Spark in one query, then counted and sharded")
    manifest = manifest_of(plan, (root, snap.version), written)
    manifest["engine"] = "spark"
    engine = {"name": "spark"}
    if fallback is not None:  # record kinds: the records Spark's SQL left to the dump writer (on DuckDB)
        engine["records_by_dump_writer"] = sum(fallback.values())
        engine["record_fallback"] = fallback
        manifest["engine_detail"] = {k: v for k, v in engine.items() if k != "name"}
    mpath = write_manifest(out, manifest)
    return ExportResult(kind=spec.name, out=str(out), format=opts.format, rows=stats.rows,
                        duplicates_removed=stats.duplicates, shards=manifest["shards"], manifest=str(mpath),
                        seconds=round(time.perf_counter() - t0, 3), decontamination=manifest["decontamination"],
                        engine=engine)


def _fallbacks(table) -> dict[str, int]:
    """{reason: episodes} of the rows whose ``record`` the kind's SQL left NULL (column ``record_fallback``)."""
    import pyarrow.compute as pc

    counts = pc.value_counts(pc.drop_null(table.column("record_fallback"))).to_pylist()
    return {c["values"]: c["counts"] for c in sorted(counts, key=lambda c: c["values"])}


def _staging(root: str, snap):
    """A DuckDB connection with the ``stg_`` views of ``snap``: what the dump writer (``load_episodes``) reads."""
    import duckdb

    from ..core.schema import TABLES
    from ..engines.db import ident, staging_sql
    from ..store.warehouse import Warehouse

    wh = Warehouse(root)
    con = duckdb.connect()
    wh.register(con, snap)
    for table in TABLES:
        con.execute(f"CREATE OR REPLACE VIEW {ident('stg_' + table)} AS {staging_sql(wh, snap, table)}")
    return con


def _splits(spark, tasks: set) -> set:
    if not tasks:
        return set()
    seen = spark.createDataFrame(sorted(tasks, key=str), "run_id STRING, task_id BIGINT")
    seen.createOrReplaceTempView("export_tasks_seen")
    return {r[0] for r in spark.sql(
        "SELECT DISTINCT e.split FROM export_episodes AS e LEFT SEMI JOIN export_tasks_seen AS s "
        "ON s.run_id = e.run_id AND s.task_id <=> e.task_id").collect()}
