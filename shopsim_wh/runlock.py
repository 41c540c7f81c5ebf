"""One invocation of an experiment at a time (see :func:`experiment_lock`)."""

from __future__ import annotations

import fcntl
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import WarehouseLockedError
from .warehouse import Warehouse


def is_url_root(root: str | os.PathLike) -> bool:
    """True for a ``scheme://`` warehouse root (object storage), False for a file-system path."""
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:/", str(root)) is not None


@contextmanager
def experiment_lock(wh: Warehouse, run_id: str) -> Iterator[None]:
    """One invocation of an experiment at a time, local or Ray: a Ray driver does not hold the warehouse lock
    while its workers run, so the experiment is locked for the whole invocation (``_catalog/run-<id>.lock``, an
    flock the kernel drops when its holder dies; the same wait as the warehouse lock). On object storage
    (``scheme://`` roots: no flock) this lock is not taken."""
    if is_url_root(wh.root):
        yield
        return
    wh.catalog_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(wh.catalog_dir / f"run-{run_id}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + float(os.environ.get("SHOPSIM_WH_LOCK_TIMEOUT_S") or 30)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
                    raise WarehouseLockedError(
                        f"experiment {run_id!r} is being run by another process ({holder or 'unknown'}) on {wh.root}; "
                        "wait for it to finish (it resumes nothing twice), or use another experiment.name") from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {os.uname().nodename}".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor drops the flock
