"""``runtime.executor: ray``: the job list split across Ray tasks, each committing its own batches.

The driver (:func:`run_on_ray`, called by :func:`shopsim_wh.rollout.runner.run`):

1. takes the warehouse lock briefly: reads what is committed (fingerprint, completed episodes, last attempt
   per episode), refuses a fingerprint change, reads the environment's health and writes the ``runs`` row of
   a new run; then releases the lock;
2. splits the episodes still to do round-robin into ``runtime.ray_workers`` shares (default: the cluster's
   CPU count) and starts one Ray task per share (``num_cpus=1``, no retries);
3. shows the total on the progress bar from the workers' events (a small progress actor) and sums their
   results into one :class:`~shopsim_wh.rollout.execution.RunResult`;
4. records the ``loads`` row and compacts the run's files, as the local runner does.

A worker (:func:`_worker`) plans the same config (and refuses to run when its plan has another fingerprint,
e.g. a split file that differs on its node), starts its own embedded servers when the config says
``embedded`` (deterministic by seeds: the same config gives the same episodes whatever the executor), runs its
share with the local runner's code and ``runtime.concurrency`` episodes in flight, and commits through the
normal writer, taking the warehouse lock for each group commit only (workers wait for each other's commits;
that wait never times out). Each worker acknowledges its commits in its own ledger file
``_ledger/<load_id>.w<n>.jsonl``.

A worker that dies (node lost, OOM-killed) is not retried within the run: what it committed stays, the run
reports it (``fatal``, exit non-zero) and the same command resumes the rest, locally or on Ray, since a resume
skips every episode any worker completed.

SIGTERM or SIGINT on the driver drains, as in the local runner: the driver tells every worker through the
run's channel actor, each worker starts no new episode, finishes and commits the ones in flight and returns;
the driver then records the load (``interrupted``: exit 143 or 130). A second signal cancels the workers at once
(their in-flight episodes run again on resume; what they committed stays).

Test hook: ``SHOPSIM_WH_RAY_CRASH=<worker>:<point>[:<occurrence>]`` arms the crash point
(:mod:`shopsim_wh.core.crash`) in that worker only, in SIGKILL mode: a real Ray worker process dies mid-run.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from ..core.config import Config
from ..store.storage import is_url
from ..store.warehouse import Warehouse
from .execution import (
    Plan,
    RunResult,
    _existing_state,
    _run_async,
    _Start,
    check_resume,
    grace_seconds,
    make_clients,
    open_run,
    plan,
    record_load,
)
from .jobs import EpisodeJob

POLL_S = 0.2  # how often the driver collects progress events and finished workers
MAX_FAILURE_LINES = 20


class LockPerCommit:
    """The part of :class:`~shopsim_wh.store.warehouse.Writer` the runner's committer uses, holding the warehouse lock
    for one call at a time, so several processes commit to one warehouse. A lock wait never times out: another
    worker's commit (or a compaction) always ends, and a long run must not fail because it waited."""

    def __init__(self, wh: Warehouse, grace_s: float):
        self.wh, self.grace_s = wh, grace_s
        self.snap = wh.snapshot()

    def _locked(self, fn):
        with self.wh.writer(timeout_s=math.inf, grace_s=self.grace_s) as w:
            out = fn(w)
            self.snap = w.snap
            return out

    def commit(self, batches, **kwargs):
        batches = list(batches)
        return self._locked(lambda w: w.commit(batches, **kwargs))

    def compact(self, run_id: str, **kwargs) -> int:
        return self._locked(lambda w: w.compact(run_id, **kwargs))


class ProgressEvent:
    """What a worker reports per finished attempt: the fields the CLI's progress bar reads of an EpisodeRecord."""

    __slots__ = ("completed", "episode", "job")

    def __init__(self, job: EpisodeJob, completed: bool, episode: dict):
        self.job, self.completed, self.episode = job, completed, episode


@dataclass(frozen=True)
class WorkerShare:
    """One Ray task's share of a run: its jobs and what it needs to run and commit them (picklable)."""

    index: int  # the worker's number (its ledger file is _ledger/<load_id>.w<index>.jsonl)
    jobs: list[EpisodeJob]
    attempts: dict[str, int]  # last attempt per episode of these jobs, as committed before this load
    root: str  # the warehouse, as an absolute path or URL
    load_id: str
    stored: dict  # the fingerprint fields of the run the driver opened
    env_version: str | None  # the environment_version the driver read from GET /healthz
    allow_test: bool = False
    concurrency: int = 8  # episodes in flight in this worker
    events: bool = False  # send a progress event per finished attempt to the driver's channel
    crash_env: dict | None = None  # test hook: the crash-point variables for this worker (None = os.environ)


