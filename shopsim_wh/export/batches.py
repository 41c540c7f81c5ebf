"""Bounded memory, one evaluation: a kind is computed per batch of episodes into spill buckets, then sharded.

1. **Compute** (each row once). The scoped episodes are split into batches of about ``batch_episodes`` by the
   md5 of the kind's batch key: the episode, or the task for kinds that compare the rollouts of a task
   (``-- batch: task`` in the kind's header: preference, prm). The base views the exports read (:data:`SHADOWED`)
   are copied once into one folder per batch (streamed, not sorted: :func:`shadow`), and for each batch shadowed
   by TEMP views over that batch's files alone (its cost does not grow with the warehouse), the
   building blocks are materialized for that batch alone, and the kind's rows (with their JSONL line and an md5
   key over the sample columns and their episode's hash) are routed by that hash's range to the spill's buckets
   (:class:`Spill`: one Parquet file per range, appended to by every batch). A query so holds one batch's
   conversations: the list and string aggregates that cannot spill stay bounded however large the warehouse grows.
2. **Count** from the bucket files' narrow columns: the rows (which size the shards) and the sample keys seen
   more than once with the smallest ``sample_id`` of each (exact duplicates are removed across the whole export).
3. **Shard**: shard after shard (a shard is a range of the episode hash too, :func:`shard_sql`), the rows of the
   buckets its range overlaps, filtered to it and sorted by ``sample_id``, to the writer, which so holds one open
   shard. Each row is read once (twice where a bucket straddles two shards) and each sort holds one shard: the cost
   is linear in the rows and the memory flat in the shards. (Before: buckets of ``sample_id`` ranges, every shard
   open at once, each holding up to a row group of rows: 4.5 GB at 139 shards.)

The output does not depend on the batches or buckets (rows are re-sharded by episode and sorted), so it is
byte-identical to a one-batch export; tests hold that.

**Record kinds** (``-- record:``: one row per episode, ``sample_id`` the md5 of the episode,
:func:`record_sample_id`) skip phases 1-3's spill (:func:`plan_records`): a batch is a range of the episodes
ordered by (shard, ``sample_id``), so batches taken in order give the rows in the shard writer's order; they are computed two at a time and handed over
in order (core._in_order), each row written once. The sample key is the episode: no duplicate to search for.
At 10,000 runner episodes this took the v4 export from ~35 to ~24 CPU-s (the spill's write, read-back and sort).
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..engines.db import ident, sql_string
from .registry import SHADOWED, Kind
from .writer import DUP, HASH, KEY, SHARD, _conform, _plain_type

DEFAULT_BATCH_EPISODES = 500
WORKERS = 2  # batches computed at once (threads, one DuckDB cursor each)
BUCKET_BYTES = 128 << 20  # Arrow bytes a spill bucket holds, about: what one phase-3 sort holds
MAX_BUCKETS = 4096  # open bucket files, at most (past it buckets grow and their sorts spill)
PENDING_BYTES = 64 << 20  # rows routed to buckets but not written yet, at most (then every bucket is flushed)
# row groups the open bucket writers hold, about, in all: an open ParquetWriter keeps every row group's metadata
# (~17 KB each at 20 columns), and every flush adds one to each bucket, so a bucket's file is closed and the next
# one started past its share (at 1M episodes, 634 buckets x ~1,300 flushes held 10.9 GB before this)
SPILL_OPEN_GROUPS = 16384
SPILL_PART_GROUPS = 8  # row groups a bucket part holds, at least
SHADOW_ROWS = 2048  # base rows per Arrow batch out of DuckDB, and per row group of a batch's copy (at least)
# base rows routed at once, at most (rows, bytes): each routed chunk is cut into one slice per batch folder, and
# at 2,048 rows that was ~50 rows a slice at 40 folders (the copy cost 65 CPU s at 100k episodes, 30 this way)
SHADOW_ROUTE_ROWS, SHADOW_ROUTE_BYTES = 32768, 16 << 20
SHADOW_PENDING_BYTES = 64 << 20  # base rows routed to batches but not written yet, at most (then all are flushed)
SHADOW_OPEN_FILES = 256  # batch files open at once while the base rows are copied, at most
BATCH_COLUMN = "__batch"
SPILL_ROW_GROUP = 2048  # rows per Arrow batch out of a batch's query, and per bucket row group (at least)
# the same, in the order of their usual bytes per episode at runner shape, largest first (copies started first)
SHADOW_SIZE_ORDER = ("observations", "messages", "steps", "actions", "tools", "episodes", "agents")
# The sample key (:func:`sample_key`) is KEY: the md5 of the sample columns as two unsigned 64-bit halves
KEY_COLUMNS = ", ".join(KEY)
HASH_SPAN = 1 << 32


def hash_sql(column: str = "episode_id") -> str:
    """The 32-bit hash an episode's rows are sharded by: its id's md5, first 8 hex digits, as an integer."""
    return f"CAST(('0x' || left(md5(CAST({column} AS VARCHAR)), 8)) AS BIGINT)"


def shard_sql(n_shards: int, column: str = "episode_id") -> str:
    """A row's shard of ``n_shards``: which of ``n_shards`` equal ranges of :func:`hash_sql` its episode's hash
    falls in (:func:`shard_of` in Python). Ranges, not a modulo, so that a spill bucketed by hash range
    (:class:`Spill`) gives the rows shard after shard and the writer holds one shard at a time."""
    return f"CAST(({hash_sql(column)} * {int(n_shards)}) // {HASH_SPAN} AS INTEGER)"


def shard_of(episode_id, n_shards: int) -> int:
    """:func:`shard_sql` in Python."""
    import hashlib

    return int(hashlib.md5(str(episode_id).encode()).hexdigest()[:8], 16) * n_shards // HASH_SPAN


def hash_range(i: int, n: int) -> tuple[int, int]:
    """The hashes (inclusive bounds) of range ``i`` of ``n`` (shard or spill bucket): ``h * n // 2**32 == i``."""
    return -(-i * HASH_SPAN // n), -(-(i + 1) * HASH_SPAN // n) - 1


def workers() -> int:
    """Batches computed at once (each on its own cursor): ``SHOPSIM_WH_EXPORT_THREADS`` or :data:`WORKERS`.
    A batch's queries are too small for DuckDB to spread over cores (one row group each), so the batches are."""
    return _positive_env("SHOPSIM_WH_EXPORT_THREADS", WORKERS)


def _positive_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    try:
        n = int(raw) if raw else default
    except ValueError:
        n = 0
    if n < 1:
        from .registry import ExportError

        raise ExportError(f"{name} must be a positive integer, not {raw!r}")
    return n


def spill_bucket_bytes() -> int:
    """Arrow bytes per spill bucket: ``SHOPSIM_WH_EXPORT_BUCKET_BYTES`` or :data:`BUCKET_BYTES`."""
    return _positive_env("SHOPSIM_WH_EXPORT_BUCKET_BYTES", BUCKET_BYTES)


def batch_episodes(spec: Kind | None = None) -> int:
    """Episodes per batch: ``SHOPSIM_WH_EXPORT_BATCH_EPISODES``, else the kind's ``-- batch-episodes:``, else
    :data:`DEFAULT_BATCH_EPISODES`."""
    default = (spec.batch_episodes if spec is not None else None) or DEFAULT_BATCH_EPISODES
    return _positive_env("SHOPSIM_WH_EXPORT_BATCH_EPISODES", default)


def scoped_episodes(episodes_where: str | None = None) -> str:
    """The FROM clause of the episodes an export plans: those of the scoped runs, and with ``episodes_where`` (the
    episode-level part of the --where, scope.pushdown) only those it holds for: the rows of the others would
    all be filtered out, so they are never built."""
    if episodes_where is None:
        return "episodes WHERE run_id IN (SELECT run_id FROM export_scope)"
    return f"export_episode_facts WHERE {episodes_where}"


def plan(con, spec: Kind, per_batch: int, episodes_where: str | None = None) -> int:
    """Fill TEMP TABLE export_batch_plan (run_id, episode_id, batch) for the scoped episodes (see
    :func:`scoped_episodes`); return the batches (one for a kind of ``-- batch: all``)."""
    con.execute(f"""CREATE OR REPLACE TEMP TABLE export_batch_episodes AS
        SELECT run_id, episode_id, task_id FROM {scoped_episodes(episodes_where)}""")
    n = con.execute("SELECT count(*) FROM export_batch_episodes").fetchone()[0]
    batches = 1 if spec.batch == "all" else max(1, math.ceil(n / per_batch))
    key = ("coalesce(CAST(task_id AS VARCHAR), chr(0))" if spec.batch == "task"
           else "run_id || '/' || episode_id")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE export_batch_plan AS
        SELECT run_id, episode_id, CAST(md5_number({key}) % {batches} AS INTEGER) AS batch
        FROM export_batch_episodes""")
    con.execute("DROP TABLE export_batch_episodes")
    return batches


def shadow_columns(con, db: str, spec: Kind, blocks) -> dict[str, list[str]] | None:
    """The columns of each :data:`SHADOWED` view the batches of ``spec`` can read: those whose name is a word of
    the SQL the kind reaches (its file, the building blocks, and every shipped view or macro they name,
    transitively), so that :func:`shadow` copies no other (at runner shape the observations' payloads and
    states, ~60% of the base rows' bytes, that ``sft-action`` never reads). Held only if the kind's view, its
    blocks and its decisions view bind over views of those columns alone to the same columns and types (a
    column reached through ``*`` only, or named where no word shows it, fails that check): else None, every
    column is copied; so for a record kind, whose fallback records the dump writer builds from the batch's views.
    """
    if spec.record:
        return None
    from ..engines.db import reachable, shipped_refs
    from ..engines.db import words as words_of

    refs = shipped_refs()
    own = words_of(spec.sql)
    words = own.union(*(refs[n] for n in reachable(own | {b.lower() for b in blocks}, refs)))
    keep = {}
    for name in SHADOWED:
        cols = [r[0] for r in con.execute(f"DESCRIBE {db}.main.{name}").fetchall()]
        keep[name] = [c for c in cols if c.lower() in words or c in ("run_id", "episode_id")]
    checked = [spec.view, *blocks, *([spec.decisions] if spec.decisions else [])]
    want = [con.execute(f"DESCRIBE SELECT * FROM {v}").fetchall() for v in checked]
    try:
        for name, cols in keep.items():
            con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT {', '.join(ident(c) for c in cols)} "
                        f"FROM {db}.main.{name}")
        got = [con.execute(f"DESCRIBE SELECT * FROM {v}").fetchall() for v in checked]
    except Exception:  # noqa: BLE001 - a column the words missed: DuckDB's binder says so
        got = None
    finally:
        for name in SHADOWED:
            con.execute(f"DROP VIEW IF EXISTS temp.main.{name}")
    return keep if got == want else None


def shadow(con, db: str, spill: Path, columns: dict[str, list[str]] | None = None, each=None) -> None:
    """Copy each :data:`SHADOWED` base view's scoped rows once into ``spill``, one folder per batch
    (``base/<view>/<batch>/part-<n>.parquet``), so that a batch reads exactly its own files: one pass over the base
    tables, not one per batch, and no batch opens a file whose size grows with the warehouse. DuckDB streams the
    rows (scan and join, no sort) as Arrow, and :class:`_Router` sends each to its batch's folder holding at most
    :data:`SHADOW_PENDING_BYTES` of rows in memory: the copy's memory does not grow with the warehouse (the sort
    by batch this replaces ran out of memory on rows of several KB).

    ``columns``: the columns to copy of each view (:func:`shadow_columns`), else all. ``each(copy, names)``: runs
    ``copy(cursor, name)`` for every view name, largest first (export.core runs them on two cursors at once; a
    cursor sees the warehouse views and an ``export_batch_plan``); default: one after the other on ``con``.

    Past :data:`SHADOW_OPEN_FILES` batches the rows go in two passes, each routing to at most that many folders:
    to groups of consecutive batches first, then each group's rows to its batches. In one pass every flush closed
    and reopened files for thousands of folders (at 1M episodes, 2,000 batches: 16,001 files of ~19 KB for the
    first 300 MB of `episodes`), so the copy's cost grew with the batches times the rows."""
    n_batches = con.execute("SELECT coalesce(max(batch), 0) + 1 FROM export_batch_plan").fetchall()[0][0]
    # as many groups as batches per group (each pass cuts a flush into as few pieces as the other)
    per_group = 1 if n_batches <= SHADOW_OPEN_FILES else max(math.ceil(n_batches / SHADOW_OPEN_FILES),
                                                               math.isqrt(n_batches - 1) + 1)

    def copy(cur, name: str) -> None:
        cols = "t.*" if columns is None else ", ".join(f"t.{ident(c)}" for c in columns[name])
        reader = cur.sql(f"""SELECT {cols}, p.batch AS {BATCH_COLUMN} FROM {db}.main.{name} AS t
            JOIN export_batch_plan AS p ON p.run_id = t.run_id AND p.episode_id = t.episode_id""").to_arrow_reader(
            SHADOW_ROWS)
        folder = spill / "base" / name
        try:
            if per_group == 1:
                _route_all(reader, _Router(folder, reader.schema))
                return
            groups = folder / "groups"
            _route_all(reader, _Router(groups, reader.schema, per_group))
        finally:
            reader.close()
        _Router(folder, reader.schema).close()  # writes folder/empty.parquet, also when no group got a row
        for group in sorted(p for p in groups.iterdir() if p.is_dir()):
            _route_all(_read_parts(sorted(group.glob("*.arrow"))), _Router(folder, reader.schema, empty=False))
            shutil.rmtree(group)
        shutil.rmtree(groups)

    names = sorted(SHADOWED, key=SHADOW_SIZE_ORDER.index)
    if each is None:
        for name in names:
            copy(con, name)
    else:
        each(copy, names)


def _route_all(batches: Iterator[pa.RecordBatch] | pa.RecordBatchReader, router: _Router) -> None:
    """Every Arrow batch of ``batches`` to ``router``, routed :data:`SHADOW_ROUTE_ROWS` rows (or
    :data:`SHADOW_ROUTE_BYTES`) at a time; closes it."""
    chunk: list[pa.RecordBatch] = []
    rows = size = 0
    try:
        for batch in batches:
            chunk.append(batch)
            rows, size = rows + batch.num_rows, size + batch.get_total_buffer_size()
            if rows >= SHADOW_ROUTE_ROWS or size >= SHADOW_ROUTE_BYTES:
                router.add(_one_batch(chunk, router.input_schema))
                chunk, rows, size = [], 0, 0
        if chunk:
            router.add(_one_batch(chunk, router.input_schema))
    finally:
        router.close()


def _read_parts(files: list[Path]) -> Iterator[pa.RecordBatch]:
    """The rows of a group's Arrow IPC part files (the first pass of :func:`shadow`), as written."""
    for f in files:  # read, not memory-mapped: routed slices outlive the file
        with pa.OSFile(str(f)) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)


