"""Record kinds without the base-row copy: batches of whole file groups, their rows merged in the writer's order.

The runner and ingest write an episode's rows, every table and every attempt, in the files of the commits that
held it, and a commit's files hold a few episodes whole. So the warehouse's files fall into **groups**: the
files that share an episode, closed over (union-find over every episode's files in the tables the base views
read, :data:`SOURCES`). A batch of whole groups reads its own files and nothing else: the base views rebuilt over
them (TEMP ``stg_`` views over the batch's files, :func:`use_group`) give exactly the rows the whole warehouse
gives for the batch's episodes, since every base view is a function of one episode's rows. That replaces
:func:`batches.shadow`, the copy of every base row into one folder per batch (at 100,000 runner episodes 39 of the
v4 export's ~150 CPU seconds: its Parquet writes alone 22).

The batches' rows then are not ranges of the writer's order (a record kind's rows go by shard, then
``sample_id``, an md5): each batch's sorted rows go to a run file (:func:`write_run`), and the runs are read back
merged in that order, holding one small chunk of each run (:func:`write_jsonl` for JSONL, which moves each line's
bytes alone; :func:`merged`, whole Arrow rows, for Parquet). Same rows, same
order as the copy's batches: the output is byte-identical (tests hold that).

A warehouse whose groups are too large for a batch (compacted into one file per table, say) has no usable groups
(:func:`plan_groups` returns None): the export then copies the base rows as before.
"""

from __future__ import annotations

import heapq
import os
import queue
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from ..engines.db import ident, sql_string, staging_sql
from .writer import SHARD, ShardStats, WriteStats, _HashedFile, shard_name

# the tables the shadowed base views read (each view: its table and stg_episodes, for the last attempt)
SOURCES = ("episodes", "steps", "messages", "actions", "observations", "agents", "tools")
GROUP_FACTOR = 2  # a group may hold up to this many times the batch's episodes; a larger one: no groups
RUN_BYTES = 256 << 20  # Arrow bytes the merge holds, about: one chunk of each run
MERGE_ROWS = 512  # rows per merged batch handed to the writer


class Group:
    """A batch of file groups: each source table's files, and its planned episodes as (position in the writer's
    order, ``sample_id``) pairs, in that order (export_batch_plan's ``pos``)."""

    def __init__(self) -> None:
        self.files: dict[str, list] = {t: [] for t in SOURCES}
        self.planned: list[tuple[int, str]] = []
        self.episodes = 0  # every episode of its files, planned or not

    @property
    def sample_ids(self) -> list[str]:
        return [sid for _, sid in self.planned]


def plan_groups(con, wh, snap, per_batch: int) -> list[Group] | None:
    """The export's planned episodes (TEMP TABLE export_batch_plan: run_id, episode_id, sample_id, pos) in batches of
    whole file groups of about ``per_batch`` planned episodes; None when a group holds more than
    :data:`GROUP_FACTOR` times ``per_batch`` episodes. Groups without a planned episode are not read at all."""
    entries = {t: {wh.reader_path(e): e for e in snap.files(t)} for t in SOURCES}
    if not any(entries.values()):
        return None
    # every (episode, file) pair, grouped into each episode's first file and its set of files
    pairs = " UNION ALL ".join(
        f"SELECT DISTINCT run_id, episode_id, filename FROM read_parquet([{', '.join(map(sql_string, files))}], "
        f"hive_partitioning = true, hive_types = {{'run_id': VARCHAR}}, filename = true, union_by_name = true)"
        for files in entries.values() if files)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE export_file_pairs AS
        SELECT run_id, episode_id, list(DISTINCT filename ORDER BY filename) AS files FROM ({pairs}) GROUP BY ALL""")
    try:
        parent: dict[str, str] = {}

        def find(f: str) -> str:
            while parent.setdefault(f, f) != f:
                parent[f] = parent[parent[f]]
                f = parent[f]
            return f

        for (files,) in con.execute("SELECT DISTINCT files FROM export_file_pairs").fetchall():
            root = find(files[0])
            for f in files[1:]:
                other = find(f)
                if other != root:
                    parent[max(other, root)] = min(other, root)
                    root = min(other, root)
        roots = pa.table({"file": list(parent), "root": [find(f) for f in parent]})
        con.register("export_file_roots", roots)
        rows = con.execute("""
            SELECT r.root, count(*) AS episodes, list(p.pos ORDER BY p.pos) FILTER (p.pos IS NOT NULL),
                   list(p.sample_id ORDER BY p.pos) FILTER (p.pos IS NOT NULL)
            FROM export_file_pairs AS e
            JOIN export_file_roots AS r ON r.file = e.files[1]
            LEFT JOIN export_batch_plan AS p ON p.run_id = e.run_id AND p.episode_id = e.episode_id
            GROUP BY r.root ORDER BY r.root""").fetchall()
        files_of: dict[str, list[str]] = {}
        for f, root in zip(roots.column("file").to_pylist(), roots.column("root").to_pylist(), strict=True):
            files_of.setdefault(root, []).append(f)
    finally:
        con.execute("DROP TABLE IF EXISTS temp.main.export_file_pairs")
        con.unregister("export_file_roots")
    if any(n > GROUP_FACTOR * per_batch for _, n, _, _ in rows):
        return None
    known = set().union(*entries.values())
    if not known.issuperset(parent):  # a file named otherwise than the snapshot's path: not ours to guess
        return None
    out: list[Group] = []
    for root, n, pos, ids in rows:
        if not ids:
            continue
        if not out or len(out[-1].planned) + len(ids) > per_batch:
            out.append(Group())
        g = out[-1]
        g.planned.extend(zip(pos, ids, strict=True))
        g.episodes += n
        for f in files_of[root]:
            for t, by_path in entries.items():
                if f in by_path:
                    g.files[t].append(by_path[f])
    for g in out:
        g.planned.sort()
        for files in g.files.values():  # the views' file order does not hang on the union-find's
            files.sort(key=lambda e: e.path)
    return out


def use_group(cur, wh, snap, group: Group) -> None:
    """Point the cursor's source tables (TEMP ``stg_`` views, shadowing the warehouse's) at ``group``'s files."""
    for t in SOURCES:
        cur.execute(f"CREATE OR REPLACE TEMP VIEW {ident('stg_' + t)} AS "
                    f"{staging_sql(wh, snap, t, group.files[t])}")