def _worker(cfg: Config, share: WorkerShare, channel: Any) -> dict:
    """One Ray task: run ``share.jobs`` of the run whose driver wrote ``share.stored`` (fingerprint fields) and its
    runs row. ``channel`` (the driver's :class:`Channel` actor) takes its progress events when ``share.events`` and
    says when the driver was signalled: then the worker starts nothing new and returns once what is in flight is
    committed."""
    import ray

    from ..core import crash
    from ..core.errors import ConfigError

    index, stored = share.index, share.stored
    crash.arm(share.crash_env if share.crash_env is not None else os.environ)  # a reused worker process is re-armed
    p = plan(cfg)
    if p.fingerprint_fields != stored:
        differ = sorted(k for k in set(stored) | set(p.fingerprint_fields) if stored.get(k) != p.fingerprint_fields.get(k))
        raise ConfigError(f"Ray worker {index} on {os.uname().nodename} plans another run than the driver (differs in "
                          f"{differ}): every node needs the same split manifest, skill bank and prompt files at the "
                          "same paths, and the same shopsim-wh version")
    p.jobs = [] if ray.get(channel.stopping.remote()) else list(share.jobs)  # signalled before this task started

    async def watch(on_signal) -> None:
        while not (name := await channel.stopping.remote()):
            await asyncio.sleep(POLL_S)
        on_signal(signal.Signals[name])

    start = _Start(stored, share.env_version, set(), dict(share.attempts), share.allow_test, None, signals=False,
                   ledger_part=f".w{index}", watch=watch)
    last: list = []  # the latest event sent: calls from one caller run in order, so waiting for it waits for all

    def progress(rec) -> None:
        episode = {"reward": rec.episode.get("reward"), "status": rec.episode.get("status")}
        last[:] = [channel.add.remote(ProgressEvent(rec.job, rec.completed, episode))]

    writer = LockPerCommit(Warehouse(share.root), grace_seconds())
    asyncio.run(_run_async(p, writer, start, share.load_id, share.concurrency, progress if share.events else None))
    if last:  # the driver's last drain, after this task returned, sees every event of this worker
        ray.get(last[0])
    return asdict(start.result)


def _merge(total: RunResult, part: dict) -> None:
    for name in ("attempted", "completed", "failed", "reruns", "committed"):
        setattr(total, name, getattr(total, name) + part[name])
    total.failures += part["failures"][:MAX_FAILURE_LINES - len(total.failures)]
    for url, msg in part["unreachable"].items():
        total.unreachable.setdefault(url, msg)
    total.fatal = total.fatal or part["fatal"]


LOOPBACK_ENV = {  # a new local Ray instance of this process: usage statistics off, every socket on loopback
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # no multi-node: Ray binds 127.0.0.1, not the machine's address
}


def init_ray(address: str | None) -> None:
    """Attach to Ray: the running one of this process, ``address`` (``auto``, ``ray://host:port``), or a new
    local one on loopback (:data:`LOOPBACK_ENV`, each unless the user set that variable; read when Ray is first
    imported). Usage statistics stay off unless the user set RAY_USAGE_STATS_ENABLED."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address is None and not os.environ.get("RAY_ADDRESS"):
        for key, value in LOOPBACK_ENV.items():
            os.environ.setdefault(key, value)
    try:
        import ray
    except ImportError:
        from ..core.errors import ConfigError

        raise ConfigError("runtime.executor is 'ray' but Ray is not installed: pip install 'shopsim-wh[ray]' (on the "
                          "driver and on every node of the cluster), or set runtime.executor: local") from None
    if ray.is_initialized():
        return
    if address is None:  # a new local instance: no dashboard (nothing listens beyond what the run needs)
        ray.init(include_dashboard=False)
    else:
        ray.init(address=address)


def _crash_env(index: int) -> dict | None:
    spec = os.environ.get("SHOPSIM_WH_RAY_CRASH")
    if not spec:
        return None
    worker, _, point = spec.partition(":")
    return {"SHOPSIM_WH_CRASH": point, "SHOPSIM_WH_CRASH_MODE": "kill"} if int(worker) == index else {}


def _remote_parts():
    import ray

    @ray.remote(num_cpus=0)
    class Channel:
        """The driver's side of a run: the workers' progress events, and the signal the driver got (if any)."""

        def __init__(self):
            self.events: list = []
            self.signal: str | None = None

        def add(self, event) -> None:
            self.events.append(event)

        def drain(self) -> list:
            out, self.events = self.events, []
            return out

        def stop(self, name: str) -> None:
            self.signal = self.signal or name

        def stopping(self) -> str | None:
            return self.signal

    return ray.remote(num_cpus=1, max_retries=0)(_worker), Channel


@dataclass(frozen=True)
class RunHooks:
    """The caller's callbacks of a run (each optional): see :func:`shopsim_wh.rollout.runner.run`."""

    progress: Callable[[Any], None] | None = None  # per finished attempt (an EpisodeRecord or a ProgressEvent)
    on_start: Callable[[int, int], None] | None = None  # (episodes to run, episodes skipped) before the first one
    on_signal: Callable[[str, int], None] | None = None  # (signal name, episodes in flight) at the first signal


