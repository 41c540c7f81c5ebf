"""``export()``: one kind of training data out of the warehouse, as deterministic shards plus manifest.json.

Steps: open the warehouse at its current snapshot (:func:`_opened`), plan the export once (plan.build_plan: the
parameters bound as DuckDB variables, ``export_scope`` filled, refusing the test split without ``allow_test``,
``where`` checked, the batches planned, the strategy chosen), run the strategy's executor (:data:`EXECUTORS`:
rows streamed in shard and ``sample_id`` order into the shard files, exact duplicates of the kind's sample columns
dropped and counted), rename, and write the manifest last. :func:`explain` stops after the plan.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa

from .. import __version__
from ..engines.db import ident
from . import batches, groups
from .plan import (  # noqa: F401  (DEFAULT_SHARD_ROWS, FORMATS, MATERIALIZED, blocks_of: their old home)
    DEFAULT_SHARD_ROWS,
    FORMATS,
    MATERIALIZED,
    ExportOptions,
    ExportPlan,
    Source,
    blocks_of,
    build_plan,
    kind_for,
    reads,
)
from .registry import ExportError, get_kind
from .scope import bind_params, decontamination
from .writer import WriteStats, publish, write_shards

EXPORTER_VERSION = f"shopsim-wh-export-2 ({__version__})"
# which shard a row goes to (batches.shard_sql): shard i of n holds the episodes whose hash h (the first 32 bits of
# md5(episode_id), as an unsigned integer) has floor(h * n / 2^32) = i
SHARDING = "floor(h * shards / 2^32), h = first 8 hex digits of md5(episode_id)"
BATCH_ROWS = 8192


@dataclass
class ExportResult:
    kind: str
    out: str
    format: str
    rows: int
    duplicates_removed: int
    shards: list[dict]
    manifest: str
    seconds: float
    decontamination: dict = field(default_factory=dict)
    engine: dict = field(default_factory=dict)  # export --engine spark: {"name": "spark", ...} (manifest engine_detail)

    def as_dict(self) -> dict:
        d = asdict(self)
        if not d["engine"]:  # the default engine's summary stays as it was
            d.pop("engine")
        return d


class Written(NamedTuple):
    """What an executor wrote: the rows selected (before duplicate removal), the shards, the kind's columns and the
    writer's stats."""

    total: int
    n_shards: int
    columns: list[str]
    stats: WriteStats


DEFAULT_MEMORY = "2GB"


def _memory_config(spill_dir: str) -> dict:
    """An export connection spills to its own ``spill_dir`` (removed afterwards) and caps DuckDB's memory at
    ``SHOPSIM_WH_EXPORT_MEMORY`` (default :data:`DEFAULT_MEMORY`): the sorts of the batched evaluation spill past
    it. Not every operator of the kinds' views can spill (the list and string aggregates that assemble whole
    conversations cannot), which is why a kind is computed per batch of episodes (batches.py); a batch too big
    for the cap fails with an ExportError that says what to lower or raise."""
    return {"temp_directory": spill_dir, "preserve_insertion_order": False,
            "memory_limit": os.environ.get("SHOPSIM_WH_EXPORT_MEMORY") or DEFAULT_MEMORY}