def _one_batch(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return next(iter(pa.Table.from_batches(batches, schema).combine_chunks().to_batches()), batches[0])


class _Routed:
    """Rows routed by an integer key to one writer per key: a key's rows wait in memory until they fill a row group
    (``rows``), or until all keys together hold ``pending`` bytes (then every key is flushed). Subclasses say where
    a key's rows go (:meth:`_open`: a Parquet writer unless they say otherwise). Shared by the base-row copy and
    the spill. Sizes are counted once per routed batch (the bytes of a slice cost a walk of its buffers each
    time asked: that was 13% of the copy at 1M episodes)."""

    def __init__(self, rows: int, pending: int, groups: int | None = None):
        self.rows, self.pending_limit, self.groups_limit = rows, pending, groups
        self.groups: dict[int, int] = {}  # row groups in each open writer
        self.schema: pa.Schema | None = None
        self.writers: dict[int, pq.ParquetWriter] = {}
        self.pending: dict[int, list[pa.RecordBatch]] = {}
        self.pending_rows: dict[int, int] = {}
        self.pending_sizes: dict[int, int] = {}
        self.pending_bytes = 0

    def _route(self, rows: pa.RecordBatch, key: pa.Array) -> None:
        """Queue ``rows`` under their ``key`` (int32, one per row; sorted here unless it is already)."""
        import pyarrow.compute as pc

        if rows.num_rows > 1 and not pc.all(pc.less_equal(key[:-1], key[1:])).as_py():
            order = pc.sort_indices(key)  # stable: a key's rows keep their order
            rows, key = rows.take(order), key.take(order)
        per_row = rows.nbytes / max(rows.num_rows, 1)
        runs = pc.run_end_encode(key)
        start = 0
        for k, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist(), strict=True):
            n, size = end - start, int((end - start) * per_row)
            self.pending.setdefault(k, []).append(rows.slice(start, n))
            self.pending_rows[k] = self.pending_rows.get(k, 0) + n
            self.pending_sizes[k] = self.pending_sizes.get(k, 0) + size
            self.pending_bytes += size
            if self.pending_rows[k] >= self.rows:
                self._flush(k)
            start = end
        if self.pending_bytes > self.pending_limit:
            self._flush_all()

    def _open(self, k: int) -> pq.ParquetWriter:
        raise NotImplementedError

    def _write(self, writer, table: pa.Table) -> None:
        writer.write_table(table, row_group_size=max(table.num_rows, 1))

    def _flush(self, k: int) -> None:
        parts = self.pending.pop(k, [])
        self.pending_rows.pop(k, None)
        self.pending_bytes -= self.pending_sizes.pop(k, 0)
        if not parts:
            return
        if k not in self.writers:
            self.writers[k] = self._open(k)
        self._write(self.writers[k], pa.Table.from_batches(parts, self.schema))
        self.groups[k] = self.groups.get(k, 0) + 1
        if self.groups_limit is not None and self.groups[k] >= self.groups_limit:
            self.writers.pop(k).close()  # its row groups' metadata leaves memory; the next rows start a new part
            del self.groups[k]

    def _flush_all(self) -> None:
        for k in list(self.pending):
            self._flush(k)

    def _close_writers(self) -> None:
        for w in self.writers.values():
            w.close()
        self.writers.clear()
        self.groups.clear()