def run_on_ray(p: Plan, wh: Warehouse, load_id: str, concurrency: int, allow_test: bool,
               hooks: RunHooks | None = None) -> RunResult:
    """Run or resume ``p`` across Ray tasks (see the module docstring). ``hooks.on_signal(name, in_flight)`` is told
    of the first SIGTERM / SIGINT (``in_flight``: at most that many episodes are being finished)."""
    hooks = hooks if hooks is not None else RunHooks()
    progress, on_start, on_signal = hooks.progress, hooks.on_start, hooks.on_signal
    cfg = p.cfg
    init_ray(cfg.runtime.ray_address)
    import ray

    started = datetime.now(UTC)
    with wh.writer(grace_s=grace_seconds()) as writer:
        stored, stored_env, done, attempts = _existing_state(wh, p.run_id)
        check_resume(p.run_id, stored, p.fingerprint_fields)
        start = _Start(stored, stored_env, done, attempts, allow_test, None)
        health = asyncio.run(_open(p, writer, start, load_id))
    todo = [j for j in p.jobs if j.episode_id not in done]
    result = RunResult(p.run_id, len(p.jobs), len(p.jobs) - len(todo))
    if on_start:
        on_start(len(todo), result.skipped)
    n = min(cfg.runtime.ray_workers or max(1, int(ray.cluster_resources().get("CPU", 1))), len(todo))
    root = str(wh.root) if is_url(wh.root) else os.path.abspath(wh.root)  # workers may start elsewhere
    task, channel_cls = _remote_parts()
    channel = channel_cls.remote()
    status = "interrupted"  # unless every worker returned
    stopped: list[str] = []
    restore = _stop_on_signals(stopped)
    try:
        shares = [WorkerShare(index=i, jobs=todo[i::n],
                              attempts={j.episode_id: attempts[j.episode_id] for j in todo[i::n] if j.episode_id in attempts},
                              root=root, load_id=load_id, stored=p.fingerprint_fields,
                              env_version=health.get("environment_version"), allow_test=allow_test,
                              concurrency=concurrency, events=progress is not None, crash_env=_crash_env(i))
                  for i in range(n)]
        refs = {task.remote(cfg, share, channel): share.index for share in shares}
        pending, lost, finished = list(refs), 0, [0]
        while pending and len(stopped) < 2:  # a first signal drains (the workers return), a second cancels
            if stopped and result.interrupted is None:
                result.interrupted = stopped[0]
                ray.get(channel.stop.remote(stopped[0]))
                if on_signal:
                    on_signal(stopped[0], min(len(pending) * concurrency, len(todo) - finished[0]))
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_S)
            _report(channel, progress, finished)
            for ref in ready:
                try:
                    _merge(result, ray.get(ref))
                except ray.exceptions.RayError as exc:
                    lost += 1
                    result.fatal = result.fatal or _worker_lost(refs[ref], exc)
        result.interrupted = stopped[0] if stopped else None
        for ref in pending:
            ray.cancel(ref, force=True)
        _report(channel, progress, finished)
        status = "complete" if not (lost or stopped) else "interrupted"
    finally:
        restore()
        ray.kill(channel)
        with wh.writer(timeout_s=math.inf, grace_s=grace_seconds()) as writer:
            record_load(writer, p, load_id, stored is not None, started, result.attempted, status)
    return result


def _stop_on_signals(stopped: list[str]):
    """While the workers run, SIGTERM and SIGINT name themselves in ``stopped``; the driver's loop tells the
    workers to drain at the first and cancels the Ray tasks at the second (committed episodes stay; those in
    flight then run again on resume). (Raising from the handler instead would surface inside Ray's wait as a
    SystemError.) Returns the restorer."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def stop(signum, _frame):
        stopped.append(signal.Signals(signum).name)

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    return lambda: [signal.signal(sig, handler) for sig, handler in old.items()]


async def _open(p: Plan, writer, start: _Start, load_id: str) -> dict:
    model_client, env_client = make_clients(p.cfg)
    async with model_client, env_client:
        return await open_run(p, writer, start, env_client, load_id)


def _report(channel, progress, finished: list[int]) -> None:
    if progress is None:
        return
    import ray

    for event in ray.get(channel.drain.remote()):
        finished[0] += event.completed
        progress(event)


def _worker_lost(index: int, exc: BaseException) -> str:
    """The run's ``fatal`` line for a worker that raised (its own error, said as it is) or died."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):  # the task raised: what it said, with what was kept
        return (f"Ray worker {index} failed: {type(cause).__name__}: {str(cause)[:500]} (what it committed is kept; "
                "fix the cause, then run the same command again to resume the rest)")
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (f"Ray worker {index} died ({type(exc).__name__}: {first[:300]}); what it committed is kept: run the same "
            "command again to resume the rest")

