"""The warehouse on disk: Hive-partitioned Parquet plus a snapshot log that makes commits atomic.

Layout::

    <root>/
      _catalog/CURRENT              # number of the current snapshot (atomically replaced)
      _catalog/snapshot-000042.json # every committed file, per table
      _catalog/LOCK                 # one writer at a time (flock)
      _staging/                     # files being written; never inside a table directory
      episodes/run_id=<id>/part-<batch>.parquet
      steps/run_id=<id>/...

Commit protocol (``Writer.commit``): each Parquet file is written under ``_staging/``, fsynced and
renamed into its table directory; then a new snapshot listing the previous files plus the new ones
is written to a temporary name, fsynced and renamed; finally ``CURRENT`` is replaced the same way.
Readers (:func:`shopsim_wh.engines.db.connect`) build their views from the snapshot named by ``CURRENT``,
never from a glob, so they see whole batches or nothing, and files written by a crashed commit are
invisible (``vacuum`` removes them). Compaction writes the merged files, commits a snapshot that
swaps them in, and leaves the replaced files on disk for ``grace_s`` seconds so readers that
opened the previous snapshot finish their queries.

The same logic runs on S3-compatible object storage (``s3://bucket/prefix``): the file-system steps live
behind :mod:`shopsim_wh.store.storage` (``LocalStore`` is the protocol above; ``S3Store`` uploads data under
unique keys and commits by a conditional put of the next snapshot object, a writer that loses the race
rebuilding its snapshot on the winner's, see :meth:`Writer._publish`). Compaction streams through DuckDB
(:mod:`shopsim_wh.store.compaction`).

Every file-system step of a commit, compaction and vacuum is a named crash point
(:mod:`shopsim_wh.core.crash`) and reports itself to the power-loss recorder; see docs/durability.md.
One writer at a time (``_catalog/LOCK``, an ``flock`` the kernel releases when its holder dies): a
second writer waits up to ``$SHOPSIM_WH_LOCK_TIMEOUT_S`` (default 30) seconds, readers never wait.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..core import crash
from ..core.crash import fs_event
from ..core.errors import WarehouseError, WarehouseFullError
from ..core.fsio import is_no_space
from ..core.fsio import unlink as _unlink
from ..core.names import check_name
from ..core.schema import DICTIONARY_COLUMNS, PARTITION_KEY, SCHEMA_VERSION, TABLES, conform
from ..core.sqltext import ident, sql_string
from .storage import is_url, open_store, unique_name

SNAPSHOT_FORMAT = "shopsim-wh-snapshot-v1"
ZSTD_LEVEL = 3
ROW_GROUP_TARGET_BYTES = 32 * 1024 * 1024
COMPACT_FILE_TARGET_BYTES = 256 * 1024 * 1024  # uncompressed bytes per compacted file


def default_root(explicit: str | os.PathLike | None = None, config_value: str | None = None) -> Path | str:
    """--warehouse, else the config's output.warehouse, else $SHOPSIM_WH_HOME, else ./warehouse.
    An ``s3://bucket/prefix`` URL comes back as the string (a Path would fold its ``//``)."""
    for candidate in (explicit, config_value, os.environ.get("SHOPSIM_WH_HOME")):
        if candidate:
            return str(candidate) if is_url(str(candidate)) else Path(candidate)
    return Path("warehouse")


def location(root: str | os.PathLike) -> str:
    """A warehouse's canonical name (in manifests, catalogs, reports): the resolved path or the ``s3://`` URL."""
    return str(root).rstrip("/") if is_url(str(root)) else str(Path(root).resolve())


def check_run_id(run_id: str) -> str:
    """The one naming rule (:mod:`shopsim_wh.core.names`) for the partition a commit writes."""
    return check_name(run_id, "run id")


@dataclass
class FileEntry:
    path: str  # relative to the warehouse root, '/'-separated
    run_id: str
    rows: int
    bytes: int
    compacted: bool = False
    schema_version: int = 0  # the schema the file was written with (0: unknown, from an older snapshot)

    def as_json(self) -> dict:
        return {"path": self.path, "run_id": self.run_id, "rows": self.rows, "bytes": self.bytes,
                "compacted": self.compacted, "schema_version": self.schema_version}


