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
Readers (:func:`shopsim_wh.db.connect`) build their views from the snapshot named by ``CURRENT``,
never from a glob, so they see whole batches or nothing, and files written by a crashed commit are
invisible (``vacuum`` removes them). Compaction writes the merged files, commits a snapshot that
swaps them in, and leaves the replaced files on disk for ``grace_s`` seconds so readers that
opened the previous snapshot finish their queries.

Every file-system step of a commit, compaction and vacuum is a named crash point
(:mod:`shopsim_wh.crash`) and reports itself to the power-loss recorder; see docs/durability.md.
One writer at a time (``_catalog/LOCK``, an ``flock`` the kernel releases when its holder dies): a
second writer waits up to ``$SHOPSIM_WH_LOCK_TIMEOUT_S`` (default 30) seconds, readers never wait.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from . import crash
from .crash import fs_event
from .errors import WarehouseError, WarehouseFullError, WarehouseLockedError
from .fsio import atomic_write_bytes as _atomic_write_bytes
from .fsio import fsync_dir as _fsync_dir
from .fsio import fsync_file as _fsync_file
from .fsio import is_no_space, make_dirs
from .fsio import replace as _replace
from .fsio import unlink as _unlink
from .schema import DICTIONARY_COLUMNS, PARTITION_KEY, SCHEMA_VERSION, TABLES, conform

SNAPSHOT_FORMAT = "shopsim-wh-snapshot-v1"
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
ZSTD_LEVEL = 3
ROW_GROUP_TARGET_BYTES = 32 * 1024 * 1024
COMPACT_FILE_TARGET_BYTES = 256 * 1024 * 1024  # uncompressed bytes per compacted file


def default_root(explicit: str | os.PathLike | None = None, config_value: str | None = None) -> Path:
    """--warehouse, else the config's output.warehouse, else $SHOPSIM_WH_HOME, else ./warehouse."""
    for candidate in (explicit, config_value, os.environ.get("SHOPSIM_WH_HOME")):
        if candidate:
            return Path(candidate)
    return Path("warehouse")


def check_run_id(run_id: str) -> str:
    if not RUN_ID_RE.match(run_id):
        raise WarehouseError(
            f"run id {run_id!r} is not usable as a partition name; use letters, digits, '.', '_' or '-' "
            "(at most 128 characters, not starting with '.', '_' or '-')"
        )
    return run_id


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
    name = f"{prefix}-{time.time_ns():x}-{uuid.uuid4().hex[:8]}.parquet"
    path = Path(staging_dir) / name
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