def _open(warehouse, spill_dir: str, views: set[str] | None = None):
    """A connection on the warehouse's current snapshot (spilling to ``spill_dir``), that snapshot's version, the
    warehouse's location and its (Warehouse, Snapshot) pair (None for an open connection: its files are not known
    here); of the export kinds, those defining ``views`` are installed (default: all)."""
    import duckdb

    from ..engines.db import SMALL_TABLE_BYTES, export_files, install_exports, install_views, words
    from ..store.warehouse import Warehouse

    if isinstance(warehouse, duckdb.DuckDBPyConnection):  # an open connection: its snapshot is not known here
        warehouse.execute("SET enable_progress_bar = false")
        install_exports(warehouse)
        return warehouse, None, None, None
    from ..store.warehouse import location

    if not Warehouse(warehouse).exists():
        raise ExportError(f"no warehouse at {warehouse}; point --warehouse at one built by `run` or `ingest`")
    wh = Warehouse(warehouse)
    snap = wh.snapshot()
    con = duckdb.connect(config=_memory_config(spill_dir))
    wh.register(con, snap)
    con.execute("SET parquet_metadata_cache = true")
    con.execute("SET enable_progress_bar = false")  # progress is ours to report (progress callback)
    # of the analytics views, only those the kind's SQL reaches (the exports read the taxonomy's labels)
    reads = None if views is None else set().union(views, *(words(t) for _, t in export_files(views)))
    install_views(con, wh, snap, small_table_bytes=SMALL_TABLE_BYTES, reads=reads)
    install_exports(con, views)
    return con, snap.version, location(warehouse), (wh, snap)


def export(kind: str, warehouse, out, options: ExportOptions | None = None, *,
           progress: Callable[[int, int], None] | None = None, **fields) -> ExportResult:
    """Write one kind to ``out`` (a new or empty directory) as shards + ``manifest.json``; see the module doc.

    ``options`` (an :class:`ExportOptions`) or its fields as keyword arguments, e.g.
    ``export("sft-action", "warehouse", "out", runs=["demo"], format="jsonl")``.
    ``progress(done_rows, total_rows)`` is called as rows are written (total before duplicate removal).
    """
    t0 = time.perf_counter()
    options = replace(options or ExportOptions(), **fields)
    options.check()
    spec = kind_for(get_kind(kind), options)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out} is not empty; choose a new --out directory (an export never mixes with old shards)")
    with _opened(warehouse, spec) as src:
        plan = build_plan(src, spec, options)
        written = EXECUTORS[plan.strategy](src, plan, out, progress)
        return _finish(src, plan, out, written, t0)


def explain(kind: str, warehouse, options: ExportOptions | None = None, **fields) -> ExportPlan:
    """The plan :func:`export` would follow (``export --explain``), computed on the warehouse; nothing is written."""
    options = replace(options or ExportOptions(), **fields)
    options.check()
    spec = kind_for(get_kind(kind), options)
    with _opened(warehouse, spec) as src:
        return build_plan(src, spec, options)


@contextlib.contextmanager
def _opened(warehouse, spec) -> Iterator[Source]:
    """The warehouse open for an export of ``spec`` (its views, spilling to a temporary directory); afterwards the
    export's TEMP state is dropped (a connection passed in stays usable) and the spill removed."""
    spill = tempfile.mkdtemp(prefix="shopsim-wh-export-")
    try:
        con, snapshot, root, files = _open(warehouse, spill, reads(spec.sql) | {spec.view})
        try:
            yield Source(con=con, spill=Path(spill), snapshot=snapshot, root=root, files=files)
        finally:
            for name in blocks_of(spec):
                con.execute(f"DROP TABLE IF EXISTS temp.main.{name}")
            batches.unshadow(con)
            con.execute("SET VARIABLE export_decisions_subset = false")
            con.execute("DELETE FROM export_decisions_wanted")
            con.execute("SET arrow_lossless_conversion = false")
            if root is not None:  # our own connection: close it before its spill directory goes
                con.close()
    finally:
        shutil.rmtree(spill, ignore_errors=True)


def _finish(src: Source, plan: ExportPlan, out: Path, written: Written, t0: float) -> ExportResult:
    """Publish the shards and write the manifest last."""
    stats = written.stats
    if "split" not in written.columns:
        stats.splits = _splits_of(src.con, stats)
    publish(out, stats)
    manifest = manifest_of(plan, (src.root, src.snapshot), written)
    mpath = write_manifest(out, manifest)
    return ExportResult(kind=plan.kind.name, out=str(out), format=plan.options.format, rows=stats.rows,
                        duplicates_removed=stats.duplicates, shards=manifest["shards"], manifest=str(mpath),
                        seconds=round(time.perf_counter() - t0, 3), decontamination=manifest["decontamination"])