def write_run(rows: pa.Table, path: Path, n_runs: int, fmt: str) -> None:
    """A batch's sorted rows to its run: for JSONL the lines' text as they are (``path`` + ``.lines``, no
    separators) and an Arrow IPC index of what the writer needs of each row (``path``: its key, run, task,
    split and the line's place in the text); else the rows themselves, in Arrow IPC chunks small enough that
    one chunk of each of ``n_runs`` runs holds about :data:`RUN_BYTES`. Uncompressed: written once, read once."""
    if fmt == "jsonl":
        lines = rows.column("__line").combine_chunks()
        _, offs, data = lines.buffers()
        wide = pa.types.is_large_string(lines.type)
        offsets = pa.Array.from_buffers(pa.int64() if wide else pa.int32(), len(lines) + 1, [None, offs],
                                        offset=lines.offset)
        start = offsets[0].as_py()
        with open(f"{path}.lines", "wb") as f:
            f.write(memoryview(data)[start:offsets[-1].as_py()])
        ends = offsets.slice(1).cast(pa.int64())
        index = pa.table({"sample_id": rows.column("sample_id"), SHARD: rows.column(SHARD),
                          "run_id": rows.column("run_id"), "task_id": rows.column("task_id"),
                          **({"split": rows.column("split")} if "split" in rows.column_names else {}),
                          "start": pc.subtract(offsets.slice(0, len(lines)).cast(pa.int64()), start),
                          "end": pc.subtract(ends, start)})
        rows, n_runs = index, 1
    per_row = max(1, rows.nbytes // max(rows.num_rows, 1))
    chunk = max(1, RUN_BYTES // max(n_runs, 1) // per_row)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, rows.schema) as writer:
        writer.write_table(rows, max_chunksize=chunk)


def _keyed(i: int, path: Path) -> Iterator[tuple]:
    """A run's rows as (shard, sample_id, run number, row, its chunk), in order; the run's files are deleted
    once read."""
    with pa.OSFile(str(path)) as source:  # read, not memory-mapped: mapped pages would count as the process's
        reader = pa.ipc.open_file(source)
        for c in range(reader.num_record_batches):
            batch = reader.get_batch(c)
            for row, key in enumerate(zip(batch.column(SHARD).to_pylist(), batch.column("sample_id").to_pylist(),
                                          strict=True)):
                yield (*key, i, row, batch)
    path.unlink()


def write_jsonl(runs: list[Path], out: Path, n_shards: int) -> WriteStats:
    """The JSONL runs (:func:`write_run`) merged in the writer's order into the ``n_shards`` shard files (temporary
    names, as :func:`writer.write_shards`): each line copied from its run's text into a reused buffer, which is
    hashed and written a few MB at a time, on two threads of their own (the hash is ~1 GB/s: 4.65 GB at 100,000
    runner episodes). The Arrow merge of whole rows copied every line into fresh memory twice (~17 s there)."""
    stats = WriteStats(shards=[ShardStats(shard_name(i, n_shards, "jsonl")) for i in range(n_shards)])
    texts = [os.open(f"{p}.lines", os.O_RDONLY) for p in runs]
    flusher = _Flusher()
    current = -1

    def advance(i: int) -> None:
        nonlocal current
        while current < i:
            if current >= 0:
                stats.shards[current].sha256, stats.shards[current].bytes = flusher.close()
            current += 1
            if current < n_shards:
                flusher.open(out / (".tmp-" + stats.shards[current].file))

    names = ("start", "end", "run_id", "task_id", "split")
    chunks: dict[int, tuple] = {}  # each run's current chunk of its index, and that chunk's columns as lists
    try:
        for shard, _, i, row, batch in heapq.merge(*(_keyed(i, p) for i, p in enumerate(runs))):
            if shard != current:
                advance(shard)
            if i not in chunks or chunks[i][0] is not batch:
                chunks[i] = (batch, [batch.column(n).to_pylist() if n in batch.schema.names else None
                                     for n in names])
            start, end, run_id, task_id, split = chunks[i][1]
            flusher.add(texts[i], start[row], end[row] - start[row])
            stats.shards[current].rows += 1
            stats.tasks.add((run_id[row], task_id[row]))
            if split is not None:
                stats.splits.add(split[row])
        advance(n_shards)
    finally:
        flusher.stop()
        for fd in texts:
            os.close(fd)
        for p in runs:
            Path(f"{p}.lines").unlink(missing_ok=True)
    return stats


class _Flusher:
    """Lines read into reused buffers (pread: no fresh memory) that two threads take in turn, the first hashing
    each, the second writing it: the copy from the runs, the hash (~1 GB/s) and the write overlap on three cores'
    worth of threads instead of following each other."""

    SIZE, COUNT = 8 << 20, 4  # bytes a buffer holds, buffers

    def __init__(self) -> None:
        self.free: queue.Queue = queue.Queue()
        for _ in range(self.COUNT):
            self.free.put(bytearray(self.SIZE))
        self.to_hash: queue.Queue = queue.Queue()
        self.to_write: queue.Queue = queue.Queue()
        self.failed: list[BaseException] = []
        self.buf, self.used, self.file = self.free.get(), 0, None
        self.threads = [threading.Thread(target=self._hash, name="export-hash", daemon=True),
                        threading.Thread(target=self._write, name="export-write", daemon=True)]
        for t in self.threads:
            t.start()

    def _hash(self) -> None:
        while (job := self.to_hash.get()) is not None:
            target, buf, n = job
            if buf is not None and not self.failed:
                target.hash(memoryview(buf)[:n])
            self.to_write.put(job)
        self.to_write.put(None)

    def _write(self) -> None:
        while (job := self.to_write.get()) is not None:
            target, buf, n = job
            try:
                if buf is None:  # the end of a file: everything before it is written
                    n.set()
                    continue
                if not self.failed:
                    target.put(memoryview(buf)[:n])
            except BaseException as exc:  # noqa: BLE001 - raised by the next add or close
                self.failed.append(exc)
            if isinstance(buf, bytearray):  # a pooled buffer (a long line's own buffer is not)
                self.free.put(buf)

    def open(self, path: Path) -> None:
        self.file = _HashedFile(path)

    def add(self, fd: int, offset: int, length: int) -> None:
        if self.used + length + 1 > self.SIZE:
            self._hand_over()
        if length + 1 > self.SIZE:  # a line longer than a buffer: a buffer of its own
            line = os.pread(fd, length, offset)
            if len(line) != length:
                raise OSError(f"a run file ended early ({len(line)} of {length} bytes at {offset}); export again")
            self.to_hash.put((self.file, line + b"\n", length + 1))
            return
        got = os.preadv(fd, [memoryview(self.buf)[self.used:self.used + length]], offset)
        if got != length:
            raise OSError(f"a run file ended early ({got} of {length} bytes at {offset}); export again")
        self.buf[self.used + length] = 10  # "\n"
        self.used += length + 1

    def _hand_over(self) -> None:
        if self.failed:
            raise self.failed[0]
        if self.used:
            self.to_hash.put((self.file, self.buf, self.used))
            self.buf, self.used = self.free.get(), 0

    def close(self) -> tuple[str, int]:
        """Finish the open file: its (sha256, bytes)."""
        self._hand_over()
        written = threading.Event()
        self.to_hash.put((self.file, None, written))
        written.wait()
        if self.failed:
            raise self.failed[0]
        self.file.close()
        return self.file.digest()

    def stop(self) -> None:
        self.to_hash.put(None)
        for t in self.threads:
            t.join()
        if self.file is not None and not self.file.closed:
            self.file.close()


def merged(runs: list[Path], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The rows of the (Parquet-bound) run files, each sorted by shard, then ``sample_id``, in that order across
    all runs, in batches of :data:`MERGE_ROWS`; a run's file is deleted once read."""
    out: list[pa.RecordBatch] = []
    for _, _, _, row, batch in heapq.merge(*(_keyed(i, p) for i, p in enumerate(runs))):
        out.append(batch.slice(row, 1))
        if len(out) >= MERGE_ROWS:
            yield from pa.Table.from_batches(out, schema).combine_chunks().to_batches()
            out = []
    if out:
        yield from pa.Table.from_batches(out, schema).combine_chunks().to_batches()