class _Router(_Routed):
    """Rows (with their batch in :data:`BATCH_COLUMN`) to ``folder/<batch>/part-<n>.parquet``, without it, in row
    groups of :data:`SHADOW_ROWS` (at least), holding at most :data:`SHADOW_PENDING_BYTES`; at most
    :data:`SHADOW_OPEN_FILES` files are open at once (past it all are closed and later rows go to new parts).
    ``folder/empty.parquet`` holds the schema alone, for a batch without rows here. With ``per_group`` > 1 (the
    first of :func:`shadow`'s two passes) the folders are groups of that many consecutive batches
    (``batch // per_group``), the rows keep their batch column, and the files are Arrow IPC, uncompressed: read
    once by the second pass, so written without Parquet's encoding (LZ4 cost as much as it)."""

    def __init__(self, folder: Path, schema: pa.Schema, per_group: int = 1, empty: bool = True):
        super().__init__(SHADOW_ROWS, SHADOW_PENDING_BYTES)
        self.folder, self.per_group, self.input_schema = folder, per_group, schema
        self.schema = schema if per_group > 1 else pa.schema([f for f in schema if f.name != BATCH_COLUMN])
        self.parts: dict[int, int] = {}
        folder.mkdir(parents=True, exist_ok=True)
        if per_group == 1 and empty:  # once per view: a second pass's routers share the folder
            pq.ParquetWriter(folder / "empty.parquet", self.schema).close()

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            key = batch.column(BATCH_COLUMN)
            if self.per_group > 1:
                import pyarrow.compute as pc

                key = pc.divide(key, pa.scalar(self.per_group, key.type))  # integer division
            self._route(batch.select(self.schema.names), key)

    def _open(self, b: int) -> pq.ParquetWriter:
        if len(self.writers) >= SHADOW_OPEN_FILES:
            self._close_writers()
        n = self.parts.get(b, 0)
        self.parts[b] = n + 1
        folder = self.folder / str(b)
        folder.mkdir(exist_ok=True)
        if self.per_group > 1:
            return pa.ipc.new_file(folder / f"part-{n:05d}.arrow", self.schema)
        return pq.ParquetWriter(folder / f"part-{n:05d}.parquet", self.schema, write_statistics=False)

    def _write(self, writer, table: pa.Table) -> None:
        if self.per_group > 1:
            writer.write_table(table)
        else:
            super()._write(writer, table)

    def close(self) -> None:
        self._flush_all()
        self._close_writers()