def write_manifest(out: Path, manifest: dict) -> Path:
    mpath, tmp = out / "manifest.json", out / ".tmp-manifest.json"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    os.replace(tmp, mpath)
    return mpath


def _materialize(con, names: Sequence[str]) -> list[str]:
    """TEMP tables holding the building blocks ``names`` (shadowing their views; evaluated once each)."""
    db = con.execute("SELECT current_database()").fetchone()[0]
    done = []
    for name in names:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM {ident(db)}.main.{name}")
        done.append(name)
    return done


def prepare(con, spec, blocks: Sequence[str]) -> None:
    """Materialize ``blocks`` and, for a kind with ``-- decisions: VIEW``, restrict export_decisions to the
    decisions VIEW lists (on the connection's current scope / batch)."""
    _materialize(con, blocks)
    if spec.decisions:
        con.execute("SET VARIABLE export_decisions_subset = false")
        con.execute("CREATE OR REPLACE TEMP TABLE export_decisions_wanted AS "
                    f"SELECT DISTINCT run_id, episode_id, agent_id, step_idx FROM {spec.decisions}")
        con.execute("SET VARIABLE export_decisions_subset = true")


def _cursors(src: Source, params: dict, lossless: bool = True) -> Callable:
    """A factory of worker cursors (each with its own TEMP tables and variables: the scope, the parameters, the
    small staged tables shared through the spill). ``lossless``: JSON crosses to Arrow as ``arrow.json`` (the
    batches' rows); the base-row copy wants the connection's default instead, or BOOLEAN would cross as
    ``arrow.bool8`` and come back from its files as TINYINT."""
    con = src.con
    shared = batches.share_staging(con, src.spill)
    scope = [r[0] for r in con.execute("SELECT run_id FROM export_scope").fetchall()]

    def cursor():
        cur = con.cursor()
        cur.execute("SET enable_progress_bar = false")
        batches.use_staging(cur, shared)
        bind_params(cur, params)
        cur.execute("CREATE OR REPLACE TEMP TABLE export_scope (run_id VARCHAR)")
        if scope:
            cur.executemany("INSERT INTO export_scope VALUES (?)", [[r] for r in scope])
        cur.execute("CREATE OR REPLACE TEMP TABLE export_decisions_wanted (run_id VARCHAR, episode_id VARCHAR, "
                    "agent_id VARCHAR, step_idx INTEGER)")  # as sql/exports/00_export_scope.sql (TEMP: per cursor)
        cur.execute(f"SET arrow_lossless_conversion = {'true' if lossless else 'false'}")
        return cur

    return cursor


@contextlib.contextmanager
def _sql_errors(spec, expr):
    """DuckDB's errors of a batch as ExportErrors saying what to change."""
    import duckdb

    try:
        yield
    except (duckdb.BinderException, duckdb.ParserException, duckdb.ConversionException) as exc:
        # a bad expression surfaces here, from DuckDB's binder
        raise ExportError(f"cannot read kind {spec.name} with --where {expr!r}: {exc}; "
                          f"fix the expression (filter columns: {', '.join(spec.filters)})") from exc
    except duckdb.OutOfMemoryException as exc:
        raise ExportError(f"kind {spec.name} ran out of memory ({exc}); raise SHOPSIM_WH_EXPORT_MEMORY, lower "
                          "SHOPSIM_WH_EXPORT_BATCH_EPISODES or SHOPSIM_WH_EXPORT_THREADS, or export fewer runs at a "
                          "time (--runs)") from exc


