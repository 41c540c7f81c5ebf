"""Bounded memory, one evaluation: a kind is computed per batch of episodes into spill files, then sharded.

1. **Compute** (each row once). The scoped episodes are split into batches of about ``batch_episodes`` by the
   md5 of the kind's batch key: the episode, or the task for kinds that compare the rollouts of a task
   (``-- batch: task`` in the kind's header: preference, prm). The base views the exports read (:data:`SHADOWED`)
   are copied once, sorted by batch, and for each batch shadowed by TEMP views over that batch's rows, the building blocks are
   materialized for that batch alone, and the kind's rows (with their JSONL line and an md5 key over the sample
   columns) go to one spill Parquet file. A query so holds one batch's conversations: the list and string
   aggregates that cannot spill stay bounded however large the warehouse grows.
2. **Count** from the spill files' narrow columns: the rows (which size the shards) and the sample keys seen
   more than once with the smallest ``sample_id`` of each (exact duplicates are removed across the whole export).
3. **Shard**: the spill rows in ``sample_id`` order, read in chunks of at most :data:`CHUNK_ROWS` rows and
   about :data:`CHUNK_BYTES` (ranges
   of ``sample_id`` cut at exact quantiles), each routed to its shard (``md5_number(episode_id) % shards``) by the
   writer. Every spill file is sorted by ``sample_id`` with small row groups, so a chunk's range filter reads only
   the row groups that hold it: one pass, and a sort of one chunk at a time.

The output does not depend on the batches (rows are re-sharded by episode and sorted), so it is byte-identical
to a one-batch export; tests hold that.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..db import sql_string
from .registry import Kind
from .writer import DUP, SHARD

DEFAULT_BATCH_EPISODES = 500
CHUNK_ROWS = 8192  # rows a phase-3 query sorts, at most
CHUNK_BYTES = 64 << 20  # and about this many uncompressed bytes
SHADOW_MEMORY = "512MB"  # DuckDB's memory while the base rows are sorted by batch (once per export)
SPILL_ROW_GROUP = 2048  # small row groups: tight sample_id ranges in the spill files' statistics
# The base views the export views read whose rows belong to one episode: shadowed per batch.
SHADOWED = ("episodes", "steps", "messages", "actions", "observations", "agents", "tools")
KEY = "__key"


def batch_episodes() -> int:
    """Episodes per batch: ``SHOPSIM_WH_EXPORT_BATCH_EPISODES`` or :data:`DEFAULT_BATCH_EPISODES`."""
    raw = os.environ.get("SHOPSIM_WH_EXPORT_BATCH_EPISODES")
    try:
        n = int(raw) if raw else DEFAULT_BATCH_EPISODES
    except ValueError:
        n = 0
    if n < 1:
        from .registry import ExportError

        raise ExportError(f"SHOPSIM_WH_EXPORT_BATCH_EPISODES must be a positive integer, not {raw!r}")
    return n


def plan(con, spec: Kind, per_batch: int) -> int:
    """Fill TEMP TABLE export_batch_plan (run_id, episode_id, batch) for the scoped episodes; return the batches."""
    n = con.execute("SELECT count(*) FROM episodes WHERE run_id IN (SELECT run_id FROM export_scope)").fetchone()[0]
    batches = max(1, math.ceil(n / per_batch))
    key = ("coalesce(CAST(task_id AS VARCHAR), chr(0))" if spec.batch == "task"
           else "run_id || '/' || episode_id")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE export_batch_plan AS
        SELECT run_id, episode_id, CAST(md5_number({key}) % {batches} AS INTEGER) AS batch
        FROM episodes WHERE run_id IN (SELECT run_id FROM export_scope)""")
    return batches


def shadow(con, db: str, spill: Path, memory: str | None = None) -> None:
    """Copy each :data:`SHADOWED` base view's scoped rows once into ``spill``, sorted by batch in small row
    groups, so that a batch reads its own rows only (row groups pruned on ``__batch``): one pass over the base
    tables, not one per batch. The sorts run under :data:`SHADOW_MEMORY` (spilling past it); the memory limit
    goes back to ``memory`` (default: the current setting) afterwards."""
    base = spill / "base"
    base.mkdir(exist_ok=True)
    limit = memory or con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    con.execute("SET preserve_insertion_order = true")  # the files keep the ORDER BY
    con.execute(f"SET memory_limit = '{SHADOW_MEMORY}'")  # these sorts spill early: memory stays flat
    try:
        for name in SHADOWED:
            con.execute(f"""COPY (
                SELECT t.*, p.batch AS __batch FROM {db}.main.{name} AS t
                JOIN export_batch_plan AS p ON p.run_id = t.run_id AND p.episode_id = t.episode_id
                ORDER BY p.batch) TO {sql_string(str(base / (name + '.parquet')))}
                (FORMAT parquet, ROW_GROUP_SIZE {SPILL_ROW_GROUP})""")
    finally:
        con.execute("SET preserve_insertion_order = false")
        con.execute(f"SET memory_limit = {sql_string(limit)}")


def unshadow(con) -> None:
    for name in SHADOWED:
        con.execute(f"DROP VIEW IF EXISTS temp.main.{name}")
    for name in ("export_batch_plan", "export_dupkeys"):
        con.execute(f"DROP TABLE IF EXISTS temp.main.{name}")


def select_batch(con, spill: Path, batch: int) -> None:
    """Point the :data:`SHADOWED` TEMP views at the rows of ``batch``."""
    for name in SHADOWED:
        path = sql_string(str(spill / "base" / (name + ".parquet")))
        con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS "
                    f"SELECT * EXCLUDE (__batch) FROM read_parquet({path}) WHERE __batch = {int(batch)}")