def share_staging(con, spill: Path) -> list[tuple[str, Path]]:
    """Copy the connection's TEMP ``stg_`` tables (small warehouse tables held in memory, db.install_views) to
    Parquet in ``spill``, so that another cursor, which cannot see this connection's TEMP tables, can read them
    (:func:`use_staging`). Returns (name, file) pairs."""
    base = spill / "base"
    base.mkdir(exist_ok=True)
    out = []
    for (name,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary AND table_name LIKE 'stg\\_%' "
                               "ESCAPE '\\' ORDER BY 1").fetchall():
        path = base / f"{name}.parquet"
        if not path.exists():  # once per export: the base-row copy's cursors and the batches' share them
            con.execute(f"COPY temp.main.{ident(name)} TO {sql_string(str(path))} (FORMAT parquet)")
        out.append((name, path))
    return out


def use_staging(cur, shared: list[tuple[str, Path]]) -> None:
    for name, path in shared:
        cur.execute(f"CREATE OR REPLACE TEMP VIEW {ident(name)} AS SELECT * FROM read_parquet({sql_string(str(path))})")


def unshadow(con) -> None:
    for name in SHADOWED:
        con.execute(f"DROP VIEW IF EXISTS temp.main.{name}")
    for name in ("export_batch_plan", "export_dupkeys"):
        con.execute(f"DROP TABLE IF EXISTS temp.main.{name}")


