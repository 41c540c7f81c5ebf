"""Named crash points and a power-loss recorder, for durability tests. Zero cost when unset.

Environment (read at import; :func:`arm` re-reads it, e.g. in a forked child):

``SHOPSIM_WH_CRASH=point[:occurrence][,point[:occurrence]...]``
    The process dies the ``occurrence``-th time (default 1) it reaches ``point`` (a name in
    :data:`POINTS`), with ``os._exit(CRASH_EXIT)`` or, with ``SHOPSIM_WH_CRASH_MODE=kill``, by
    sending itself SIGKILL. Nothing is flushed, no ``finally`` runs.
``SHOPSIM_WH_CRASH_COUNTS=FILE``
    At exit (normal or at a crash point), write ``{point: times reached}`` as JSON to FILE: how a test
    learns the last occurrence of each point for a job.
``SHOPSIM_WH_POWERLOSS=DIR``
    Record every file created, fsynced, renamed, unlinked and every directory created or fsynced by
    the warehouse writer; at the crash point, write into DIR what a machine that lost power at that
    instant would find on disk: only what was fsynced (file contents by ``fsync(file)``, names by
    ``fsync(directory)``); a file whose name survived but whose content was never synced is empty.

The library calls :func:`point` at each step of the commit path, of compaction, vacuum, the runner
and ingest, and reports file-system operations through :func:`fs_event` (only when recording).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
from pathlib import Path

CRASH_EXIT = 70  # the exit status of a process stopped at a crash point (os._exit mode)

POINTS = {
    "commit.staged": "a Parquet file is written under _staging/ (not yet fsynced)",
    "commit.file_synced": "a staged file is fsynced",
    "commit.file_renamed": "a staged file is renamed into its table directory",
    "commit.dir_synced": "the table directory holding it is fsynced",
    "commit.snapshot_written": "the new snapshot file is written, fsynced and renamed",
    "commit.current_replaced": "CURRENT names the new snapshot (the commit is visible)",
    "commit.acknowledged": "the writer recorded the commit in its ledger (fsynced)",
    "compact.files_written": "compaction placed its merged files (not yet in a snapshot)",
    "compact.published": "the snapshot swapping in the merged files is current",
    "vacuum.file_deleted": "vacuum deleted one replaced or orphaned file",
    "vacuum.published": "vacuum published the snapshot without the deleted files",
    "runner.episode_finished": "an episode finished and is queued for the next commit",
    "runner.load_recorded": "the run's loads row is committed (before the final compaction)",
    "ingest.unit_parsed": "a unit's reader produced a batch of rows",
    "ingest.unit_committed": "a unit's commit is current (before its ledger line)",
    "ingest.load_recorded": "the ingest's loads row is committed",
}

_armed: dict[str, int] = {}
_counts: dict[str, int] = {}
_counts_file: str | None = None
_mode = "exit"
_recorder: _Recorder | None = None
ACTIVE = False  # True only when one of the variables above is set: point() is then one global read


def arm(env: dict | None = None) -> None:
    """(Re)read the variables from ``env`` (default ``os.environ``)."""
    global _armed, _counts_file, _mode, _recorder, ACTIVE
    env = os.environ if env is None else env
    _armed = {}
    for item in filter(None, (env.get("SHOPSIM_WH_CRASH") or "").split(",")):
        name, _, occ = item.strip().partition(":")
        if name not in POINTS:
            raise ValueError(f"SHOPSIM_WH_CRASH names an unknown crash point {name!r}; known: {', '.join(POINTS)}")
        _armed[name] = int(occ or 1)
    _counts.clear()
    _counts_file = env.get("SHOPSIM_WH_CRASH_COUNTS") or None
    _mode = env.get("SHOPSIM_WH_CRASH_MODE") or "exit"
    _recorder = _Recorder(Path(env["SHOPSIM_WH_POWERLOSS"])) if env.get("SHOPSIM_WH_POWERLOSS") else None
    ACTIVE = bool(_armed or _counts_file or _recorder)


def point(name: str) -> None:
    """A named step; dies here when armed for this occurrence."""
    if ACTIVE:
        _reached(name)


def _reached(name: str) -> None:
    if name not in POINTS:
        raise AssertionError(f"crash point {name!r} is not declared in shopsim_wh.core.crash.POINTS")
    n = _counts[name] = _counts.get(name, 0) + 1
    if _armed.get(name) == n:
        die()


def die() -> None:
    """Stop now, like a crash: counts and the power-loss image are written first when asked for."""
    write_counts()
    if _recorder is not None:
        _recorder.materialize()
    if _mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(CRASH_EXIT)


def write_counts() -> None:
    if _counts_file:
        Path(_counts_file).write_text(json.dumps(_counts, sort_keys=True))


atexit.register(write_counts)


# -- power-loss emulation -----------------------------------------------------------------------------
def fs_event(op: str, path: os.PathLike | str, dst: os.PathLike | str | None = None) -> None:
    """Report a file-system operation: create | sync | replace | unlink | mkdir | sync_dir | root."""
    if _recorder is not None:
        _recorder.event(op, Path(path), None if dst is None else Path(dst))


class _Recorder:
    """Keeps two namespaces: what the process sees, and what is durable (names applied on a directory
    fsync, contents captured at a file fsync); :meth:`materialize` writes the durable one."""

    def __init__(self, out: Path):
        self.out = out
        self.root: Path | None = None
        self.live: dict[Path, int | None] = {}  # path -> file id (None: a directory)
        self.durable: dict[Path, int | None] = {}
        self.pending: dict[Path, list[tuple]] = {}  # directory -> name operations not yet durable
        self.synced: dict[int, bytes] = {}
        self.next_id = 0

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def event(self, op: str, path: Path, dst: Path | None) -> None:
        path = Path(os.path.abspath(path))
        if op == "root":  # the warehouse a writer opened: everything on disk now is taken as durable
            if self.root is None:
                self.root = path
                for p in sorted(path.rglob("*")):
                    fid = None if p.is_dir() else self._new_id()
                    if fid is not None:
                        self.synced[fid] = p.read_bytes()
                    self.live[p] = self.durable[p] = fid
            return
        if self.root is None or not path.is_relative_to(self.root):
            return
        if op == "create":
            self._name(path, ("put", path, self._new_id()))
        elif op == "mkdir":
            self._name(path, ("put", path, None))
        elif op == "sync":
            if self.live.get(path) is None:  # created by another process (an ingest parsing worker)
                self._name(path, ("put", path, self._new_id()))
            self.synced[self.live[path]] = path.read_bytes()
        elif op == "replace":
            dst = Path(os.path.abspath(dst))
            fid = self.live.get(path)
            self._name(path, ("del", path))
            self._name(dst, ("put", dst, fid if fid is not None else self._new_id()))
        elif op == "unlink":
            self._name(path, ("del", path))
        elif op == "sync_dir":
            for item in self.pending.pop(path, []):
                self._apply(self.durable, item)

    def _name(self, path: Path, item: tuple) -> None:
        self._apply(self.live, item)
        self.pending.setdefault(path.parent, []).append(item)

    @staticmethod
    def _apply(ns: dict, item: tuple) -> None:
        if item[0] == "put":
            ns[item[1]] = item[2]
        else:
            ns.pop(item[1], None)

    def materialize(self) -> None:
        if self.root is None:
            return
        shutil.rmtree(self.out, ignore_errors=True)
        self.out.mkdir(parents=True)
        dirs = {p for p, fid in self.durable.items() if fid is None} | {self.root}
        for p, fid in sorted(self.durable.items(), key=lambda kv: len(kv[0].parts)):
            if not all(a in dirs for a in p.parents if a.is_relative_to(self.root)):
                continue  # its directory's own name never became durable
            target = self.out / p.relative_to(self.root)
            if fid is None:
                target.mkdir(exist_ok=True)
            else:
                target.write_bytes(self.synced.get(fid, b""))


arm()
