"""``export()``: one kind of training data out of the warehouse, as deterministic shards plus manifest.json.

Steps: open the warehouse at its current snapshot, bind the parameters as DuckDB variables, fill
``export_scope`` (refusing the test split without ``allow_test``), check ``where``, count the rows to size the
shards, then stream ``SELECT ... ORDER BY shard, sample_id`` in record batches into the shard files (exact
duplicates of the kind's sample columns dropped and counted), rename, and write the manifest last.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa

from .. import __version__
from ..engines.db import ident
from . import batches, groups
from .registry import ExportError, Kind, get_kind
from .scope import bind_params, decontamination, pushdown, select_runs, where_clause
from .writer import WriteStats, publish, write_shards

EXPORTER_VERSION = f"shopsim-wh-export-2 ({__version__})"
DEFAULT_SHARD_ROWS = 100_000
# which shard a row goes to (batches.shard_sql): shard i of n holds the episodes whose hash h (the first 32 bits of
# md5(episode_id), as an unsigned integer) has floor(h * n / 2^32) = i
SHARDING = "floor(h * shards / 2^32), h = first 8 hex digits of md5(episode_id)"
BATCH_ROWS = 8192
FORMATS = ("parquet", "jsonl")
# Building blocks every kind reads, computed once per export into TEMP tables that shadow the views (linear in the
# warehouse: one row per message / episode / step; DuckDB spills them to disk past its memory limit).
# export_agent_tools (one merged schema per tool name of an agent) before export_step_tools, which reads it
MATERIALIZED = ("export_episodes", "export_messages", "export_agent_tools", "export_step_tools")


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

    from ..engines.db import SMALL_TABLE_BYTES, install_exports, install_views
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
    install_views(con, wh, snap, small_table_bytes=SMALL_TABLE_BYTES)
    install_exports(con, views)
    return con, snap.version, location(warehouse), (wh, snap)


def export(kind: str, warehouse, out, *, runs: Sequence[str] | None = None, experiment: str | None = None,
           where: str | None = None, format: str = "parquet", shard_rows: int = DEFAULT_SHARD_ROWS,
           window: int | None = None, max_tokens: int | None = None, allow_test: bool = False,
           include_reasoning: bool = False, include_persona: bool = False, gamma: float = 1.0,
           min_margin: float | None = None, min_step_margin: float | None = None,
           progress: Callable[[int, int], None] | None = None) -> ExportResult:
    """Write one kind to ``out`` (a new or empty directory) as shards + ``manifest.json``; see the module doc.

    ``progress(done_rows, total_rows)`` is called as rows are written (total before duplicate removal).
    """
    t0 = time.perf_counter()
    spec = get_kind(kind)
    if format not in FORMATS:
        raise ExportError(f"unknown format {format!r}; use parquet or jsonl")
    if shard_rows < 1:
        raise ExportError(f"--shard-rows must be at least 1, not {shard_rows}")
    for name, v in (("--window", window), ("--max-tokens", max_tokens)):
        if v is not None and v < 0:
            raise ExportError(f"{name} must be >= 0, not {v}")
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out} is not empty; choose a new --out directory (an export never mixes with old shards)")
    spill = tempfile.mkdtemp(prefix="shopsim-wh-export-")
    try:
        return _export(spec, warehouse, out, spill, runs, experiment, where, format, shard_rows, window, max_tokens,
                       allow_test, include_reasoning, include_persona, gamma, min_margin, min_step_margin,
                       progress, t0)
    finally:
        shutil.rmtree(spill, ignore_errors=True)


def _export(spec, warehouse, out, spill, runs, experiment, where, format, shard_rows, window, max_tokens, allow_test,
            include_reasoning, include_persona, gamma, min_margin, min_step_margin, progress, t0) -> ExportResult:
    con, snapshot, root, source = _open(warehouse, spill, _reads(spec.sql) | {spec.view})
    params = {"export_window": window, "export_max_tokens": max_tokens,
              "export_include_reasoning": bool(include_reasoning), "export_include_persona": bool(include_persona),
              "export_gamma": float(gamma), "export_min_margin": min_margin, "export_min_step_margin": min_step_margin}
    bind_params(con, params)
    selected = select_runs(con, runs, experiment, allow_test)
    expr, is_default = where_clause(con, spec, where)
    pushed = pushdown(con, spec, expr)
    blocks = blocks_of(spec)
    try:
        return _run(con, spec, out, Path(spill), format, shard_rows, expr, is_default, pushed, params, selected,
                    runs, experiment, snapshot, root, blocks, progress, t0, source)
    finally:
        for name in blocks:
            con.execute(f"DROP TABLE IF EXISTS temp.main.{name}")
        batches.unshadow(con)
        con.execute("SET VARIABLE export_decisions_subset = false")
        con.execute("DELETE FROM export_decisions_wanted")
        con.execute("SET arrow_lossless_conversion = false")
        if root is not None:  # our own connection: close it before its spill directory goes
            con.close()


def _materialize(con, names: Sequence[str]) -> list[str]:
    """TEMP tables holding the building blocks ``names`` (shadowing their views; evaluated once each)."""
    db = con.execute("SELECT current_database()").fetchone()[0]
    done = []
    for name in names:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM {ident(db)}.main.{name}")
        done.append(name)
    return done


def blocks_of(spec: Kind) -> tuple[str, ...]:
    """The building blocks an export of ``spec`` materializes (per batch): those of :data:`MATERIALIZED` its
    SQL reads (directly or through other export views), then the kind's own ``materialize`` list."""
    read = _reads(spec.sql)
    return tuple(v for v in MATERIALIZED if v in read) + tuple(v for v in spec.materialize if v not in MATERIALIZED)