def sample_key(spec: Kind) -> str:
    parts = [f"coalesce(CAST({c} AS VARCHAR), chr(0))" for c in spec.sample]
    return "md5(" + " || chr(31) || ".join(parts) + ")"


def compute_sql(spec: Kind, where: str | None, fmt: str, columns: list[str]) -> str:
    """Phase 1's query: the kind's rows with the sample key and, for JSONL, the line text."""
    filt = f"WHERE ({where})" if where else ""
    extra = ""
    if fmt == "jsonl" and not spec.record:
        line = (f"CAST({spec.line} AS VARCHAR)" if spec.line else
                "CAST(to_json(struct_pack(" + ", ".join(f'"{c}" := "{c}"' for c in columns) + ")) AS VARCHAR)")
        extra = f", {line} AS __line"
    tail = f", 0 AS {SHARD}, 1 AS {DUP}" if spec.record else ""  # record_batches carries them through
    return f"SELECT *{extra}, {sample_key(spec)} AS {KEY}{tail} FROM {spec.view} {filt} ORDER BY sample_id"


def spill_batch(con, spec: Kind, query: str, path: Path, fmt: str, params: dict) -> None:
    """Write one batch's rows to ``path``: DuckDB's COPY for SQL kinds, the record builder for record kinds."""
    if not spec.record:
        con.execute("SET preserve_insertion_order = true")  # the file keeps the ORDER BY: sorted row groups
        try:
            con.execute(f"COPY ({query}) TO {sql_string(str(path))} (FORMAT parquet, ROW_GROUP_SIZE {SPILL_ROW_GROUP})")
        finally:
            con.execute("SET preserve_insertion_order = false")
        return
    from .records import record_batches

    reader = record_batches(con, query, spec.record, fmt, reasoning=bool(params["export_include_reasoning"]),
                            persona=bool(params["export_include_persona"]))
    keep = [n for n in reader.schema.names if n not in (SHARD, DUP)]
    schema = pa.schema([reader.schema.field(n) for n in keep])

    def column(batch: pa.RecordBatch, name: str) -> pa.Array:
        if name == "record" and fmt == "jsonl":  # the line is the record: one copy through the spill
            return pa.nulls(batch.num_rows, schema.field(name).type)
        return batch.column(name)

    with pq.ParquetWriter(path, schema) as w:
        for batch in reader:
            w.write_batch(pa.RecordBatch.from_arrays([column(batch, n) for n in keep], schema=schema),
                          row_group_size=SPILL_ROW_GROUP)


def count(con, files: list[Path]) -> tuple[int, list[str]]:
    """(rows in the spill files, the ``sample_id`` chunk bounds); fills TEMP TABLE export_dupkeys (sample keys seen
    more than once, with the ``sample_id`` kept: the smallest)."""
    src = _source(files)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE export_dupkeys AS
        SELECT {KEY}, min(sample_id) AS keep FROM {src} GROUP BY {KEY} HAVING count(*) > 1""")
    total = con.execute(f"SELECT count(*) FROM {src}").fetchone()[0]
    raw = sum(_raw_bytes(f) for f in files)
    chunk = max(64, min(CHUNK_ROWS, CHUNK_BYTES * max(total, 1) // max(raw, 1)))
    bounds = [r[0] for r in con.execute(f"""
        SELECT sample_id FROM (SELECT sample_id, row_number() OVER (ORDER BY sample_id) AS rn FROM {src})
        WHERE rn % {chunk} = 1 AND rn > 1 ORDER BY sample_id""").fetchall()]
    return total, sorted(set(bounds))


def _raw_bytes(path: Path) -> int:
    md = pq.ParquetFile(path).metadata
    return sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups))


def _source(files: list[Path]) -> str:
    return "read_parquet([" + ", ".join(sql_string(str(f)) for f in files) + "])"


def ordered_reader(con, files: list[Path], n_shards: int, bounds: list[str], batch_rows: int) -> pa.RecordBatchReader:
    """Every spill row in ``sample_id`` order with its ``__shard`` and ``__dup`` (2 = a later exact duplicate of a
    sample key, counted and dropped by the writer), one ``sample_id`` range per query."""
    src = _source(files)
    edges = [None, *bounds, None]

    def query(lo, hi) -> str:
        cond = " AND ".join([*([f"r.sample_id >= {sql_string(lo)}"] if lo is not None else []),
                             *([f"r.sample_id < {sql_string(hi)}"] if hi is not None else [])]) or "true"
        return f"""
            SELECT r.* EXCLUDE ({KEY}),
                   CAST(md5_number(CAST(r.episode_id AS VARCHAR)) % {int(n_shards)} AS INTEGER) AS {SHARD},
                   CASE WHEN d.keep IS NOT NULL AND r.sample_id <> d.keep THEN 2 ELSE 1 END AS {DUP}
            FROM {src} AS r
            LEFT JOIN export_dupkeys AS d ON d.{KEY} = r.{KEY}
            WHERE {cond}
            ORDER BY r.sample_id"""

    def reader(i: int) -> pa.RecordBatchReader:
        return con.sql(query(edges[i], edges[i + 1])).to_arrow_reader(batch_rows)

    first = reader(0)

    def gen() -> Iterator[pa.RecordBatch]:
        for i in range(len(edges) - 1):
            yield from (first if i == 0 else reader(i))

    return pa.RecordBatchReader.from_batches(first.schema, gen())