def select_batch(con, spill: Path, batch: int) -> None:
    """Point the :data:`SHADOWED` TEMP views at the rows of ``batch`` (its own files, :func:`shadow`)."""
    for name in SHADOWED:
        folder = spill / "base" / name
        files = folder / str(int(batch)) / "*.parquet" if (folder / str(int(batch))).is_dir() else folder / "empty.parquet"
        con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS "
                    f"SELECT * FROM read_parquet({sql_string(str(files))}, hive_partitioning = false)")


def record_sample_id(spec: Kind) -> str:
    """A record kind's ``sample_id`` (its view's, one per episode), so that its batches can be planned as ranges of
    it: :func:`check_planned` refuses a batch whose rows carry other ids."""
    return f"md5(run_id || '/' || episode_id || {sql_string(':' + spec.name)})"


def direct(spec: Kind, exact: bool, episodes: int, shard_rows: int) -> bool:
    """Can ``spec`` skip the spill (see :func:`plan_records`)? A record kind can when the shard count is known
    before its rows are: when the plan is ``exact`` (no where, or one applied whole to the plan: every planned
    episode gives one row), or when all planned episodes fit one shard."""
    return spec.record is not None and (exact or episodes <= shard_rows)


def plan_records(con, spec: Kind, per_batch: int, episodes_where: str | None = None,
                 shard_rows: int | None = None) -> list[list[str]]:
    """A record kind's plan (one row per episode, its ``sample_id`` known up front: :func:`record_sample_id`):
    TEMP TABLE export_batch_plan (run_id, episode_id, sample_id, batch) with batch ``i`` the ``i``-th range of
    ``per_batch`` episodes in the writer's order: by shard (:func:`shard_sql`, of ``ceil(episodes / shard_rows)``
    shards), then ``sample_id``. Batches computed in order then hand their sorted rows straight to the shard
    writer, already in its order: no spill, no re-sort, no duplicate search (the sample key is the episode).
    ``episodes_where``: see :func:`scoped_episodes`. Returns each batch's sample ids, in that order."""
    scoped = scoped_episodes(episodes_where)
    n = con.execute(f"SELECT count(*) FROM {scoped}").fetchone()[0]
    shards = max(1, math.ceil(n / shard_rows)) if shard_rows else 1
    con.execute(f"""CREATE OR REPLACE TEMP TABLE export_batch_plan AS
        SELECT run_id, episode_id, sample_id, CAST(pos // {int(per_batch)} AS INTEGER) AS batch, pos
        FROM (SELECT *, row_number() OVER (ORDER BY {SHARD}, sample_id) - 1 AS pos
              FROM (SELECT run_id, episode_id, {record_sample_id(spec)} AS sample_id, {shard_sql(shards)} AS {SHARD}
                    FROM {scoped}))""")
    ids = con.execute("SELECT sample_id FROM export_batch_plan ORDER BY pos").fetchall()
    return [[i for (i,) in ids[s:s + per_batch]] for s in range(0, len(ids), per_batch)] or [[]]