def _reads(sql: str) -> set[str]:
    """The export_* views ``sql`` reads (comments aside), transitively."""
    from ..engines.db import reachable, shipped_refs, words

    return {n for n in reachable(words(sql), shipped_refs()) if n.startswith("export_")}


def prepare(con, spec: Kind, blocks: Sequence[str]) -> None:
    """Materialize ``blocks`` and, for a kind with ``-- decisions: VIEW``, restrict export_decisions to the
    decisions VIEW lists (on the connection's current scope / batch)."""
    _materialize(con, blocks)
    if spec.decisions:
        con.execute("SET VARIABLE export_decisions_subset = false")
        con.execute("CREATE OR REPLACE TEMP TABLE export_decisions_wanted AS "
                    f"SELECT DISTINCT run_id, episode_id, agent_id, step_idx FROM {spec.decisions}")
        con.execute("SET VARIABLE export_decisions_subset = true")


def _columns(con, spec) -> list[str]:
    described = con.execute(f"DESCRIBE SELECT * FROM {spec.view}").fetchall()
    opaque = [f"{r[0]} ({r[1]})" for r in described if r[1] in ("HUGEINT", "UHUGEINT", "UUID")]
    if opaque:
        raise ExportError(f"kind {spec.name} has column(s) {', '.join(opaque)} Arrow cannot carry plainly; "
                          f"cast them (e.g. CAST(sum(x) AS BIGINT)) in {spec.path}")
    columns = [r[0] for r in described]
    missing = {"sample_id", "run_id", "episode_id", "task_id"} - set(columns)
    if missing:
        raise ExportError(f"kind {spec.name} ({spec.path}) lacks the lineage column(s) {sorted(missing)}; add them to its view")
    return columns


def _cursors(con, spill: Path, params: dict, lossless: bool = True) -> Callable:
    """A factory of worker cursors (each with its own TEMP tables and variables: the scope, the parameters, the
    small staged tables shared through ``spill``). ``lossless``: JSON crosses to Arrow as ``arrow.json`` (the
    batches' rows); the base-row copy wants the connection's default instead, or BOOLEAN would cross as
    ``arrow.bool8`` and come back from its files as TINYINT."""
    shared = batches.share_staging(con, spill)
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