def _shadow(src: Source, plan: ExportPlan) -> None:
    """:func:`batches.shadow` (the base rows copied once into one folder per batch), its views copied on
    :func:`batches.workers` cursors at once: a copy is DuckDB's scan and join plus a Python router cutting and
    writing Arrow batches, one thread each, so a second view's copy fills the core the first one leaves."""
    con = src.con
    db = ident(con.execute("SELECT current_database()").fetchall()[0][0])
    columns = batches.shadow_columns(con, db, plan.kind, plan.blocks)
    workers = min(batches.workers(), len(batches.SHADOWED))
    if workers == 1:
        return batches.shadow(con, db, src.spill, columns)
    batch_plan = con.sql("SELECT run_id, episode_id, batch FROM export_batch_plan").to_arrow_table()  # TEMP: con's
    make = _cursors(src, plan.params, lossless=False)  # the copy's Arrow types as on ``con``

    def cursor():
        cur = make()
        cur.register("export_batch_plan", batch_plan)
        return cur

    def each(copy, names: list[str]) -> None:
        _parallel(cursor, lambda cur, i: copy(cur, names[i]), len(names), workers)

    batches.shadow(con, db, src.spill, columns, each)


def _compute(src: Source, plan: ExportPlan) -> list[list[Path]]:
    """Phase 1 (see batches.py): the kind's rows, batch by batch of the planned episodes, into the spill's buckets.
    Batches run on :func:`batches.workers` cursors at once (each with its own TEMP tables and variables); the output
    does not depend on the order they finish in (phase 3 sorts)."""
    con, spec, spill, n_batches = src.con, plan.kind, src.spill, plan.n_batches
    if plan.copy_base_rows:
        _shadow(src, plan)
    query = batches.compute_sql(spec, plan.where, plan.options.format, plan.columns)
    out = batches.Spill(spill, n_batches)
    lock = threading.Lock()

    def run(cur, b: int) -> None:
        if n_batches > 1:
            batches.select_batch(cur, spill, b)
        prepare(cur, spec, plan.blocks)
        table = batches.batch_reader(cur, spec, query, plan.options.format, plan.params).read_all()
        with lock:
            out.add(table)

    workers = min(batches.workers(), n_batches)
    with _sql_errors(spec, plan.where), _no_metadata_cache(con):  # each batch's copy is read once
        if workers == 1:
            con.execute("SET arrow_lossless_conversion = true")  # JSON crosses as arrow.json: the spill keeps it
            for b in range(n_batches):
                run(con, b)
        else:
            with _pool(con, workers):
                _parallel(_cursors(src, plan.params), run, n_batches, workers)
    buckets = out.close()
    batches.unshadow(con)
    for name in plan.blocks:
        con.execute(f"DROP TABLE IF EXISTS temp.main.{name}")
    return buckets


def _write_spill(src: Source, plan: ExportPlan, out: Path, progress) -> Written:
    """The ``spill`` strategy: phase 1 (:func:`_compute`), then phases 2 and 3 (:func:`shard_spill`)."""
    buckets = _compute(src, plan)
    return Written(*shard_spill(src.con, buckets, out, plan.options, progress))


class _Ticker:
    """``progress(done, total)`` as rows are written, ``total`` the planned rows (or more, once passed)."""

    def __init__(self, progress, total: int):
        self.progress, self.total, self.done = progress, total, 0

    def __call__(self, n: int) -> None:
        self.done += n
        if self.progress:
            self.progress(self.done, max(self.done, self.total))


