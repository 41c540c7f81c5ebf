"""Shard writing: stream record batches from DuckDB into deterministic shards (temporary names, renamed at the end).

Rows arrive in sample_id order with their shard and a duplicate rank; the writer drops ranks above 1 (counted),
cuts fixed-size row groups (so the bytes do not depend on DuckDB's batch boundaries) and hashes each file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROW_GROUP_ROWS = 4096
SHARD = "__shard"
DUP = "__dup"
HASH = "__h"  # the episode hash shards are ranges of (batches.hash_sql)
# The sample key (batches.sample_key): the md5 of the sample columns as two unsigned 64-bit halves, fixed width, so
# that the duplicate search's hash table holds 16 bytes a row (a 32-character md5 text and the kept sample_id made
# it hit DuckDB's memory cap at 13.7M rows)
KEY = ("__key_hi", "__key_lo")


@dataclass
class ShardStats:
    file: str
    rows: int = 0
    bytes: int = 0
    sha256: str = ""


@dataclass
class WriteStats:
    shards: list[ShardStats] = field(default_factory=list)
    duplicates: int = 0
    tasks: set = field(default_factory=set)  # (run_id, task_id)
    splits: set = field(default_factory=set)

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)


def shard_name(i: int, n: int, fmt: str) -> str:
    return f"part-{i:05d}-of-{n:05d}.{'parquet' if fmt == 'parquet' else 'jsonl'}"


IOV_MAX = 1024  # buffers per writev call (Linux's limit)


def _writev(fd: int, views: list) -> None:
    """All of ``views`` to ``fd`` (``os.writev`` may write fewer bytes than asked: the rest is written again)."""
    left = sum(len(v) for v in views)
    while left:
        n = os.writev(fd, views)
        left -= n
        while n and views:
            if n >= len(views[0]):
                n -= len(views[0])
                views = views[1:]
            else:
                views = [memoryview(views[0])[n:], *views[1:]]
                n = 0


class _HashedFile:
    """A shard file written front to back, hashing the bytes as they go: its sha256 and size without reading it
    back (a 4.65 GB shard's re-read and hash took 10 s of wall time after its last row, while the cores the batches
    had used sat idle; the hash now runs as the rows arrive)."""

    def __init__(self, path: Path):
        self.f, self.h, self.size = open(path, "wb"), hashlib.sha256(), 0

    def write(self, data) -> int:
        self.hash(data)
        return self.put(data)

    def hash(self, data) -> None:
        """Count ``data`` in the file's sha256 and size (the first half of :meth:`write`)."""
        view = memoryview(data)
        self.h.update(view)
        self.size += view.nbytes

    def put(self, data) -> int:
        """Write ``data`` hashed already (the second half of :meth:`write`, which export.groups runs on another
        thread)."""
        return self.f.write(memoryview(data))

    def write_lines(self, lines: list) -> None:
        """Each of ``lines`` (buffers: slices of Arrow string data) followed by a newline, written in place with
        writev: no joined copy of the text (at 100,000 runner episodes the copy with the newlines was 4.65 GB of
        fresh memory, its page faults included)."""
        self.f.flush()
        fd, h, chunk = self.f.fileno(), self.h, []
        for line in lines:
            h.update(line)
            h.update(b"\n")
            self.size += len(line) + 1
            chunk += (line, b"\n")
            if len(chunk) >= IOV_MAX:
                _writev(fd, chunk)
                chunk = []
        if chunk:
            _writev(fd, chunk)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self.f.flush()

    @property
    def closed(self) -> bool:
        return self.f.closed

    def close(self) -> None:
        self.f.close()

    def digest(self) -> tuple[str, int]:
        return self.h.hexdigest(), self.size


class _ParquetSink:
    def __init__(self, path: Path, schema: pa.Schema):
        self.path, self.schema = path, schema
        self.file = _HashedFile(path)
        self.writer = pq.ParquetWriter(self.file, schema, compression="zstd", write_statistics=True)
        self.pending: list[pa.RecordBatch] = []
        self.n = 0

    def add(self, batch: pa.RecordBatch) -> None:
        self.pending.append(batch)
        self.n += batch.num_rows
        while self.n >= ROW_GROUP_ROWS:
            self._flush(ROW_GROUP_ROWS)

    def _flush(self, rows: int) -> None:
        table = pa.Table.from_batches(self.pending, self.schema)
        self.writer.write_table(table.slice(0, rows), row_group_size=rows)
        rest = table.slice(rows)
        self.pending, self.n = rest.to_batches(), rest.num_rows

    def close(self) -> tuple[str, int]:
        """Finish the file; its (sha256, bytes)."""
        if self.n:
            self._flush(self.n)
        self.writer.close()
        self.file.close()
        return self.file.digest()


class _JsonlSink:
    def __init__(self, path: Path, column: str):
        self.f, self.column = _HashedFile(path), column

    def add(self, batch: pa.RecordBatch) -> None:
        """Each line plus a newline, written from Arrow's buffer (no Python string per line, no joined copy)."""
        col = batch.column(self.column)
        if not len(col):
            return
        if col.null_count or not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            self.f.write(("\n".join(col.to_pylist()) + "\n").encode())
            return
        _, offs, data = col.buffers()
        offsets = memoryview(offs).cast("q" if pa.types.is_large_string(col.type) else "i")
        data = memoryview(data)
        self.f.write_lines([data[offsets[i]:offsets[i + 1]] for i in range(col.offset, col.offset + len(col))])

    def close(self) -> tuple[str, int]:
        """Finish the file; its (sha256, bytes)."""
        self.f.close()
        return self.f.digest()