def _shadow(con, spec, spill: Path, params, blocks) -> None:
    """:func:`batches.shadow` (the base rows copied once into one folder per batch), its views copied on
    :func:`batches.workers` cursors at once: a copy is DuckDB's scan and join plus a Python router cutting and
    writing Arrow batches, one thread each, so a second view's copy fills the core the first one leaves."""
    db = ident(con.execute("SELECT current_database()").fetchall()[0][0])
    columns = batches.shadow_columns(con, db, spec, blocks)
    workers = min(batches.workers(), len(batches.SHADOWED))
    if workers == 1:
        return batches.shadow(con, db, spill, columns)
    plan = con.sql("SELECT run_id, episode_id, batch FROM export_batch_plan").to_arrow_table()  # TEMP: con's own
    make = _cursors(con, spill, params, lossless=False)  # the copy's Arrow types as on ``con``

    def cursor():
        cur = make()
        cur.register("export_batch_plan", plan)
        return cur

    def each(copy, names: list[str]) -> None:
        _parallel(cursor, lambda cur, i: copy(cur, names[i]), len(names), workers)

    batches.shadow(con, db, spill, columns, each)


def _compute(con, spec, spill: Path, format, expr, params, blocks, columns,
             episodes_where=None) -> list[list[Path]]:
    """Phase 1 (see batches.py): the kind's rows, batch by batch of episodes (those ``episodes_where`` holds for:
    scope.pushdown), into the spill's buckets. Batches run on :func:`batches.workers` cursors at once (each with its
    own TEMP tables and variables); the output does not depend on the order they finish in (phase 3 sorts)."""
    n_batches = batches.plan(con, spec, batches.batch_episodes(spec), episodes_where)
    if n_batches > 1:
        _shadow(con, spec, spill, params, blocks)
    query = batches.compute_sql(spec, expr, format, columns)
    out = batches.Spill(spill, n_batches)
    lock = threading.Lock()

    def run(cur, b: int) -> None:
        if n_batches > 1:
            batches.select_batch(cur, spill, b)
        prepare(cur, spec, blocks)
        table = batches.batch_reader(cur, spec, query, format, params).read_all()
        with lock:
            out.add(table)

    workers = min(batches.workers(), n_batches)
    with _sql_errors(spec, expr), _no_metadata_cache(con):  # each batch's copy is read once
        if workers == 1:
            con.execute("SET arrow_lossless_conversion = true")  # JSON crosses as arrow.json: the spill keeps it
            for b in range(n_batches):
                run(con, b)
        else:
            with _pool(con, workers):
                _parallel(_cursors(con, spill, params), run, n_batches, workers)
    buckets = out.close()
    batches.unshadow(con)
    for name in blocks:
        con.execute(f"DROP TABLE IF EXISTS temp.main.{name}")
    return buckets


def _direct(con, spec, out: Path, spill: Path, format, shard_rows, expr, exact, params, blocks, columns, planned,
            progress, source=None) -> tuple:
    """A record kind without the spill (batches.plan_records): batches of (shard, ``sample_id``) ranges computed on
    :func:`batches.workers` cursors and handed to the shard writer in batch order, each sorted, so every row is
    written once, as it comes. ``exact``: every planned episode gives a row (no where, or one applied whole to the
    plan). With the warehouse's files (``source``) in groups (export/groups.py), the batches are groups instead and
    their rows are merged (:func:`_grouped`). Returns what :func:`shard_spill` does."""
    n_batches = len(planned)
    total = sum(len(p) for p in planned)  # if exact, exactly the rows (check_planned holds it)
    n_shards = max(1, math.ceil(total / shard_rows)) if exact else 1  # batches.direct: all fit one shard
    query = batches.compute_sql(spec, expr, format, columns, shards=n_shards)
    if n_batches > 1 and source is not None:
        found = groups.plan_groups(con, *source, batches.batch_episodes(spec))
        if found:
            return _grouped(con, spec, out, spill, format, query, expr, exact, params, blocks, n_shards, found,
                            source, total, progress)
    if n_batches > 1:
        _shadow(con, spec, spill, params, blocks)

    def run(cur, b: int) -> pa.Table:
        if n_batches > 1:
            batches.select_batch(cur, spill, b)
        prepare(cur, spec, blocks)
        rows = batches.record_rows(cur, spec, query, format, params)
        batches.check_planned(spec, rows, planned[b], every=exact)
        return rows

    workers = min(batches.workers(), n_batches)
    if workers == 1:
        con.execute("SET arrow_lossless_conversion = true")
        tables = (run(con, b) for b in range(n_batches))
    else:
        tables = _in_order(_cursors(con, spill, params), run, n_batches, workers)
    out.mkdir(parents=True, exist_ok=True)
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(done, max(done, total))

    with _sql_errors(spec, expr), _pool(con, workers), _no_metadata_cache(con):  # each batch's copy is read once
        try:
            first = next(tables)
            schema = first.schema  # the first batch's rows are not kept past their turn (~100 MB at 2,000 episodes)
            reader = pa.RecordBatchReader.from_batches(schema, (
                b for t in itertools.chain([first], tables) for b in t.to_batches()))
            del first
            stats = write_shards(reader, out, n_shards, format, "__line" if format == "jsonl" else None, tick)
        except BaseException:
            tables.close()  # stops the workers
            for tmp in out.glob(".tmp-*"):
                tmp.unlink()
            raise
    batches.unshadow(con)
    for name in blocks:
        con.execute(f"DROP TABLE IF EXISTS temp.main.{name}")
    columns = [n for n in schema.names if not n.startswith("__")]
    return stats.rows + stats.duplicates, n_shards, columns, stats