def _write_records(src: Source, plan: ExportPlan, out: Path, progress) -> Written:
    """The ``records`` strategy: batches of (shard, ``sample_id``) ranges computed on :func:`batches.workers`
    cursors and handed to the shard writer in batch order, each sorted, so every row is written once, as it comes
    (after the base-row copy when there is more than one batch)."""
    con, spec, spill, fmt = src.con, plan.kind, src.spill, plan.options.format
    n_batches = len(plan.planned)
    query = batches.compute_sql(spec, plan.where, fmt, plan.columns, shards=plan.n_shards)
    if plan.copy_base_rows:
        _shadow(src, plan)

    def run(cur, b: int) -> pa.Table:
        if n_batches > 1:
            batches.select_batch(cur, spill, b)
        prepare(cur, spec, plan.blocks)
        rows = batches.record_rows(cur, spec, query, fmt, plan.params)
        batches.check_planned(spec, rows, plan.planned[b], every=plan.exact)
        return rows

    workers = min(batches.workers(), n_batches)
    if workers == 1:
        con.execute("SET arrow_lossless_conversion = true")
        tables = (run(con, b) for b in range(n_batches))
    else:
        tables = _in_order(_cursors(src, plan.params), run, n_batches, workers)
    out.mkdir(parents=True, exist_ok=True)
    tick = _Ticker(progress, plan.episodes)
    with _sql_errors(spec, plan.where), _pool(con, workers), _no_metadata_cache(con):  # each copy is read once
        try:
            first = next(tables)
            schema = first.schema  # the first batch's rows are not kept past their turn (~100 MB at 2,000 episodes)
            reader = pa.RecordBatchReader.from_batches(schema, (
                b for t in itertools.chain([first], tables) for b in t.to_batches()))
            del first
            stats = write_shards(reader, out, plan.n_shards, fmt, "__line" if fmt == "jsonl" else None, tick)
        except BaseException:
            tables.close()  # stops the workers
            _drop_temporary(out)
            raise
    batches.unshadow(con)
    for name in plan.blocks:
        con.execute(f"DROP TABLE IF EXISTS temp.main.{name}")
    return Written(stats.rows + stats.duplicates, plan.n_shards, _public(schema), stats)


def _write_groups(src: Source, plan: ExportPlan, out: Path, progress) -> Written:
    """The ``file-groups`` strategy: each batch reads its own files through the base views (no copy of the base
    rows), its sorted rows go to a run file, and the writer gets the runs merged in its order (groups.merged)."""
    spec, fmt, found = plan.kind, plan.options.format, plan.found
    query = batches.compute_sql(spec, plan.where, fmt, plan.columns, shards=plan.n_shards)
    runs = src.spill / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    paths = [runs / f"run-{b:05d}.arrow" for b in range(len(found))]

    def run(cur, b: int) -> tuple:
        groups.use_group(cur, *src.files, found[b])
        prepare(cur, spec, plan.blocks)
        rows = batches.record_rows(cur, spec, query, fmt, plan.params)
        batches.check_planned(spec, rows, found[b].sample_ids, every=plan.exact)
        groups.write_run(rows, paths[b], len(found), fmt)
        return rows.schema, rows.num_rows

    workers = min(batches.workers(), len(found))
    tick = _Ticker(progress, plan.episodes)
    out.mkdir(parents=True, exist_ok=True)
    with _sql_errors(spec, plan.where), _pool(src.con, workers), _no_metadata_cache(src.con):
        for batch_schema, n in _in_order(_cursors(src, plan.params), run, len(found), workers, ahead=len(found)):
            schema = batch_schema  # every batch's: the kind's (records.finish)
            tick(n)
        try:
            if fmt == "jsonl":
                stats = groups.write_jsonl(paths, out, plan.n_shards)
            else:
                stats = write_shards(groups.merged(paths, schema), out, plan.n_shards, fmt, None, schema=schema)
        except BaseException:
            _drop_temporary(out)
            raise
    return Written(stats.rows + stats.duplicates, plan.n_shards, _public(schema), stats)


EXECUTORS: dict[str, Callable[[Source, ExportPlan, Path, Callable | None], Written]] = {
    "records": _write_records, "file-groups": _write_groups, "spill": _write_spill}


def _public(schema: pa.Schema) -> list[str]:
    return [n for n in schema.names if not n.startswith("__")]