class Warehouse:
    """A warehouse root. Cheap to construct; reading never takes the lock."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.catalog_dir = self.root / "_catalog"
        self.staging_dir = self.root / "_staging"

    def exists(self) -> bool:
        return (self.catalog_dir / "CURRENT").exists()

    def snapshot(self) -> Snapshot:
        current = self.catalog_dir / "CURRENT"
        # CURRENT and the snapshot it names can be swapped between our two reads; retry.
        for _ in range(20):
            try:
                n = int(current.read_text().strip())
            except FileNotFoundError:
                return Snapshot()
            try:
                return Snapshot.from_json((self.catalog_dir / f"snapshot-{n:06d}.json").read_bytes())
            except FileNotFoundError:
                time.sleep(0.01)
        raise WarehouseError(f"cannot read a consistent snapshot under {self.catalog_dir}")

    def abspath(self, entry: FileEntry) -> Path:
        return self.root / entry.path

    def read(self, table: str, columns: list[str], run_id: str | None = None,
             snap: Snapshot | None = None) -> pa.Table:
        """Some columns of a table's snapshot files (plus ``run_id``), without DuckDB or the views: what a
        resume or the checker needs is a few columns, and installing every view costs about a second."""
        snap = snap or self.snapshot()
        spec = TABLES[table].arrow_schema
        parts = []
        for e in snap.files(table, run_id):
            t = pq.read_table(self.abspath(e), columns=columns, schema=spec)
            parts.append(t.append_column(PARTITION_KEY, pa.array([e.run_id] * t.num_rows, pa.string())))
        if not parts:
            return pa.schema([spec.field(c) for c in columns] + [pa.field(PARTITION_KEY, pa.string())]).empty_table()
        return pa.concat_tables(parts)

    @contextmanager
    def writer(self, timeout_s: float | None = None, grace_s: float = 300.0) -> Iterator[Writer]:
        """The single writer: waits up to ``timeout_s`` (default ``$SHOPSIM_WH_LOCK_TIMEOUT_S`` or 30) for the
        lock. A lock left by a killed writer is free at once (the kernel drops a dead process's flock); its
        half-written files are never in a snapshot and are deleted here before anything else is written."""
        if timeout_s is None:
            timeout_s = float(os.environ.get("SHOPSIM_WH_LOCK_TIMEOUT_S") or 30)
        make_dirs(self.catalog_dir)
        make_dirs(self.staging_dir)
        lock_path = self.catalog_dir / "LOCK"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
                    os.close(fd)
                    raise WarehouseLockedError(
                        f"warehouse {self.root} is locked by another writer ({holder or 'unknown'}); one writer at "
                        "a time: wait for it to finish (or raise $SHOPSIM_WH_LOCK_TIMEOUT_S) or use another --warehouse"
                    ) from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}".encode(), 0)
        fs_event("root", self.root)
        try:
            w = Writer(self, grace_s)
            w.vacuum(orphans=True)
            yield w
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


class Writer:
    """Holds the warehouse lock; every commit is atomic for readers."""

    def __init__(self, wh: Warehouse, grace_s: float):
        self.wh = wh
        self.grace_s = grace_s
        self.snap = wh.snapshot()
        self._placed: list[Path] = []  # files moved into table directories by the step in progress

    # -- writing files -------------------------------------------------------------------------
    def _write_file(self, table: str, run_id: str, data: pa.Table, compacted: bool = False,
                    compression_level: int = ZSTD_LEVEL) -> FileEntry:
        staged = stage_parquet(self.wh.staging_dir, data, compression_level)
        self._placed.append(staged.path)  # removed again if this step fails before it is renamed
        return self._place(table, run_id, staged, compacted)

    def _place(self, table: str, run_id: str, staged: StagedFile, compacted: bool = False) -> FileEntry:
        """Move a fully written file from ``_staging/`` into its table directory (fsynced first)."""
        if staged.path.parent.resolve() != self.wh.staging_dir.resolve():
            raise WarehouseError(f"{staged.path} is not in this warehouse's staging directory {self.wh.staging_dir}")
        crash.point("commit.staged")
        _fsync_file(staged.path)
        crash.point("commit.file_synced")
        rel_dir = f"{table}/{PARTITION_KEY}={run_id}"
        final_dir = self.wh.root / rel_dir
        make_dirs(final_dir)
        self._placed.append(final_dir / staged.path.name)
        _replace(staged.path, final_dir / staged.path.name)
        crash.point("commit.file_renamed")
        _fsync_dir(final_dir)
        crash.point("commit.dir_synced")
        return FileEntry(f"{rel_dir}/{staged.path.name}", run_id, staged.rows,
                         (final_dir / staged.path.name).stat().st_size, compacted, SCHEMA_VERSION)

    def _publish(self, snap: Snapshot) -> None:
        snap.version = self.snap.version + 1
        snap.committed_at = time.time()
        cat = self.wh.catalog_dir
        _atomic_write_bytes(cat / f"snapshot-{snap.version:06d}.json", snap.to_json())
        crash.point("commit.snapshot_written")
        _atomic_write_bytes(cat / "CURRENT", str(snap.version).encode())
        self.snap = snap
        self._placed = []
        crash.point("commit.current_replaced")
        for old in cat.glob("snapshot-*.json"):  # keep a short history for readers mid-swap
            if int(old.stem.split("-")[1]) < snap.version - 5:
                _unlink(old)

    @contextmanager
    def _all_or_nothing(self, what: str) -> Iterator[None]:
        """On failure before CURRENT names the new snapshot, delete the files this step placed (they are in no
        snapshot), and turn a full disk into a :class:`WarehouseFullError` saying what is committed."""
        self._placed = []
        try:
            yield
        except BaseException as exc:
            for p in self._placed:
                _unlink(p)
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
        new = Snapshot(tables={}, pending_delete=list(self.snap.pending_delete))
        now = time.time()
        for table, entries in self.snap.tables.items():
            keep = [e for e in entries if e.run_id not in replace]
            new.pending_delete += [{"path": e.path, "since": now} for e in entries if e.run_id in replace]
            new.tables[table] = keep
        for table, entries in staged.items():
            new.tables.setdefault(table, []).extend(entries)
        self._publish(new)
        return new

    # -- compaction and cleanup ----------------------------------------------------------------
    def compact(self, run_id: str, min_files: int = 2, small_only: bool = False) -> int:
        """Merge a run's files per table into few large sorted files; returns files replaced.

        ``small_only`` merges only the files not yet compacted (cheap, for use while a run is going: the
        cost stays proportional to what was written since); the final compaction merges everything.
        """
        with self._all_or_nothing(f"the compaction of run {run_id}"):
            return self._compact(run_id, min_files, small_only)

    def _compact(self, run_id: str, min_files: int, small_only: bool) -> int:
        replaced: dict[str, list[FileEntry]] = {}
        written: dict[str, list[FileEntry]] = {}
        for table, spec in TABLES.items():
            entries = [e for e in self.snap.files(table, run_id) if not (small_only and e.compacted)]
            if len(entries) < min_files:
                continue
            data = pa.concat_tables(
                [pq.read_table(self.wh.abspath(e), schema=spec.arrow_schema) for e in entries],
                promote_options="permissive",
            )
            if spec.sort_key:
                data = data.sort_by([(k, "ascending") for k in spec.sort_key])
            n_files = max(1, -(-data.nbytes // COMPACT_FILE_TARGET_BYTES))
            step = -(-data.num_rows // n_files)
            written[table] = [
                self._write_file(table, run_id, data.slice(i, step), compacted=True)
                for i in range(0, data.num_rows, step)
            ]
            replaced[table] = entries
        if not replaced:
            return 0
        crash.point("compact.files_written")
        now = time.time()
        new = Snapshot(tables={}, pending_delete=list(self.snap.pending_delete))
        for table, entries in self.snap.tables.items():
            gone = {e.path for e in replaced.get(table, [])}
            new.tables[table] = [e for e in entries if e.path not in gone] + written.get(table, [])
            new.pending_delete += [{"path": p, "since": now} for p in sorted(gone)]
        self._publish(new)
        crash.point("compact.published")
        return sum(len(v) for v in replaced.values())

    def vacuum(self, force: bool = False, orphans: bool = False) -> int:
        """Delete replaced files past the grace period, plus orphans left by crashed commits.

        An orphan (a file in ``_staging/`` or a table directory that no snapshot lists) waits out the grace
        period too, unless ``orphans``: the writer passes it when it opens, since holding the lock means no
        other writer can be mid-commit (readers never open a file no snapshot lists)."""
        now = time.time()
        keep_pending, removed = [], 0
        for item in self.snap.pending_delete:
            if force or now - item["since"] >= self.grace_s:
                if _unlink(self.wh.root / item["path"]):
                    crash.point("vacuum.file_deleted")
                removed += 1
            else:
                keep_pending.append(item)
        old_enough = lambda f: force or orphans or now - f.stat().st_mtime >= self.grace_s  # noqa: E731
        for f in self.wh.staging_dir.glob("*"):
            if old_enough(f):
                _unlink(f)
        live = {e.path for es in self.snap.tables.values() for e in es} | {i["path"] for i in keep_pending}
        for table in TABLES:
            tdir = self.wh.root / table
            if not tdir.is_dir():
                continue
            for f in tdir.glob("*/*.parquet"):
                rel = f.relative_to(self.wh.root).as_posix()
                if rel not in live and old_enough(f):
                    _unlink(f)
                    crash.point("vacuum.file_deleted")
                    removed += 1
        for f in self.wh.catalog_dir.glob(".*.tmp"):  # a snapshot or CURRENT being written when a writer died
            if old_enough(f):
                _unlink(f)
        if len(keep_pending) != len(self.snap.pending_delete):
            self._publish(Snapshot(tables=dict(self.snap.tables), pending_delete=keep_pending))
            crash.point("vacuum.published")
        return removed