def check_planned(spec: Kind, rows: pa.Table, planned: list[str], every: bool) -> None:
    """The batch's rows are its planned episodes, in the planned order, once each (``every``: all of them; else a
    subset, as a ``where`` leaves): else its view's ``sample_id`` is not :func:`record_sample_id` and the order is
    wrong."""
    got = rows.column("sample_id").to_pylist()
    if every:
        ok = got == planned
    else:
        at = {sid: i for i, sid in enumerate(planned)}
        pos = [at.get(sid, -1) for sid in got]
        ok = -1 not in pos and all(a < b for a, b in zip(pos, pos[1:], strict=False))
    if not ok:
        from .registry import ExportError

        raise ExportError(f"kind {spec.name}: the view's rows are not the planned episodes (sample_id must be "
                          f"{record_sample_id(spec)}, one row per episode); fix {spec.path}")


def sample_key(spec: Kind) -> str:
    """The md5 of the kind's sample columns (``md5_number``: a 128-bit number; :data:`KEY` holds its halves)."""
    parts = [f"coalesce(CAST({c} AS VARCHAR), chr(0))" for c in spec.sample]
    return "md5_number(" + " || chr(31) || ".join(parts) + ")"


def compute_sql(spec: Kind, where: str | None, fmt: str, columns: list[str], shards: int | None = None) -> str:
    """Phase 1's query: the kind's rows with the sample key and, for JSONL, the line text. ``shards``: a record
    kind written directly (:func:`plan_records`): each row's shard instead of the sample key, and no ORDER BY
    (:func:`record_rows` sorts the batch's rows)."""
    filt = f"WHERE ({where})" if where else ""
    extra = ""
    if fmt == "jsonl" and not spec.record:
        line = (f"CAST({spec.line} AS VARCHAR)" if spec.line else
                "CAST(to_json(struct_pack(" + ", ".join(f'"{c}" := "{c}"' for c in columns) + ")) AS VARCHAR)")
        extra = f", {line} AS __line"
    if shards is not None:
        return f"SELECT *, {shard_sql(shards)} AS {SHARD}, 1 AS {DUP} FROM {spec.view} {filt}"
    tail = f", 0 AS {SHARD}, 1 AS {DUP}" if spec.record else ""  # record_batches carries them through
    return (f"SELECT * EXCLUDE (__k), CAST(__k >> 64 AS UBIGINT) AS {KEY[0]}, "
            f"CAST(__k & CAST({(1 << 64) - 1} AS UHUGEINT) AS UBIGINT) AS {KEY[1]} "
            f"FROM (SELECT *{extra}, {sample_key(spec)} AS __k, {hash_sql()} AS {HASH}{tail} FROM {spec.view} {filt}) "
            "ORDER BY sample_id")


