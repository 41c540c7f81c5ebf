"""Warehouse upkeep behind ``runs list|rm``, ``vacuum`` and ``compact``: each one atomic snapshot commit.

* :func:`list_runs`: every run of the current snapshot with its size (from the snapshot) and identity
  (from the ``runs`` rows, read with pyarrow: no DuckDB needed).
* :func:`remove_run`: one commit that drops every file of a run from the snapshot (readers see the run or
  not, never half of it). The files stay on disk, listed as pending deletion, for the grace period so
  that readers of the previous snapshot finish; ``vacuum`` deletes them afterwards.
* :func:`vacuum`: deletes replaced files past the grace period and orphans of crashed commits.
* :func:`compact`: merges each run's small files (and rewrites files of an older schema version).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from ..core.errors import WarehouseError
from ..core.schema import SCHEMA_VERSION, TABLES
from .warehouse import Snapshot, Warehouse, check_run_id

GRACE_S = 300.0  # Warehouse.writer's default: how long replaced files stay for readers of older snapshots


class RunNotFound(WarehouseError):
    """The run id is not in the current snapshot."""


@dataclass
class RunInfo:
    run_id: str
    experiment: str | None
    source_format: str | None
    checkpoint_id: str | None
    created_at: str | None
    episodes: int  # episode attempt rows
    files: int
    bytes: int
    tables: dict[str, int] = field(default_factory=dict)  # rows per table

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _require(root: str | os.PathLike) -> Warehouse:
    wh = Warehouse(root)
    if not wh.exists():
        raise WarehouseError(f"no warehouse at {root}; pass --warehouse DIR or create one with `shopsim-wh run CONFIG`")
    return wh


def _runs_rows(wh: Warehouse, snap: Snapshot) -> dict[str, dict]:
    import pyarrow.parquet as pq

    rows: dict[str, dict] = {}
    for e in snap.files("runs"):
        cols = [c for c in ("experiment", "source_format", "checkpoint_id", "created_at")
                if c in pq.read_schema(wh.open_input(e)).names]
        for r in pq.read_table(wh.open_input(e), columns=cols).to_pylist():
            rows[e.run_id] = r
    return rows


def list_runs(root: str | os.PathLike) -> list[RunInfo]:
    """Every run of the current snapshot, oldest first (runs without a ``runs`` row last, by id)."""
    wh = _require(root)
    snap = wh.snapshot()
    meta = _runs_rows(wh, snap)
    out = []
    for run_id in snap.run_ids():
        files = [e for t in TABLES for e in snap.files(t, run_id)]
        m = meta.get(run_id, {})
        created = m.get("created_at")
        out.append(RunInfo(run_id, m.get("experiment"), m.get("source_format"), m.get("checkpoint_id"),
                           created.isoformat() if created else None,
                           sum(e.rows for e in snap.files("episodes", run_id)), len(files), sum(e.bytes for e in files),
                           {t: sum(e.rows for e in snap.files(t, run_id)) for t in TABLES if snap.files(t, run_id)}))
    return sorted(out, key=lambda r: (r.created_at is None, r.created_at or "", r.run_id))


def remove_run(root: str | os.PathLike, run_id: str, grace_s: float = GRACE_S) -> int:
    """Drop a run from the snapshot in one commit; returns the number of files now pending deletion."""
    wh = _require(root)
    check_run_id(run_id)
    with wh.writer(grace_s=grace_s) as w:
        if run_id not in w.snap.run_ids():
            known = sorted(w.snap.run_ids())
            raise RunNotFound(f"no run {run_id!r} in warehouse {root}; known runs: {', '.join(known) or '(none)'} "
                              "(`shopsim-wh runs list`)")
        n = sum(len(w.snap.files(t, run_id)) for t in TABLES)
        w.commit([], replace_runs=[run_id])
    return n


def outdated(wh: Warehouse, snap: Snapshot) -> dict[str, int]:
    """Files per run written under an older schema version whose columns differ from today's declaration
    (readers fill the missing columns with NULL; ``compact`` rewrites them)."""
    import pyarrow.parquet as pq

    out: dict[str, int] = {}
    for table, entries in snap.tables.items():
        spec = TABLES.get(table)
        for e in entries:
            if spec is None or e.schema_version == SCHEMA_VERSION or not wh.store.exists(e.path):
                continue
            try:
                names = pq.read_schema(wh.open_input(e)).names
            except Exception:  # noqa: BLE001 - unreadable files are doctor's file_unreadable finding
                continue
            if names != spec.column_names:
                out[e.run_id] = out.get(e.run_id, 0) + 1
    return out


def _candidates(wh: Warehouse, snap: Snapshot) -> dict[str, int]:
    """Files a vacuum may delete (path -> bytes): pending deletions, staging leftovers, unlisted table files."""
    live = {e.path for es in snap.tables.values() for e in es}
    pending = {i["path"] for i in snap.pending_delete}
    out = {rel: size for table in TABLES for rel, _, size in wh.store.list(table)
           if rel.endswith(".parquet") and (rel in pending or rel not in live)}
    out.update({str(f): f.stat().st_size for f in wh.store.staged()})
    return out


def vacuum(root: str | os.PathLike, force: bool = False, grace_s: float = GRACE_S) -> dict:
    """Delete what no snapshot needs: files replaced (compaction, ``runs rm``) more than ``grace_s`` ago and
    orphans of crashed commits as old. ``force`` deletes them regardless of age (only when no reader of an
    older snapshot is running). Returns counts: removed files and bytes, files still waiting."""
    wh = _require(root)
    before = _candidates(wh, wh.snapshot())
    with wh.writer(grace_s=grace_s) as w:  # opening the writer vacuums by age already
        w.vacuum(force=force)
    after = _candidates(wh, wh.snapshot())
    gone = [f for f in before if f not in after]
    return {"removed_files": len(gone), "removed_bytes": sum(before[f] for f in gone), "waiting_files": len(after),
            "grace_s": grace_s}


def compact(root: str | os.PathLike, run_ids: list[str] | None = None, grace_s: float = GRACE_S) -> dict:
    """Compact the given runs (default: every run). A run holding files of an older schema version is
    rewritten even when it has a single file per table, so its files carry the current version."""
    wh = _require(root)
    t0 = time.perf_counter()
    replaced: dict[str, int] = {}
    with wh.writer(grace_s=grace_s) as w:
        known = w.snap.run_ids()
        todo = sorted(known) if not run_ids else list(run_ids)
        missing = [r for r in todo if r not in known]
        if missing:
            raise RunNotFound(f"no run(s) {', '.join(missing)} in warehouse {root}; `shopsim-wh runs list` shows them")
        old = outdated(wh, w.snap)
        for run_id in todo:
            replaced[run_id] = w.compact(run_id, min_files=1 if old.get(run_id) else 2)
    return {"runs": len(todo), "files_replaced": sum(replaced.values()), "per_run": replaced,
            "seconds": round(time.perf_counter() - t0, 3)}