def _drop_temporary(out: Path) -> None:
    for tmp in out.glob(".tmp-*"):
        tmp.unlink()


@contextlib.contextmanager
def _pool(con, workers: int):
    """DuckDB's thread pool while ``workers`` cursors compute batches at once: the cores the batch threads leave
    (at least 1: each query then runs on its own batch thread). A batch's query is too small to gain from more
    threads (one row group per base view); they only add partitioned aggregates and sorts to merge, and their
    memory: on 2 cores, 1 thread instead of 2 took ~7% off the v4 query's CPU. Restored afterwards."""
    if workers < 2:
        yield
        return
    before = con.execute("SELECT current_setting('threads')").fetchone()[0]
    con.execute(f"SET threads = {max(1, (os.cpu_count() or 1) - workers + 1)}")
    try:
        yield
    finally:
        con.execute(f"SET threads = {int(before)}")


def _in_order(cursor, run, n_batches: int, workers: int, ahead: int | None = None) -> Iterator:
    """``run(cur, b)``'s results in batch order, computed on ``workers`` threads (each with its own ``cursor()``)
    at most ``workers`` batches ahead of the one the consumer holds (so memory holds ``workers + 1`` batches however
    many there are: one more ahead held 1,340 MB at 10,000 runner episodes); the first error is raised to the
    consumer; closing the generator stops the workers. ``ahead`` (default ``workers``) bounds that lead."""
    ahead = workers if ahead is None else ahead
    cond = threading.Condition()
    state = {"next": 0, "taken": 0, "stop": False}
    done: dict[int, object] = {}
    failed: list[BaseException] = []

    def work() -> None:
        cur = cursor()
        try:
            while True:
                with cond:
                    while (not failed and not state["stop"] and state["next"] < n_batches
                           and state["next"] >= state["taken"] + ahead):
                        cond.wait()
                    if failed or state["stop"] or state["next"] >= n_batches:
                        return
                    b = state["next"]
                    state["next"] += 1
                result = run(cur, b)
                with cond:
                    done[b] = result
                    cond.notify_all()
                result = None  # the consumer's from now on: not held while this thread waits for a slot
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            with cond:
                failed.append(exc)
                cond.notify_all()
        finally:
            cur.close()

    threads = [threading.Thread(target=work, name=f"export-batch-{i}") for i in range(workers)]
    for t in threads:
        t.start()
    try:
        for b in range(n_batches):
            with cond:
                while b not in done and not failed:
                    cond.wait()
                if b not in done:
                    raise failed[0]
                result = done.pop(b)
                state["taken"] = b + 1
                cond.notify_all()
            yield result
            result = None  # not held while waiting for the next batch
    finally:
        with cond:
            state["stop"] = True
            done.clear()
            cond.notify_all()
        for t in threads:
            t.join()


def _parallel(cursor, run, n_batches: int, workers: int) -> None:
    """``run(cur, b)`` for every batch ``b``, on ``workers`` threads, each with its own ``cursor()``, in any
    order (:func:`_in_order` with no bound on how far ahead they run); the first error is raised."""
    for _ in _in_order(cursor, run, n_batches, workers, ahead=n_batches):
        pass


def shard_spill(con, buckets: list[list[Path]], out: Path, options: ExportOptions, progress) -> tuple:
    """Phases 2 and 3 (batches.py) over the spill's buckets (batches.Spill.close): count (sizing the shards), then
    every row in ``sample_id`` order to its shard. Returns (rows, shards, the kind's columns, the writer's stats);
    on failure no temporary shard is left behind. The DuckDB and Spark exporters both end here."""
    with _no_metadata_cache(con):
        return _shard_spill(con, buckets, out, options, progress)