def _grouped(con, spec, out: Path, spill: Path, format, query, expr, exact, params, blocks, n_shards, found, source,
             total, progress) -> tuple:
    """:func:`_direct` over batches of file groups (groups.plan_groups): each batch reads its own files through
    the base views (no copy of the base rows), its sorted rows go to a run file, and the writer gets the runs
    merged in its order (groups.merged)."""
    runs = spill / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    paths = [runs / f"run-{b:05d}.arrow" for b in range(len(found))]

    def run(cur, b: int) -> tuple:
        groups.use_group(cur, *source, found[b])
        prepare(cur, spec, blocks)
        rows = batches.record_rows(cur, spec, query, format, params)
        batches.check_planned(spec, rows, found[b].sample_ids, every=exact)
        groups.write_run(rows, paths[b], len(found), format)
        return rows.schema, rows.num_rows

    workers = min(batches.workers(), len(found))
    done = 0
    out.mkdir(parents=True, exist_ok=True)
    with _sql_errors(spec, expr), _pool(con, workers), _no_metadata_cache(con):
        for batch_schema, n in _in_order(_cursors(con, spill, params), run, len(found), workers, ahead=len(found)):
            schema = batch_schema  # every batch's: the kind's (records.finish)
            done += n
            if progress:
                progress(done, max(done, total))
        try:
            if format == "jsonl":
                stats = groups.write_jsonl(paths, out, n_shards)
            else:
                stats = write_shards(groups.merged(paths, schema), out, n_shards, format, None, schema=schema)
        except BaseException:
            for tmp in out.glob(".tmp-*"):
                tmp.unlink()
            raise
    columns = [n for n in schema.names if not n.startswith("__")]
    return stats.rows + stats.duplicates, n_shards, columns, stats


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


def shard_spill(con, buckets: list[list[Path]], out: Path, shard_rows: int, format: str, progress) -> tuple:
    """Phases 2 and 3 (batches.py) over the spill's buckets (batches.Spill.close): count (sizing the shards), then every row in
    ``sample_id`` order to its shard. Returns (rows, shards, the kind's columns, the writer's stats); on failure
    no temporary shard is left behind. The DuckDB and Spark exporters both end here."""
    with _no_metadata_cache(con):
        return _shard_spill(con, buckets, out, shard_rows, format, progress)


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


def _shard_spill(con, buckets: list[list[Path]], out: Path, shard_rows: int, format: str, progress) -> tuple:
    total = batches.count(con, buckets)
    n_shards = max(1, math.ceil(total / shard_rows))
    out.mkdir(parents=True, exist_ok=True)
    con.execute("SET arrow_lossless_conversion = true")  # JSON leaves as arrow.json -> Parquet JSON logical type
    reader = batches.ordered_reader(con, buckets, n_shards, BATCH_ROWS)
    columns = [n for n in reader.schema.names if not n.startswith("__")]
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(done, total)

    try:
        stats = write_shards(reader, out, n_shards, format, "__line" if format == "jsonl" else None, tick)
    except BaseException:
        reader.close()  # releases the bucket query DuckDB still holds open
        for tmp in out.glob(".tmp-*"):
            tmp.unlink()
        raise
    return total, n_shards, columns, stats