def batch_reader(con, spec: Kind, query: str, fmt: str, params: dict, dump=None) -> pa.RecordBatchReader:
    """One batch's rows as Arrow (JSON as ``arrow.json``): DuckDB's for SQL kinds, the record builder's for record
    kinds. ``dump`` (another engine's rows, registered as the kind's view on ``con``): the DuckDB connection with
    the ``stg_`` views the fallback episodes are read from, every record re-spelt (records.finish)."""
    if not spec.record:
        return con.sql(query).to_arrow_reader(SPILL_ROW_GROUP)
    from .records import finish, record_batches

    privacy = {"reasoning": bool(params["export_include_reasoning"]), "persona": bool(params["export_include_persona"])}
    reader = (record_batches(con, query, spec.record, fmt, **privacy) if dump is None else
              finish(con.sql(query).to_arrow_reader(SPILL_ROW_GROUP), spec.record, fmt, dump, foreign=True, **privacy))
    keep = [n for n in reader.schema.names if n not in (SHARD, DUP)]
    schema = pa.schema([reader.schema.field(n) for n in keep])

    def column(batch: pa.RecordBatch, name: str) -> pa.Array:
        if name == "record" and fmt == "jsonl":  # the line is the record: one copy through the spill
            return pa.nulls(batch.num_rows, schema.field(name).type)
        return batch.column(name)

    return pa.RecordBatchReader.from_batches(schema, (
        pa.RecordBatch.from_arrays([column(b, n) for n in keep], schema=schema) for b in reader))


def record_rows(con, spec: Kind, query: str, fmt: str, params: dict) -> pa.Table:
    """One batch of a record kind written directly (:func:`plan_records`): its finished rows with ``__shard``, in
    the writer's order (shard, then ``sample_id``)."""
    from .records import record_batches

    return record_batches(con, query, spec.record, fmt, reasoning=bool(params["export_include_reasoning"]),
                          persona=bool(params["export_include_persona"]), order=(SHARD, "sample_id")).read_all()