def _plain_type(t: pa.DataType) -> pa.DataType:
    """DuckDB's lossless Arrow export gives JSON as Arrow's canonical `arrow.json` extension (pyarrow writes it as
    Parquet's JSON logical type: kept) and BOOLEAN as `arrow.bool8` (written back as plain bool, inside lists and
    structs too: `datasets` knows no bool8)."""
    if getattr(t, "extension_name", None) == "arrow.bool8":
        return pa.bool_()
    if pa.types.is_list(t) and _plain_type(t.value_type) != t.value_type:
        return pa.list_(pa.field(t.value_field.name, _plain_type(t.value_type), t.value_field.nullable))
    if pa.types.is_struct(t) and any(_plain_type(f.type) != f.type for f in t):
        return pa.struct([f.with_type(_plain_type(f.type)) for f in t])
    return t


def _plain(arr: pa.Array, t: pa.DataType) -> pa.Array:
    """``arr`` as the plain type ``t`` of :func:`_plain_type` (bool8 storage is int8: 0 = false)."""
    if isinstance(arr, pa.ChunkedArray):
        return pa.chunked_array([_plain(c, t) for c in arr.chunks], t)
    if pa.types.is_list(t):
        if arr.offset:  # from_arrays refuses a slice's offsets with a null mask: copy the slice
            arr = pa.concat_arrays([arr])
        return pa.ListArray.from_arrays(arr.offsets, _plain(arr.values, t.value_type), type=t, mask=arr.is_null())
    if pa.types.is_struct(t):
        if arr.offset:
            arr = pa.concat_arrays([arr])
        return pa.StructArray.from_arrays([_plain(arr.field(i), f.type) for i, f in enumerate(t)], fields=list(t),
                                          mask=arr.is_null() if arr.null_count else None)
    return arr.storage.cast(t) if isinstance(arr, pa.ExtensionArray) else arr.cast(t)


def write_shards(reader: pa.RecordBatchReader | Iterable, out: Path, n_shards: int, fmt: str,
                 line_column: str | None, progress: Callable[[int], None] | None = None,
                 schema: pa.Schema | None = None) -> WriteStats:
    """Consume ``reader`` (ordered by shard, then sample_id; or any iterable of record batches, whose ``schema``
    is given) into ``n_shards`` files under ``out`` (temporary ``.tmp-`` names; the caller renames them
    with :func:`publish`). Every shard gets a file, empty or not. One shard is open at a time (its rows waiting
    for a row group): a shard is finished when the next one starts."""
    stats = WriteStats()
    drop = {SHARD, DUP, HASH} | ({line_column} if line_column else set())
    given = schema or reader.schema
    names = [n for n in given.names if n not in drop]
    fields = [given.field(n) for n in names]
    schema = pa.schema([f.with_type(_plain_type(f.type)) for f in fields])
    files = [ShardStats(shard_name(i, n_shards, fmt)) for i in range(n_shards)]
    current, sink = -1, None

    def advance(i: int) -> None:  # finish the shards before i (empty ones get their file too), open shard i
        nonlocal current, sink
        if i < current:
            raise RuntimeError(f"rows of shard {i} after shard {current}: the export's rows are not in shard order")
        while current < i:
            if sink is not None:
                files[current].sha256, files[current].bytes = sink.close()
            current += 1
            if current < n_shards:
                tmp = out / (".tmp-" + files[current].file)
                sink = _ParquetSink(tmp, schema) if fmt == "parquet" else _JsonlSink(tmp, line_column)
            else:
                sink = None

    track_split = "split" in names
    for batch in reader:
        if batch.num_rows == 0:
            continue
        keep = pc.equal(batch.column(DUP), 1)
        kept = pc.sum(keep).as_py() or 0
        stats.duplicates += batch.num_rows - kept
        if kept < batch.num_rows:
            batch = batch.filter(keep)
        for run, task in set(zip(batch.column("run_id").to_pylist(), batch.column("task_id").to_pylist(), strict=True)):
            stats.tasks.add((run, task))
        if track_split:
            stats.splits.update(batch.column("split").to_pylist())
        runs = pc.run_end_encode(batch.column(SHARD))  # cut the batch at shard changes
        start = 0
        for i, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist(), strict=True):
            advance(i)
            part = batch.slice(start, end - start)
            sink.add(_conform(part, schema) if fmt == "parquet" else part)
            files[current].rows += end - start
            start = end
        if progress:
            progress(batch.num_rows)
    advance(n_shards)  # the last shards, empty ones included
    stats.shards = files
    return stats


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [_plain(batch.column(f.name), f.type) if batch.schema.field(f.name).type != f.type else batch.column(f.name)
         for f in schema], schema=schema)


def publish(out: Path, stats: WriteStats) -> None:
    """Rename the temporary shards to their names (their sha256 and size taken as they were written)."""
    for s in stats.shards:
        if not s.sha256 or s.bytes != (out / (".tmp-" + s.file)).stat().st_size:
            raise RuntimeError(f"shard {s.file} was not written whole ({s.bytes} bytes hashed); export again")
        os.replace(out / (".tmp-" + s.file), out / s.file)