def _run(con, spec, out, spill, format, shard_rows, expr, is_default, pushed, params, selected, runs, experiment,
         snapshot, root, blocks, progress, t0, source=None) -> ExportResult:
    columns = _columns(con, spec)
    episodes_where, whole = pushed
    exact = expr is None or whole  # every planned episode of a record kind gives its row
    planned = (batches.plan_records(con, spec, batches.batch_episodes(spec), episodes_where, shard_rows) if spec.record
               else None)
    if planned is not None and batches.direct(spec, exact, sum(len(p) for p in planned), shard_rows):
        total, n_shards, columns, stats = _direct(con, spec, out, spill, format, shard_rows, expr, exact, params,
                                                  blocks, columns, planned, progress, source)
    else:
        buckets = _compute(con, spec, spill, format, expr, params, blocks, columns, episodes_where)
        total, n_shards, columns, stats = shard_spill(con, buckets, out, shard_rows, format, progress)
    if "split" not in columns:
        stats.splits = _splits_of(con, stats)
    publish(out, stats)
    manifest = _manifest(spec, format, root, snapshot, selected, runs, experiment, expr, is_default, params,
                         n_shards, shard_rows, total, stats, columns)
    mpath = out / "manifest.json"
    tmp = out / ".tmp-manifest.json"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    os.replace(tmp, mpath)
    return ExportResult(kind=spec.name, out=str(out), format=format, rows=stats.rows,
                        duplicates_removed=stats.duplicates, shards=manifest["shards"], manifest=str(mpath),
                        seconds=round(time.perf_counter() - t0, 3), decontamination=manifest["decontamination"])


def _splits_of(con, stats: WriteStats) -> set:
    if not stats.tasks:
        return set()
    con.execute("CREATE OR REPLACE TEMP TABLE export_tasks_seen (run_id VARCHAR, task_id BIGINT)")
    con.executemany("INSERT INTO export_tasks_seen VALUES (?, ?)", [list(t) for t in stats.tasks])
    return {r[0] for r in con.execute(
        "SELECT DISTINCT e.split FROM export_episodes AS e SEMI JOIN export_tasks_seen AS s "
        "ON s.run_id = e.run_id AND s.task_id IS NOT DISTINCT FROM e.task_id").fetchall()}


def _manifest(spec: Kind, fmt, root, snapshot, selected, runs, experiment, expr, is_default, params, n_shards,
              shard_rows, total, stats: WriteStats, columns) -> dict:
    return {
        "kind": spec.name,
        "grain": spec.grain,
        "trl": spec.trl,
        "format": fmt,
        "columns": columns,
        "sample_columns": list(spec.sample),
        "kind_sql_sha256": spec.sql_sha256,
        "exporter_version": EXPORTER_VERSION,
        "warehouse": {"root": root, "snapshot": snapshot},
        "source_runs": [{"run_id": r["run_id"], "fingerprint": r["fingerprint"], "source_format": r["source_format"],
                         "experiment": r["experiment"], "split": r["split"]} for r in selected],
        "filters": {"runs": list(runs) if runs else None, "experiment": experiment, "where": expr,
                    "where_is_kind_default": is_default},
        "parameters": {k.removeprefix("export_"): v for k, v in params.items()},
        "sharding": {"by": SHARDING, "order": "sample_id", "shard_rows": shard_rows,
                     "shards": n_shards},
        "rows_selected": total,
        "duplicates_removed": stats.duplicates,
        "rows": stats.rows,
        "shards": [{"file": s.file, "rows": s.rows, "bytes": s.bytes, "sha256": s.sha256} for s in stats.shards],
        "privacy": {"reasoning_included": bool(params["export_include_reasoning"]),
                    "persona_included": bool(params["export_include_persona"]),
                    "private_goal": "never stored, never exported (no goal-derived column such as right_product)"},
        "decontamination": decontamination(selected, stats.splits, stats.tasks),
    }