class Spill(_Routed):
    """Phase 1's output: every row once, in buckets of episode-hash ranges (:func:`hash_range`; bucket i holds the
    rows whose episode hashes to range i of ``n_buckets``), so that phase 3 reads each row once, shard after shard
    (a shard is a hash range too: the buckets it overlaps) however many batches there were. The number of buckets
    is such that a bucket holds about ``bucket_bytes`` (the first non-empty batch's Arrow size times the number of
    batches; batches are random shares of the episodes); a bucket larger than planned only makes its sort spill. A
    bucket is one Parquet file, or several parts when its writer reached its share of :data:`SPILL_OPEN_GROUPS`
    row groups (memory stays flat however many flushes)."""

    def __init__(self, folder: Path, n_batches: int, bucket_bytes: int | None = None):
        super().__init__(SPILL_ROW_GROUP, PENDING_BYTES)
        self.folder, self.n_batches = folder, n_batches
        self.bucket_bytes = bucket_bytes or spill_bucket_bytes()
        self.n_buckets: int | None = None
        self.parts: dict[int, list[Path]] = {}

    def add(self, table: pa.Table) -> None:
        """Route one batch's rows (any order; with their :data:`HASH`) to their buckets."""
        if self.schema is None:
            self.schema = pa.schema([f.with_type(_plain_type(f.type)) for f in table.schema])
        if table.num_rows == 0:
            return
        if self.n_buckets is None:
            self.n_buckets = max(1, min(MAX_BUCKETS, math.ceil(table.nbytes * self.n_batches / self.bucket_bytes)))
            self.groups_limit = max(SPILL_PART_GROUPS, SPILL_OPEN_GROUPS // self.n_buckets)
        for batch in table.to_batches(SPILL_ROW_GROUP):
            if batch.num_rows:
                self._route(_conform(batch, self.schema), self._bucket(batch.column(HASH)))

    def _bucket(self, h: pa.Array) -> pa.Array:
        """Each row's bucket: the range of ``n_buckets`` its hash falls in."""
        import pyarrow.compute as pc

        return pc.divide(pc.multiply(h.cast(pa.int64()), self.n_buckets), HASH_SPAN).cast(pa.int32())

    def _open(self, i: int) -> pq.ParquetWriter:
        parts = self.parts.setdefault(i, [])
        parts.append(self.folder / f"bucket-{i:05d}-{len(parts):04d}.parquet")
        return pq.ParquetWriter(parts[-1], self.schema, write_statistics=False)

    def close(self) -> list[list[Path]]:
        """Each bucket's part files, for every bucket in hash order (a bucket no row came to has none; no row at
        all: one bucket, an empty file with the schema)."""
        self._flush_all()
        self._close_writers()
        if not self.parts:  # no row: one empty file (empty_table cannot build extension arrays)
            empty = self.folder / "bucket-empty.parquet"
            pq.ParquetWriter(empty, self.schema).close()
            return [[empty]]
        return [self.parts.get(i, []) for i in range(self.n_buckets)]


def count(con, buckets: list[list[Path]]) -> int:
    """The rows in the spill's buckets (:meth:`Spill.close`); fills TEMP TABLE export_dupkeys (sample keys seen
    more than once, with the ``sample_id`` kept: the smallest)."""
    files = [f for parts in buckets for f in parts]
    src = _source(files)
    # the keys seen twice first (a hash table of 16-byte keys and counts), then the kept sample_id of those alone
    con.execute(f"""CREATE OR REPLACE TEMP TABLE export_dupkeys AS
        WITH twice AS (SELECT {KEY_COLUMNS} FROM {src} GROUP BY {KEY_COLUMNS} HAVING count(*) > 1)
        SELECT {KEY_COLUMNS}, min(sample_id) AS keep FROM {src} SEMI JOIN twice USING ({KEY_COLUMNS})
        GROUP BY {KEY_COLUMNS}""")
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def _source(files: list[Path]) -> str:
    return "read_parquet([" + ", ".join(sql_string(str(f)) for f in files) + "])"


def ordered_reader(con, buckets: list[list[Path]], n_shards: int, batch_rows: int) -> pa.RecordBatchReader:
    """Every spill row, shard after shard (:func:`shard_sql`) and in ``sample_id`` order within a shard, with its
    ``__shard`` and ``__dup`` (2 = a later exact duplicate of a sample key, counted and dropped by the writer): one
    query per shard over the buckets its hash range overlaps (:meth:`Spill.close`), so each sort holds one shard
    and the writer one open shard, however many shards there are (with every shard open at once, 139 shards held
    ~4.5 GB of rows waiting for their row groups)."""
    files = [f for parts in buckets for f in parts]

    def query(shard: int, parts: list[Path]) -> str:
        lo, hi = hash_range(shard, n_shards)
        return f"""
            SELECT r.* EXCLUDE ({KEY_COLUMNS}, {HASH}), CAST({int(shard)} AS INTEGER) AS {SHARD},
                   CASE WHEN d.keep IS NOT NULL AND r.sample_id <> d.keep THEN 2 ELSE 1 END AS {DUP}
            FROM {_source(parts)} AS r
            LEFT JOIN export_dupkeys AS d ON d.{KEY[0]} = r.{KEY[0]} AND d.{KEY[1]} = r.{KEY[1]}
            WHERE r.{HASH} BETWEEN {lo} AND {hi}
            ORDER BY r.sample_id"""

    def parts_of(shard: int) -> list[Path]:
        lo, hi = hash_range(shard, n_shards)
        n = len(buckets)
        return [f for parts in buckets[lo * n // HASH_SPAN:hi * n // HASH_SPAN + 1] for f in parts]

    schema = con.sql(query(0, files[:1]) + " LIMIT 0").to_arrow_table().schema

    def gen() -> Iterator[pa.RecordBatch]:
        for shard in range(n_shards):
            parts = parts_of(shard)
            if not parts:
                continue
            reader = con.sql(query(shard, parts)).to_arrow_reader(batch_rows)
            try:
                yield from reader
            finally:
                reader.close()

    return pa.RecordBatchReader.from_batches(schema, gen())
