"""The file-system steps of a durable commit, each reported to the power-loss recorder (:mod:`.crash`).

A name (a created, renamed or deleted file, a new directory) is durable only once its directory is
fsynced; a file's bytes only once the file is. Everything the warehouse writer writes goes through here.
"""

from __future__ import annotations

import fcntl
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .crash import fs_event
from .errors import WarehouseLockedError


@contextmanager
def held_flock(path: Path, timeout_s: float, refusal: Callable[[str], str], stamp: str,
               waiting: Callable[[str], None] | None = None) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created if absent), waiting up to ``timeout_s`` for it; ``stamp`` (who
    holds it) is written into the file. ``waiting(holder's stamp)`` is called once when the lock is busy, before
    the wait; on time-out, :class:`WarehouseLockedError` with ``refusal(holder's stamp)``.
    A lock left by a killed holder is free at once: the kernel drops a dead process's flock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        told = waiting is None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                late = time.monotonic() > deadline
                if late or not told:
                    holder = os.pread(fd, 400, 0).decode(errors="replace").strip() or "unknown"
                    if late:
                        raise WarehouseLockedError(refusal(holder)) from None
                    waiting(holder)
                    told = True
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, stamp.encode(), 0)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fs_event("sync_dir", path)


def fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())
    fs_event("sync", path)


def replace(src: Path, dst: Path) -> None:
    os.replace(src, dst)
    fs_event("replace", src, dst)


def unlink(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fs_event("unlink", path)
    return True


def make_dirs(path: Path) -> None:
    """``mkdir -p`` whose new names are durable: each created directory's parent is fsynced."""
    path = Path(path)
    if path.is_dir():
        return
    make_dirs(path.parent)
    try:
        path.mkdir()
    except FileExistsError:
        return
    fs_event("mkdir", path)
    fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as f:
            fs_event("create", tmp)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        fs_event("sync", tmp)
        replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


NO_SPACE_ERRNOS = {28, 27, 122}  # ENOSPC, EFBIG (RLIMIT_FSIZE), EDQUOT


def is_no_space(exc: BaseException) -> bool:
    """An OSError (or Arrow's IOError) saying the file system or the file-size limit is full."""
    if not isinstance(exc, OSError):
        return False
    if exc.errno in NO_SPACE_ERRNOS:
        return True
    text = str(exc)
    return any(s in text for s in ("No space left", "File too large", "Disk quota exceeded"))
