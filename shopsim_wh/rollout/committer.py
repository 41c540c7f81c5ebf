"""The runner's group commit: finished episodes -> rows -> one atomic commit -> a ledger line (the acknowledgement).

While one commit is being written, episodes that finish queue for the next; every ~64 small files the run's
files are compacted (small ones only). A failed commit stops the run (``on_error``) and is re-raised by it.
With ``model.record_tokens`` an episode's training rows (:mod:`.token_samples`) go into the same commit as its
steps, so attempts, crash safety and resume hold for them as for every other table.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..core.schema import to_arrow
from ..store.ledger import Ledger
from ..store.warehouse import Writer
from .runtime import EpisodeRecord
from .token_samples import TokenRecording, training_rows

SOURCE_FORMAT = "shopsim-wh-runner"
COMPACT_EVERY_FILES = 64


def _record_rows(experiment: str, load_id: str, attempt: int, rec: EpisodeRecord,
                 recording: TokenRecording | None = None) -> dict[str, list[dict]]:
    key = {"episode_id": rec.job.episode_id, "attempt": attempt, "load_id": load_id}
    ep = {**rec.episode, **key, "experiment": experiment, "source_format": SOURCE_FORMAT}
    rows: dict[str, list[dict]] = {
        "episodes": [ep],
        "agents": [{**key, "agent_id": "main", "agent_role": "main", "depth": 0,
                    "model": next((s["model"] for s in rec.steps if s.get("model")), None)}],
        "steps": [{**s, **key} for s in rec.steps],
        "actions": [{**a, **key} for a in rec.actions],
        "observations": [{**o, **key} for o in rec.observations],
        "messages": [{**m, **key, "agent_id": "main"} for m in rec.messages],
        "skills_selected": [{**s, **key} for s in rec.skills],
        "tools": [{**t, **key} for t in rec.tools.values()],
        "failures": [{**rec.failure, **key}] if rec.failure else [],
    }
    if recording is not None:
        rows.update({t: [{**r, **key} for r in rs] for t, rs in training_rows(rec, recording).items()})
    return rows


class Committer:
    """Group commit: while one commit is being written, finished episodes queue for the next."""

    def __init__(self, writer: Writer, run_id: str, experiment: str, load_id: str, attempts: dict[str, int],
                 ledger_part: str = "", recording: TokenRecording | None = None):
        self.writer, self.run_id, self.experiment, self.load_id, self.attempts = writer, run_id, experiment, load_id, attempts
        self.recording = recording
        self.ledger = Ledger(writer.wh.root, load_id, ledger_part)
        self.pending: list[EpisodeRecord] = []
        self.wake = asyncio.Event()
        self.closed = False
        self.committed = 0
        self.error: BaseException | None = None
        self.on_error: Callable[[], None] = lambda: None

    def add(self, rec: EpisodeRecord) -> None:
        self.pending.append(rec)
        self.wake.set()

    def _commit(self, recs: list[EpisodeRecord]) -> None:
        by_table: dict[str, list[dict]] = {}
        for rec in recs:
            attempt = self.attempts.get(rec.job.episode_id, 0) + 1
            self.attempts[rec.job.episode_id] = attempt
            for table, rows in _record_rows(self.experiment, self.load_id, attempt, rec, self.recording).items():
                by_table.setdefault(table, []).extend(rows)
        snap = self.writer.commit([(t, self.run_id, to_arrow(t, rows)) for t, rows in by_table.items() if rows])
        self.ledger.append({"writer": "run", "run_id": self.run_id, "snapshot": snap.version, "episodes": [
            [r.job.episode_id, self.attempts[r.job.episode_id], r.episode.get("status")] for r in recs]})
        small = [e for e in self.writer.snap.files("steps", self.run_id) if not e.compacted]
        if len(small) > COMPACT_EVERY_FILES:
            self.writer.compact(self.run_id, small_only=True)

    async def loop(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            recs, self.pending = self.pending, []
            if recs:
                try:
                    await asyncio.to_thread(self._commit, recs)
                except BaseException as exc:  # noqa: BLE001 - re-raised by _run_async once the episodes stop
                    self.error = exc
                    self.on_error()
                    return
                self.committed += len(recs)
            if self.closed and not self.pending:
                return