@dataclass
class Snapshot:
    version: int = 0
    tables: dict[str, list[FileEntry]] = field(default_factory=dict)
    pending_delete: list[dict] = field(default_factory=list)  # {"path", "since"}
    committed_at: float = 0.0

    def files(self, table: str, run_id: str | None = None) -> list[FileEntry]:
        entries = self.tables.get(table, [])
        return [e for e in entries if run_id is None or e.run_id == run_id]

    def run_ids(self) -> set[str]:
        return {e.run_id for entries in self.tables.values() for e in entries}

    def to_json(self) -> bytes:
        doc = {
            "format": SNAPSHOT_FORMAT,
            "schema_version": SCHEMA_VERSION,
            "version": self.version,
            "committed_at": self.committed_at,
            "tables": {t: [e.as_json() for e in es] for t, es in sorted(self.tables.items())},
            "pending_delete": self.pending_delete,
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Snapshot:
        doc = json.loads(data)
        if doc.get("format") != SNAPSHOT_FORMAT:
            raise WarehouseError(f"unknown snapshot format {doc.get('format')!r}; upgrade shopsim-wh")
        if doc.get("schema_version", 0) > SCHEMA_VERSION:
            raise WarehouseError(
                f"warehouse schema version {doc['schema_version']} is newer than this shopsim-wh "
                f"({SCHEMA_VERSION}); upgrade shopsim-wh to read it"
            )
        tables = {t: [FileEntry(**e) for e in es] for t, es in doc["tables"].items()}
        return cls(doc["version"], tables, doc.get("pending_delete", []), doc.get("committed_at", 0.0))


@dataclass
class StagedFile:
    """A complete Parquet file under a warehouse's ``_staging/``, waiting for a commit to place it."""
    path: Path
    rows: int


def stage_parquet(staging_dir: Path, data: pa.Table, compression_level: int = ZSTD_LEVEL,
                  prefix: str = "part") -> StagedFile:
    """Write ``data`` (already in its table's declared schema) as one Parquet file under ``staging_dir``.

    Safe to call from another process: the file only becomes part of the warehouse when a
    :class:`Writer` commits it; until then ``vacuum`` treats it as an orphan."""
    path = Path(staging_dir) / unique_name(prefix)
    rows_per_group = max(1024, int(data.num_rows * ROW_GROUP_TARGET_BYTES / max(1, data.nbytes)))
    try:
        pq.write_table(
            data, path, compression="zstd", compression_level=compression_level, row_group_size=rows_per_group,
            write_statistics=True, use_dictionary=[c for c in data.column_names if c in DICTIONARY_COLUMNS],
        )
    except BaseException:
        path.unlink(missing_ok=True)  # a half-written file (disk full) is not left behind
        raise
    fs_event("create", path)
    return StagedFile(path, data.num_rows)


def stage_parquet_tables(staging_dir: Path, schema: pa.Schema, tables: Iterable[pa.Table],
                         compression_level: int = ZSTD_LEVEL, prefix: str = "part",
                         group_rows: int = 16_384) -> StagedFile | None:
    """:func:`stage_parquet` of the concatenation of ``tables`` (each in ``schema``), written as they come:
    memory holds one row group (``group_rows`` rows), not the file. None when there is no row."""
    path = Path(staging_dir) / unique_name(prefix)
    writer, held, rows = None, [], 0
    dictionary = [c for c in schema.names if c in DICTIONARY_COLUMNS]

    def write(final: bool) -> None:
        nonlocal writer, held
        n = sum(t.num_rows for t in held)
        if not n or (n < group_rows and not final):
            return
        if writer is None:
            writer = pq.ParquetWriter(path, schema, compression="zstd", compression_level=compression_level,
                                      write_statistics=True, use_dictionary=dictionary)
        data = pa.concat_tables(held)
        cut = n if final else n - n % group_rows  # whole row groups; the rest waits for more rows
        writer.write_table(data.slice(0, cut), row_group_size=group_rows)
        held = [data.slice(cut)] if cut < n else []

    try:
        for t in tables:
            held.append(t)
            rows += t.num_rows
            write(final=False)
        write(final=True)
        if writer is not None:
            writer.close()
    except BaseException:
        if writer is not None:
            writer.close()
        path.unlink(missing_ok=True)
        raise
    if writer is None:
        return None
    fs_event("create", path)
    return StagedFile(path, rows)


class Warehouse:
    """A warehouse root (a directory, or ``s3://bucket/prefix``). Cheap to construct; reading never takes a lock."""

    def __init__(self, root: str | os.PathLike):
        self.store = open_store(root)
        self.remote = is_url(root)
        self.root = self.store.url if self.remote else self.store.root
        self.catalog_dir = None if self.remote else self.store.catalog_dir

    def __repr__(self) -> str:
        return f"Warehouse({str(self.root)!r})"

    @property
    def staging_dir(self) -> Path:
        """Where Parquet files are written before a commit places them (a private local directory for s3)."""
        return self.store.staging_dir

    def exists(self) -> bool:
        return self.store.current() is not None

    def snapshot(self) -> Snapshot:
        # CURRENT and the snapshot it names can be swapped (or pruned) between our two reads; retry.
        for _ in range(20):
            n = self.store.current()
            if n is None:
                return Snapshot()
            data = self.store.read_snapshot(n)
            if data is not None:
                return Snapshot.from_json(data)
            time.sleep(0.01)
        raise WarehouseError(f"cannot read a consistent snapshot under {self.root}/_catalog")

    def abspath(self, entry: FileEntry) -> Path:
        if self.remote:
            raise WarehouseError(f"{self.root} is an object store: open its files with Warehouse.open_input")
        return self.root / entry.path

    def open_input(self, entry: FileEntry):
        """A local path or an in-memory buffer for pyarrow to read a snapshot file from."""
        return self.store.open_input(entry.path)

    def reader_path(self, entry: FileEntry) -> str:
        """The path or ``s3://`` URL DuckDB reads a snapshot file at."""
        return self.store.reader_path(entry.path)

    def register(self, con, snap: Snapshot | None = None, tables: Iterable[str] | None = None) -> None:
        """Let DuckDB connection ``con`` read this warehouse's files (for s3://, through s3fs; see storage.py)."""
        snap = snap or Snapshot()
        self.store.register(con, {e.path.rsplit("/", 1)[0] for t, es in snap.tables.items()
                                  if tables is None or t in tables for e in es})

    def read(self, table: str, columns: list[str], run_id: str | None = None,
             snap: Snapshot | None = None) -> pa.Table:
        """Some columns of a table's snapshot files (plus ``run_id``), without DuckDB or the views: what a
        resume or the checker needs is a few columns, and installing every view costs about a second."""
        snap = snap or self.snapshot()
        spec = TABLES[table].arrow_schema
        parts = []
        for e in snap.files(table, run_id):
            t = pq.read_table(self.open_input(e), columns=columns, schema=spec)
            parts.append(t.append_column(PARTITION_KEY, pa.array([e.run_id] * t.num_rows, pa.string())))
        if not parts:
            return pa.schema([spec.field(c) for c in columns] + [pa.field(PARTITION_KEY, pa.string())]).empty_table()
        return pa.concat_tables(parts)

    @contextmanager
    def writer(self, timeout_s: float | None = None, grace_s: float = 300.0) -> Iterator[Writer]:
        """A writer. On local disk the single writer: waits up to ``timeout_s`` (default
        ``$SHOPSIM_WH_LOCK_TIMEOUT_S`` or 30) for the lock; a lock left by a killed writer is free at once (the
        kernel drops a dead process's flock); its half-written files are never in a snapshot and are deleted
        here before anything else is written. On object storage writers run concurrently: each commit is a
        conditional put of the next snapshot and a loser rebuilds on the winner's snapshot and retries;
        orphans are deleted once older than ``grace_s``."""
        if timeout_s is None:
            timeout_s = float(os.environ.get("SHOPSIM_WH_LOCK_TIMEOUT_S") or 30)
        with self.store.lock(timeout_s):
            try:
                w = Writer(self, grace_s)
                w.vacuum(orphans=self.store.exclusive)
                yield w
            finally:
                if self.remote:
                    self.store.close()


_DUCK_TYPES = {
    pa.string(): "VARCHAR", pa.int16(): "SMALLINT", pa.int32(): "INTEGER", pa.int64(): "BIGINT",
    pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN", pa.timestamp("us", tz="UTC"): "TIMESTAMPTZ",
    pa.int8(): "TINYINT", pa.list_(pa.int32()): "INTEGER[]", pa.list_(pa.int8()): "TINYINT[]",
    pa.list_(pa.float64()): "DOUBLE[]",
}


def _null(c) -> str:
    return f"CAST(NULL AS {_DUCK_TYPES[c.type]}) AS {ident(c.name)}"


def staging_sql(wh: Warehouse, snap: Snapshot, table: str, entries: list | None = None) -> str:
    """SELECT over exactly the snapshot's files of a table (or ``entries``, some of them), columns in declared order.

    Files written under the current schema version are read as they are; when older files are present
    they are read by name and a column no file has yet (added by a later version) reads as NULL.
    """
    spec = TABLES[table]
    entries = snap.files(table) if entries is None else entries
    if not entries:
        return f"SELECT CAST(NULL AS VARCHAR) AS {PARTITION_KEY}, {', '.join(_null(c) for c in spec.columns)} WHERE false"
    paths = ", ".join(sql_string(wh.reader_path(e)) for e in entries)
    current = all(e.schema_version == SCHEMA_VERSION for e in entries)
    present = set(spec.column_names) if current else set().union(*(
        set(spec.column_names) if e.schema_version == SCHEMA_VERSION else set(pq.read_schema(wh.open_input(e)).names)
        for e in entries))
    cols = ", ".join(ident(c.name) if c.name in present else _null(c) for c in spec.columns)
    return (
        f"SELECT {PARTITION_KEY}, {cols} FROM read_parquet([{paths}], "
        f"hive_partitioning = true, hive_types = {{'{PARTITION_KEY}': VARCHAR}}"
        f"{'' if current else ', union_by_name = true'})"
    )


class CommitConflict(WarehouseError):
    """Another writer changed what this commit was built on (a compaction of a run someone else rewrote)."""


MAX_COMMIT_RETRIES = 50


class Writer:
    """Every commit is atomic for readers; on object storage concurrent writers retry on each other's snapshots."""

    def __init__(self, wh: Warehouse, grace_s: float):
        self.wh = wh
        self.grace_s = grace_s
        self.snap = wh.snapshot()
        self._placed: list[Path | str] = []  # staged local files / warehouse-relative paths of the step in progress

    # -- writing files -------------------------------------------------------------------------
    def _write_file(self, table: str, run_id: str, data: pa.Table, compacted: bool = False,
                    compression_level: int = ZSTD_LEVEL) -> FileEntry:
        staged = stage_parquet(self.wh.staging_dir, data, compression_level)
        self._placed.append(staged.path)  # removed again if this step fails before it is renamed
        return self._place(table, run_id, staged, compacted)

    def _place(self, table: str, run_id: str, staged: StagedFile, compacted: bool = False) -> FileEntry:
        """Move a fully written file from the staging directory into its table directory (fsynced first)."""
        if staged.path.parent.resolve() != Path(self.wh.staging_dir).resolve():
            raise WarehouseError(f"{staged.path} is not in this warehouse's staging directory {self.wh.staging_dir}")
        rel = f"{table}/{PARTITION_KEY}={run_id}/{staged.path.name}"
        size = self.wh.store.place(staged.path, rel, self._placed)
        return FileEntry(rel, run_id, staged.rows, size, compacted, SCHEMA_VERSION)

    def _publish(self, build: Callable[[Snapshot], Snapshot] | Snapshot) -> Snapshot:
        """Commit ``build(base)`` as the snapshot after ``base``. Locally ``base`` is this writer's snapshot (the
        lock guarantees it is current); on object storage a lost race re-reads the winner's snapshot and
        builds again on it (the new files are already placed; only the snapshot document is redone). A plain
        :class:`Snapshot` is published as it is (no rebuild on a conflict)."""
        if isinstance(build, Snapshot):
            build = (lambda fixed: lambda base: fixed)(build)
        base = self.snap
        for attempt in range(MAX_COMMIT_RETRIES):
            snap = build(base)
            snap.version = base.version + 1
            snap.committed_at = time.time()
            if self.wh.store.publish(snap.version, snap.to_json()):
                self.snap = snap
                self._placed = []
                crash.point("commit.current_replaced")
                self.wh.store.prune(snap.version)
                return snap
            time.sleep(min(0.5, 0.01 * 2 ** min(attempt, 6)))
            base = self.wh.snapshot()
        raise WarehouseError(f"could not commit to {self.wh.root} after {MAX_COMMIT_RETRIES} attempts: other writers "
                             "kept committing first; retry (what this command committed so far is kept)")

    @contextmanager
    def _all_or_nothing(self, what: str) -> Iterator[None]:
        """On failure before a snapshot lists them, delete the files this step placed (they are in no
        snapshot), and turn a full disk into a :class:`WarehouseFullError` saying what is committed."""
        self._placed = []
        try:
            yield
        except BaseException as exc:
            for p in self._placed:
                if isinstance(p, Path):
                    _unlink(p)
                else:
                    self.wh.store.delete(p)
            self._placed = []
            if is_no_space(exc):
                raise WarehouseFullError(
                    f"no space left for the warehouse {self.wh.root} while writing {what} ({exc}); nothing of it is "
                    f"visible and no temporary file is left; committed so far: snapshot {self.snap.version} "
                    f"({sum(e.rows for e in self.snap.files('episodes'))} episode attempt rows). Free space (or raise "
                    "the file-size limit), then run the same command again: it resumes from what is committed"
                ) from exc
            raise

    def commit(self, batches: Iterable[tuple[str, str, pa.Table]], replace_runs: Iterable[str] = (),
               compression_level: int = ZSTD_LEVEL) -> Snapshot:
        """Atomically add ``(table, run_id, arrow_table | StagedFile)`` batches; optionally drop whole runs first.

        ``compression_level`` is the zstd level of the new files (bulk ingest uses 1: faster, a few
        percent larger; compaction rewrites at :data:`ZSTD_LEVEL`).

        Tables are cast to their declared schema (a mismatch raises before anything is visible). A
        :class:`StagedFile` (written by :func:`stage_parquet`, e.g. in a parsing worker process) is
        adopted as it is.
        """
        with self._all_or_nothing("a commit"):
            return self._commit(batches, replace_runs, compression_level)

    def _commit(self, batches, replace_runs, compression_level) -> Snapshot:
        staged: dict[str, list[FileEntry]] = {}
        for table, run_id, data in batches:
            if table not in TABLES:
                raise WarehouseError(f"unknown table {table!r}; known: {', '.join(TABLES)}")
            check_run_id(run_id)
            if isinstance(data, StagedFile):
                have = pq.read_schema(data.path)  # the footer only: a file of another table or version is refused
                if not have.equals(TABLES[table].arrow_schema, check_metadata=False):
                    raise WarehouseError(f"staged file {data.path.name} does not have the declared schema of table "
                                         f"{table!r} (schema version {SCHEMA_VERSION}); write it with stage_parquet")
                staged.setdefault(table, []).append(self._place(table, run_id, data))
                continue
            if data.num_rows == 0:
                continue
            data = conform(table, data)
            staged.setdefault(table, []).append(self._write_file(table, run_id, data, compression_level=compression_level))
        replace = set(replace_runs)

        def build(base: Snapshot) -> Snapshot:
            new = Snapshot(tables={}, pending_delete=list(base.pending_delete))
            now = time.time()
            for table, entries in base.tables.items():
                new.tables[table] = [e for e in entries if e.run_id not in replace]
                new.pending_delete += [{"path": e.path, "since": now} for e in entries if e.run_id in replace]
            for table, entries in staged.items():
                new.tables.setdefault(table, []).extend(entries)
            return new

        return self._publish(build)

    # -- compaction and cleanup ----------------------------------------------------------------
    def compact(self, run_id: str, min_files: int = 2, small_only: bool = False) -> int:
        """Merge a run's files per table into few large sorted files; returns files replaced.

        ``small_only`` merges only the files not yet compacted (cheap, for use while a run is going: the
        cost stays proportional to what was written since); the final compaction merges everything.
        """
        with self._all_or_nothing(f"the compaction of run {run_id}"):
            return self._compact(run_id, min_files, small_only)

    def _compact(self, run_id: str, min_files: int, small_only: bool) -> int:
        from .compaction import FileLayout, merge_sorted

        layout = FileLayout(COMPACT_FILE_TARGET_BYTES, ROW_GROUP_TARGET_BYTES, ZSTD_LEVEL)
        replaced: dict[str, list[FileEntry]] = {}
        written: dict[str, list[FileEntry]] = {}
        for table in TABLES:
            entries = [e for e in self.snap.files(table, run_id) if not (small_only and e.compacted)]
            if len(entries) < min_files:
                continue
            snap = Snapshot(tables={table: entries})
            written[table] = [
                self._place(table, run_id, StagedFile(path, rows), compacted=True)
                for path, rows in merge_sorted(self.wh, snap, staging_sql(self.wh, snap, table), table,
                                               self.wh.staging_dir, self._placed, layout)
            ]
            replaced[table] = entries
        if not replaced:
            return 0
        crash.point("compact.files_written")

        def build(base: Snapshot) -> Snapshot:
            live = {e.path for es in base.tables.values() for e in es}
            if any(e.path not in live for es in replaced.values() for e in es):
                raise CommitConflict(f"run {run_id} was changed by another writer during its compaction; nothing "
                                     "was swapped: compact it again")
            now = time.time()
            new = Snapshot(tables={}, pending_delete=list(base.pending_delete))
            for table, entries in base.tables.items():
                gone = {e.path for e in replaced.get(table, [])}
                new.tables[table] = [e for e in entries if e.path not in gone] + written.get(table, [])
                new.pending_delete += [{"path": p, "since": now} for p in sorted(gone)]
            return new

        self._publish(build)
        crash.point("compact.published")
        return sum(len(v) for v in replaced.values())

    def vacuum(self, force: bool = False, orphans: bool = False) -> int:
        """Delete replaced files past the grace period, plus orphans left by crashed commits.

        An orphan (a staged file, or a file in a table directory that no snapshot lists) waits out the grace
        period too, unless ``orphans``: the local writer passes it when it opens, since holding the lock means
        no other writer can be mid-commit (readers never open a file no snapshot lists). On object storage
        other writers may be between upload and commit, so orphans always wait out the grace period there
        (``force`` included: run a forced vacuum only when no writer is running)."""
        now = time.time()
        store = self.wh.store
        keep_pending, removed = [], 0
        for item in self.snap.pending_delete:
            if force or now - item["since"] >= self.grace_s:
                if store.delete(item["path"]):
                    crash.point("vacuum.file_deleted")
                removed += 1
            else:
                keep_pending.append(item)
        old_enough = lambda mtime: force or orphans or now - mtime >= self.grace_s  # noqa: E731
        store.clean_staging(old_enough)
        live = {e.path for es in self.snap.tables.values() for e in es} | {i["path"] for i in self.snap.pending_delete}
        for table in TABLES:
            for rel, mtime, _ in list(store.list(table)):
                if rel.endswith(".parquet") and rel not in live and old_enough(mtime):
                    store.delete(rel)
                    crash.point("vacuum.file_deleted")
                    removed += 1
        if len(keep_pending) != len(self.snap.pending_delete):
            done = {i["path"] for i in self.snap.pending_delete} - {i["path"] for i in keep_pending}
            self._publish(lambda base: Snapshot(tables=dict(base.tables),
                                                pending_delete=[i for i in base.pending_delete if i["path"] not in done]))
            crash.point("vacuum.published")
        return removed
