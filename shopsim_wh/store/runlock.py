"""One invocation of an experiment at a time (see :func:`experiment_lock`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from ..core.fsio import held_flock
from .storage import is_url, lock_stamp
from .warehouse import Warehouse

log = logging.getLogger(__name__)


@contextmanager
def experiment_lock(wh: Warehouse, run_id: str) -> Iterator[None]:
    """One invocation of an experiment at a time, local or Ray: a Ray driver does not hold the warehouse lock
    while its workers run, so the experiment is locked for the whole invocation (``_catalog/run-<id>.lock``, an
    flock the kernel drops when its holder dies; the same wait as the warehouse lock). On object storage
    (``scheme://`` roots: no flock) this lock is not taken."""
    if is_url(wh.root):
        yield
        return
    wh.catalog_dir.mkdir(parents=True, exist_ok=True)
    timeout_s = float(os.environ.get("SHOPSIM_WH_LOCK_TIMEOUT_S") or 30)

    def waiting(holder: str) -> None:
        log.warning("experiment %r is being run by another process (%s) on %s; waiting up to %g s for it to finish "
                    "($SHOPSIM_WH_LOCK_TIMEOUT_S)", run_id, holder, wh.root, timeout_s)

    def refusal(holder: str) -> str:
        return (f"experiment {run_id!r} is being run by another process ({holder}) on {wh.root}; gave up after "
                f"{timeout_s:g} s: run this command again once it has finished (it resumes nothing twice), set "
                "SHOPSIM_WH_LOCK_TIMEOUT_S to wait longer, or use another experiment.name")
    with held_flock(wh.catalog_dir / f"run-{run_id}.lock", timeout_s, refusal, lock_stamp(), waiting):
        yield
