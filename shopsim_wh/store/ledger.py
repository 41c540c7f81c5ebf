"""The commit ledger: what each writer acknowledged as committed, for the checker (:mod:`.check`).

``<root>/_ledger/<load_id>.jsonl``, one file per ``run`` / ``ingest`` invocation (``<load_id>.w<n>.jsonl`` per
Ray worker of a run with ``runtime.executor: ray``), append-only. After a
commit is current (``CURRENT`` names it) the writer appends one JSON line and fsyncs it; only then
does it count the episodes as done (progress bar, result counts). A line is therefore a promise: the
checker reports every acknowledged episode the warehouse does not hold as *lost*. The converse is
allowed (a crash between ``CURRENT`` and the ledger line leaves a committed, unacknowledged commit;
resume sees it stored and does not run it again). A torn last line (a crash mid-append) was never
acknowledged and is skipped.

On object storage (no append) each line is its own object, ``_ledger/<load_id>/<seq>.json``, put after the
commit's snapshot object exists; :func:`read_ledger` reads them back in the same shape.

Line shapes (``v`` 1):

* runner: ``{"v":1,"writer":"run","load_id","run_id","snapshot","episodes":[[episode_id, attempt, status], ...]}``
* ingest: ``{"v":1,"writer":"ingest","load_id","run_id","snapshot","source_hash","source_file",
  "episode_attempts": n, "replaces": [run_id, ...]}`` (a re-ingested path drops its earlier runs)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..core import crash
from ..core.crash import fs_event
from ..core.fsio import fsync_dir, make_dirs

LEDGER_DIR = "_ledger"


class Ledger:
    """One writer invocation's ledger file; :meth:`append` returns once the line is durable."""

    def __init__(self, root: str | os.PathLike, load_id: str, part: str = ""):
        from .storage import is_url, open_store

        self.store = open_store(root) if is_url(root) else None
        self.seq = 0
        self.name = f"{load_id}{part}"  # part: one file (object folder) per Ray worker of an invocation
        self.dir = Path(root) / LEDGER_DIR if self.store is None else None
        self.path = self.dir / f"{self.name}.jsonl" if self.store is None else None
        self.load_id = load_id

    def append(self, entry: dict) -> None:
        line = json.dumps({"v": 1, "load_id": self.load_id, **entry}, separators=(",", ":"), ensure_ascii=False)
        if self.store is not None:
            self.seq += 1
            self.store.client.put_object(Bucket=self.store.bucket, Body=line.encode(),
                                         Key=self.store.key(f"{LEDGER_DIR}/{self.name}/{self.seq:06d}.json"))
            crash.point("commit.acknowledged")
            return
        new = not self.path.exists()
        if new:
            make_dirs(self.dir)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if new:
                fs_event("create", self.path)
            os.write(fd, (line + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        fs_event("sync", self.path)
        if new:
            fsync_dir(self.dir)
        crash.point("commit.acknowledged")


def read_ledger(root: str | os.PathLike) -> tuple[list[dict], int]:
    """(every acknowledged entry in file order per writer, torn lines skipped)."""
    entries, torn = [], 0
    from .storage import is_url, open_store

    if is_url(root):
        store = open_store(root)
        for rel, _, _ in sorted(store.list(LEDGER_DIR)):
            entries.append(json.loads(store.open_input(rel).read()))
        return entries, torn
    d = Path(root) / LEDGER_DIR
    for f in sorted(d.glob("*.jsonl")) if d.is_dir() else []:
        for raw in f.read_bytes().split(b"\n"):
            if not raw.strip():
                continue
            try:
                entries.append(json.loads(raw))
            except ValueError:
                torn += 1
    return entries, torn