@contextlib.contextmanager
def _no_metadata_cache(con):
    """DuckDB's Parquet metadata cache off while files read once or twice are read (restored after): the batches'
    copies of the base rows (phase 1, or a record kind's batches) and the spill (phases 2-3). Caching their footers
    only holds them: at 1M episodes the spill is ~24,000 files of ~25 row groups each, and the count's scan cached
    13.2 GB of footers (1.9 GB and 15% less time with the cache off)."""
    was = con.execute("SELECT current_setting('parquet_metadata_cache')").fetchone()[0]
    con.execute("SET parquet_metadata_cache = false")
    try:
        yield
    finally:
        con.execute(f"SET parquet_metadata_cache = {'true' if was else 'false'}")


def _shard_spill(con, buckets: list[list[Path]], out: Path, options: ExportOptions, progress) -> tuple:
    fmt = options.format
    total = batches.count(con, buckets)
    n_shards = max(1, math.ceil(total / options.shard_rows))
    out.mkdir(parents=True, exist_ok=True)
    con.execute("SET arrow_lossless_conversion = true")  # JSON leaves as arrow.json -> Parquet JSON logical type
    reader = batches.ordered_reader(con, buckets, n_shards, BATCH_ROWS)
    columns = _public(reader.schema)
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(done, total)

    try:
        stats = write_shards(reader, out, n_shards, fmt, "__line" if fmt == "jsonl" else None, tick)
    except BaseException:
        reader.close()  # releases the bucket query DuckDB still holds open
        _drop_temporary(out)
        raise
    return total, n_shards, columns, stats


def _splits_of(con, stats: WriteStats) -> set:
    if not stats.tasks:
        return set()
    con.execute("CREATE OR REPLACE TEMP TABLE export_tasks_seen (run_id VARCHAR, task_id BIGINT)")
    con.executemany("INSERT INTO export_tasks_seen VALUES (?, ?)", [list(t) for t in stats.tasks])
    return {r[0] for r in con.execute(
        "SELECT DISTINCT e.split FROM export_episodes AS e SEMI JOIN export_tasks_seen AS s "
        "ON s.run_id = e.run_id AND s.task_id IS NOT DISTINCT FROM e.task_id").fetchall()}


def manifest_of(plan: ExportPlan, warehouse: tuple, written: Written) -> dict:
    """manifest.json of an export that followed ``plan``; ``warehouse`` is (location, snapshot version)."""
    spec, opts, stats, params = plan.kind, plan.options, written.stats, plan.params
    root, snapshot = warehouse
    return {
        "kind": spec.name,
        "grain": spec.grain,
        "trl": spec.trl,
        **({"shape": spec.shape} if spec.shape else {}),
        "format": opts.format,
        "columns": written.columns,
        "sample_columns": list(spec.sample),
        "kind_sql_sha256": spec.sql_sha256,
        "exporter_version": EXPORTER_VERSION,
        "warehouse": {"root": root, "snapshot": snapshot},
        "source_runs": [{"run_id": r["run_id"], "fingerprint": r["fingerprint"], "source_format": r["source_format"],
                         "experiment": r["experiment"], "split": r["split"]} for r in plan.selected],
        "filters": {"runs": list(opts.runs) if opts.runs else None, "experiment": opts.experiment,
                    "where": plan.where, "where_is_kind_default": plan.where_is_default},
        "parameters": {k.removeprefix("export_"): v for k, v in params.items()},
        "sharding": {"by": SHARDING, "order": "sample_id", "shard_rows": opts.shard_rows,
                     "shards": written.n_shards},
        "rows_selected": written.total,
        "duplicates_removed": stats.duplicates,
        "rows": stats.rows,
        "shards": [{"file": s.file, "rows": s.rows, "bytes": s.bytes, "sha256": s.sha256} for s in stats.shards],
        "privacy": {"reasoning_included": bool(params["export_include_reasoning"]),
                    "persona_included": bool(params["export_include_persona"]),
                    "private_goal": "never stored, never exported (no goal-derived column such as right_product)"},
        "decontamination": decontamination(plan.selected, stats.splits, stats.tasks),
    }
