"""What one process does for a run: :func:`plan` (config -> jobs and fingerprint), the episodes of a share run
concurrently and committed in group commits (``_run_async``), the ``runs`` and ``loads`` rows.

Both executors use it: :func:`shopsim_wh.rollout.runner.run` (the local one, and the entry point) and each Ray worker of
:mod:`shopsim_wh.rollout.ray_executor`; neither imports the other's code. The guarantees (resume, re-runs, leases, signals)
are described in :mod:`shopsim_wh.rollout.runner`, which re-exports the names here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from .. import __version__
from ..core import crash
from ..core.config import EMBEDDED, Config, public_url
from ..core.errors import ConfigError, EnvUnavailable, FingerprintMismatch, TestSplitGuard, WarehouseFullError
from ..core.schema import to_arrow
from ..store.warehouse import Warehouse, Writer
from .committer import SOURCE_FORMAT, Committer
from .environment import (
    PRIMARY_REWARD,
    AdapterOptions,
    LeaseBook,
    LeaseTimeout,
    make_adapter,
    read_health,
    release,
    release_all,
)
from .jobs import EpisodeJob, SplitManifest, build_jobs, load_split_manifest, sha256_json
from .model import ChatModel, ChatOptions
from .prompts import PromptBuilder
from .runtime import ACTION_PROTOCOL, AgentRuntime, EpisodeRecord
from .skills import SkillProvider, load_skills
from .token_samples import TokenRecording

log = logging.getLogger(__name__)
EPISODE_RERUNS = 2  # re-runs from reset of an episode the environment failed (infrastructure), per run
STOP_GRACE_S = 60.0  # after the first SIGTERM / SIGINT: how long the episodes holding a lease may take to finish
LEASE_SETTLE_S = 30.0  # at the run's end: the bound on releasing owed leases and on release_all


@dataclass
class Plan:
    cfg: Config
    manifest: SplitManifest
    jobs: list[EpisodeJob]
    prompts: PromptBuilder
    skills: SkillProvider
    fingerprint_fields: dict[str, Any]
    recording: TokenRecording | None = None  # model.record_tokens; job indices of the whole run (a Ray share too)

    @property
    def fingerprint(self) -> str:
        return sha256_json(self.fingerprint_fields)[:32]

    @property
    def run_id(self) -> str:
        return self.cfg.experiment.name


def check_resume(run_id: str, stored: dict | None, new: dict) -> None:
    """Refuse to add to run ``run_id`` when its stored fingerprint fields differ from ``new`` (with the diff)."""
    if stored is not None and stored != new:
        raise FingerprintMismatch(run_id, _diff(stored, new))


def plan(cfg: Config) -> Plan:
    """Everything `run` will do, decided without touching a server."""
    if cfg.tasks.split == "test" and cfg.skills.path is not None:
        raise TestSplitGuard("a test-split run must have skills.path: null (test results never depend on a skill bank)")
    manifest = load_split_manifest(cfg.tasks.split_manifest)
    jobs = build_jobs(manifest, cfg.tasks.split, cfg.tasks.sample_size, cfg.tasks.repeats, cfg.experiment.seed)
    prompts = PromptBuilder(cfg.prompt_template)
    skills = load_skills(cfg.skills.path, cfg.skills.mask_rate, cfg.skills.mask_seed, cfg.skills.mask_rule,
                         cfg.skills.max_skills)
    env = cfg.environment
    fields = {
        "job_list_hash": sha256_json([j.as_dict() for j in jobs]),
        "experiment_seed": cfg.experiment.seed,
        "split": cfg.tasks.split,
        "split_manifest_version": manifest.version,
        "split_manifest_hash": manifest.content_hash,
        "model_name": cfg.model.name,
        "checkpoint_id": cfg.model.checkpoint_id,
        "sampling": cfg.model.sampling.model_dump(),
        "extra_body": cfg.model.extra_body,
        "environment_mode": f"embedded(seed={env.seed})" if env.url == EMBEDDED else "remote",
        "environment_dialect": env.dialect,
        "environment_persona": env.persona,
        "send_seed": cfg.model.send_seed,
        "tool_choice": cfg.model.tool_choice,
        "prompt_version": prompts.version,
        "prompt_hash": prompts.prompt_hash,
        "system_prompt_sha256": prompts.identity()["system_prompt_sha256"],
        "skill_bank_hash": skills.identity(),
        "skills_mask_rate": cfg.skills.mask_rate,
        "skills_mask_seed": cfg.skills.mask_seed,
        "skills_mask_rule": cfg.skills.mask_rule,
        "skills_max_skills": cfg.skills.max_skills,
        "max_steps": cfg.runtime.max_steps,
        "action_protocol": ACTION_PROTOCOL,
    }
    return Plan(cfg, manifest, jobs, prompts, skills, fields, TokenRecording.from_config(cfg, jobs))


def make_clients(cfg: Config) -> tuple[httpx.AsyncClient, httpx.AsyncClient]:
    """The one HTTP seam: real URLs get network clients, `embedded` gets the in-process ASGI app."""
    app = None
    if EMBEDDED in (cfg.model.base_url, cfg.environment.url):
        from ..sim.server import create_app

        app = create_app(seed=cfg.environment.seed, capacity=max(256, cfg.runtime.concurrency * 2))
    n = cfg.runtime.concurrency * 2
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)

    def client(url: str, embedded_base: str, timeout: float, trust_env: bool, headers: dict) -> httpx.AsyncClient:
        if url == EMBEDDED:
            return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=embedded_base,
                                     timeout=timeout, headers=headers)
        return httpx.AsyncClient(base_url=url, timeout=timeout, trust_env=trust_env, limits=limits, headers=headers)

    key = cfg.api_key()
    model_headers = {"Authorization": f"Bearer {key}"} if key else {}
    m, e = cfg.model, cfg.environment
    return (client(m.base_url, "http://embedded/v1", m.timeout_s, m.trust_env, model_headers),
            client(e.url, "http://embedded", e.timeout_s, e.trust_env, {}))


def config_json(cfg: Config) -> str:
    """The resolved config as stored in `runs.config`: secrets never included (only the variable name; a server
    URL without its userinfo or credential query parameters, see :func:`public_url`)."""
    doc = cfg.model_dump(mode="json")
    doc["model"]["base_url"] = public_url(doc["model"]["base_url"])
    doc["environment"]["url"] = public_url(doc["environment"]["url"])
    return json.dumps(doc, sort_keys=True)


@dataclass
class RunResult:
    run_id: str
    planned: int
    skipped: int
    attempted: int = 0
    completed: int = 0
    failed: int = 0
    seconds: float = 0.0
    fatal: str | None = None
    failures: list[str] = field(default_factory=list)
    reruns: int = 0  # episodes re-run from reset after an environment failure
    committed: int = 0  # episodes this invocation committed and acknowledged in its ledger
    interrupted: str | None = None  # "SIGTERM" / "SIGINT" when a signal stopped the run (see docs/durability.md)

    @property
    def exit_code(self) -> int:
        """What the CLI exits with: 128 + the signal's number when interrupted (130 SIGINT, 143 SIGTERM)."""
        if self.interrupted:
            return 128 + int(getattr(signal, self.interrupted))
        return 1 if (self.fatal or self.failed) else 0
    unreachable: dict[str, str] = field(default_factory=dict)  # server URL -> the first failure connecting to it
    # lost: resets whose answer was lost (each may hold a slot), reclaimed: release_all sent for them (exclusive),
    # unreleased: known leases still not released at the end (the server refused or never answered)
    leases: dict[str, int] = field(default_factory=dict)


CONNECT_ERRORS = ("ConnectError", "ConnectTimeout", "Connection refused")


def unreachable_url(cfg: Config, failure: dict) -> str | None:
    """The server an episode failure could not connect to (model or environment URL), None for other failures."""
    text = f"{failure.get('exception_type')}: {failure.get('message')}"
    if not any(k in text for k in CONNECT_ERRORS):
        return None
    url = cfg.model.base_url if failure.get("stage") == "model" else cfg.environment.url
    return None if url == EMBEDDED else url


def infrastructure_failure(rec: EpisodeRecord) -> bool:
    """True when the attempt failed because the environment gave no usable answer (re-run it from reset)."""
    from .environment import EnvServerError

    exc = rec.error
    if rec.completed or exc is None or rec.fatal is not None or isinstance(exc, LeaseTimeout):
        return False  # a full pool is not re-tried in the run (it would wait again): the next run retries it
    return isinstance(exc, EnvUnavailable) or (isinstance(exc, EnvServerError) and (exc.status >= 500 or exc.status == 409))


def _diff(stored: dict, new: dict) -> dict[str, tuple[Any, Any]]:
    return {k: (stored.get(k), new.get(k)) for k in sorted(set(stored) | set(new)) if stored.get(k) != new.get(k)}


def _existing_state(wh: Warehouse, run_id: str) -> tuple[dict | None, str | None, set[str], dict[str, int]]:
    """(stored fingerprint fields, stored environment_version, completed episode ids, last attempt per episode).

    Read from the snapshot's files directly (a few columns of three tables): an episode counts as done when
    its last attempt completed with ``done`` (what the ``episodes`` view, the last attempt, says)."""
    if not wh.exists():
        return None, None, set(), {}
    snap = wh.snapshot()
    runs = wh.read("runs", ["fingerprint_fields", "environment_version"], run_id, snap).to_pylist()
    last: dict[str, tuple[int, bool]] = {}
    for r in wh.read("episodes", ["episode_id", "attempt", "status", "done"], run_id, snap).to_pylist():
        if r["episode_id"] not in last or r["attempt"] > last[r["episode_id"]][0]:
            last[r["episode_id"]] = (r["attempt"], r["status"] == "completed" and bool(r["done"]))
    done = {eid for eid, (_, ok) in last.items() if ok}
    attempts = {eid: a for eid, (a, _) in last.items()}
    row = runs[0] if runs else None
    return (json.loads(row["fingerprint_fields"]) if row else None), (row["environment_version"] if row else None), \
        done, attempts


def make_model(cfg: Config, client: httpx.AsyncClient) -> ChatModel:
    m = cfg.model
    return ChatModel(client, m.name, ChatOptions.from_config(m), api_key_env=m.api_key_env)


def model_identity(cfg: Config) -> dict:
    """ShopSimRL's provenance.model shape (the key never appears: only the variable name is in runs.config)."""
    m = cfg.model
    return {"provider": "openai_compatible_http", "model": m.name, "base_url": public_url(m.base_url),
            "checkpoint_id": m.checkpoint_id,
            "transport": {"timeout_seconds": m.timeout_s, "max_retries": m.max_retries,
                          "retry_backoff_seconds": m.retry_backoff_s},
            "sampling": {"temperature": m.sampling.temperature, "max_tokens": m.sampling.max_tokens,
                         "top_p": m.sampling.top_p, "send_seed": m.send_seed, "tool_choice": m.tool_choice,
                         "extra_body": m.extra_body}}


@dataclass
class _Start:
    """What run() decided before the first episode (filled inside the event loop, after GET /healthz)."""

    stored: dict | None
    stored_env_version: str | None
    done: set[str]
    attempts: dict[str, int]
    allow_test: bool
    on_start: Callable[[int, int], None] | None
    on_signal: Callable[[str, int], None] | None = None
    result: RunResult | None = None
    signals: bool = True  # SIGTERM / SIGINT stop the run gracefully (False in a Ray worker: Ray owns its signals)
    ledger_part: str = ""  # a Ray worker's own ledger file: <load_id><part>.jsonl
    # a Ray worker's stand-in for the signals it cannot receive: awaited beside the episodes, it calls the
    # signal handler when its driver was signalled (then nothing new starts; what is in flight is committed)
    watch: Callable[[Callable[[signal.Signals], None]], Awaitable[None]] | None = None


async def open_run(p: Plan, writer: Writer, start: _Start, env_client: httpx.AsyncClient, load_id: str) -> dict:
    """GET /healthz; refuse another environment_version than the stored run's; write the runs row of a new run."""
    health = await read_health(env_client, p.cfg.environment.dialect)
    version = health.get("environment_version")
    if start.stored is not None and start.stored_env_version != version:
        raise ConfigError(
            f"experiment {p.run_id!r} was run against environment_version {start.stored_env_version!r}, but the "
            f"server now reports {version!r}; results would mix two environments. Use a new experiment.name "
            "or point environment.url at the original server")
    if start.stored is None:
        await asyncio.to_thread(writer.commit, [("runs", p.run_id, to_arrow("runs", [
            _runs_row(p, load_id, start.allow_test, health)]))])
    return health


async def _run_async(p: Plan, writer: Writer, start: _Start, load_id: str, concurrency: int,
                     progress: Callable[[EpisodeRecord], None] | None) -> None:
    cfg = p.cfg
    model_client, env_client = make_clients(cfg)
    async with model_client, env_client:
        health = await open_run(p, writer, start, env_client, load_id)
        todo = [j for j in p.jobs if j.episode_id not in start.done]
        result = start.result = RunResult(p.run_id, len(p.jobs), len(p.jobs) - len(todo))
        if start.on_start:
            start.on_start(len(todo), result.skipped)
        committer = Committer(writer, p.run_id, p.cfg.experiment.name, load_id, start.attempts, start.ledger_part,
                              p.recording)
        commit_task = asyncio.create_task(committer.loop())
        sem = asyncio.Semaphore(concurrency)
        model = make_model(cfg, model_client)
        primary = health.get("primary_reward") or PRIMARY_REWARD[cfg.environment.dialect]
        stop = asyncio.Event()
        tasks: list[asyncio.Task] = []
        running = [0]  # episodes started and not finished

        def abandon() -> None:  # in-flight episodes are cancelled: their leases are released, nothing is written
            stop.set()
            for t in tasks:
                t.cancel()

        committer.on_error = abandon

        env_cfg = cfg.environment
        adapter_options = AdapterOptions.from_config(env_cfg, idempotent=health.get("idempotency_keys") is True)
        book = LeaseBook()
        slots = health.get("environment_slots") if isinstance(health.get("environment_slots"), int) else None
        exclusive = env_cfg.exclusive and env_cfg.dialect == "shop_env"
        live: dict[asyncio.Task, Any] = {}  # episode task -> its adapter (which of them hold a lease)
        endpoint = "api/shop_agent"
        if exclusive:  # the server is ours alone: free what a previous run left leased
            await _bounded(release_all(env_client, endpoint, env_cfg.timeout_s), "release_all at the start")

        async def reclaim() -> None:
            """Exclusive server, lost leases filling the pool: let what holds a lease finish, then release_all."""
            if not book.gate.is_set():
                return
            book.gate.clear()
            try:
                while book.held > 0:
                    await asyncio.sleep(0.05)
                if await _bounded(release_all(env_client, endpoint, env_cfg.timeout_s), "release_all (reclaim)"):
                    book.lost, book.reclaimed = 0, book.reclaimed + 1
            finally:
                book.gate.set()

        async def settle() -> None:
            """The run's end: release what is owed; reclaim or report the leases whose id was lost."""
            owed, book.unreleased = book.unreleased, []
            for env_idx, lease_id in owed:
                await _bounded(release(env_client, endpoint, {"env_idx": env_idx, "lease_id": lease_id},
                                       env_cfg.timeout_s, book), f"release_one of slot {env_idx}")
            if book.lost and exclusive and await _bounded(release_all(env_client, endpoint, env_cfg.timeout_s),
                                                          "release_all at the end"):
                book.lost, book.reclaimed = 0, book.reclaimed + 1
            result.leases = {"lost": book.lost, "reclaimed": book.reclaimed, "unreleased": len(book.unreleased)}
            if book.lost or book.unreleased:
                log.warning("environment %s: %d reset(s) lost their answer or timed out waiting for a slot (each may "
                            "hold a slot whose lease id was never seen) and %d release(s) failed; send release_all or "
                            "restart the server when no "
                            "other client uses it, or set environment.exclusive: true if this run is its only client",
                            public_url(env_cfg.url), book.lost, len(book.unreleased))

        async def one(job: EpisodeJob) -> None:
            async with sem:
                for rerun in range(EPISODE_RERUNS + 1):
                    if stop.is_set() or not await one_attempt(job) or rerun == EPISODE_RERUNS:
                        return
                    result.reruns += 1

        async def one_attempt(job: EpisodeJob) -> bool:
            """Run one attempt and queue it for commit; True when the environment failed it (re-run it)."""
            if exclusive and slots and book.lost and book.held + book.lost >= slots:
                await reclaim()
                if stop.is_set():
                    return False
            env = make_adapter(env_cfg.dialect, env_client, adapter_options, book)
            rt = AgentRuntime(model, env, p.prompts, p.skills, cfg.runtime.max_steps, primary)
            running[0] += 1
            me = asyncio.current_task()
            live[me] = env
            try:
                rec = await rt.run(job)
            finally:
                running[0] -= 1
                live.pop(me, None)
            crash.point("runner.episode_finished")
            committer.add(rec)
            result.attempted += 1
            if rec.completed:
                result.completed += 1
            else:
                result.failed += 1
                if len(result.failures) < 20:
                    result.failures.append(f"{job.episode_id}: {rec.failure['stage']}: {rec.failure['exception_type']}: "
                                           f"{rec.failure['message'][:200]}")
                url = unreachable_url(cfg, rec.failure)
                if url is not None:
                    result.unreachable.setdefault(url, rec.failure["message"][:300])
                    if result.completed == 0 and not stop.is_set():  # down from the start: stop, don't retry 80 times
                        result.fatal = f"no connection to {url}; nothing completed, so the run stopped"
                        stop.set()
            if rec.fatal is not None and not stop.is_set():
                result.fatal = str(rec.fatal)
                stop.set()
            if progress:
                progress(rec)
            return infrastructure_failure(rec)

        def on_signal(sig: signal.Signals) -> None:
            if result.interrupted is None:  # first signal: start nothing new, finish and commit what is in flight
                result.interrupted = sig.name
                stop.set()
                waiting = [t for t, env in live.items() if not env.holds_lease]
                for t in waiting:  # still waiting for a slot (or about to): nothing done yet, nothing to commit
                    t.cancel()
                asyncio.get_running_loop().call_later(STOP_GRACE_S, abandon)  # the rest get a bounded time
                if start.on_signal:
                    start.on_signal(sig.name, running[0] - len(waiting))
            else:  # second signal: abandon the episodes in flight
                abandon()

        installed = _install_signals(asyncio.get_running_loop(), on_signal) if start.signals else []
        watcher = asyncio.create_task(start.watch(on_signal)) if start.watch else None
        try:
            tasks.extend(asyncio.create_task(one(j)) for j in todo)
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
            for o in outcomes:
                if isinstance(o, BaseException) and not isinstance(o, asyncio.CancelledError):
                    raise o
        finally:
            try:
                await settle()
            except Exception as exc:  # noqa: BLE001 - bookkeeping of leases must not hide the run's outcome
                log.warning("settling the run's environment leases failed: %s: %s", type(exc).__name__, exc)
            for sig in installed:
                asyncio.get_running_loop().remove_signal_handler(sig)
            if watcher is not None:
                watcher.cancel()
            committer.closed = True
            committer.wake.set()
            await commit_task
            result.committed = committer.committed
            if committer.error is not None:
                raise committer.error


async def _bounded(call: Awaitable, what: str, timeout_s: float = LEASE_SETTLE_S) -> bool:
    """Await a best-effort lease call within ``timeout_s``; False (and a warning) when it failed or timed out."""
    try:
        await asyncio.wait_for(call, timeout_s)
        return True
    except Exception as exc:  # noqa: BLE001 - best effort: the caller reports what is left
        log.warning("environment %s failed: %s: %s", what, type(exc).__name__, str(exc)[:300])
        return False


def _install_signals(loop: asyncio.AbstractEventLoop, handler) -> list[signal.Signals]:
    """SIGTERM and SIGINT stop the run gracefully (only possible in the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return []
    sigs = [signal.SIGTERM, signal.SIGINT]
    for sig in sigs:
        loop.add_signal_handler(sig, handler, sig)
    return sigs


def record_load(writer: Writer, p: Plan, load_id: str, resumed: bool, started: datetime, attempted: int,
                status: str) -> None:
    """The invocation's ``loads`` row, then the final compaction of the run's files."""
    try:
        writer.commit([("loads", p.run_id, to_arrow("loads", [{
            "load_id": load_id, "command": "resume" if resumed else "run", "started_at": started,
            "finished_at": datetime.now(UTC), "episodes_written": attempted, "status": status,
            "tool_version": __version__}]))])
        crash.point("runner.load_recorded")
        writer.compact(p.run_id)
    except WarehouseFullError:
        if status == "complete":
            raise
        # already failing or interrupted: the loads row is bookkeeping; the first error is what counts


def grace_seconds() -> float:
    """How long replaced files stay for readers of older snapshots: ``$SHOPSIM_WH_GRACE_S`` or 300."""
    import os

    return float(os.environ.get("SHOPSIM_WH_GRACE_S") or 300)


def _runs_row(p: Plan, load_id: str, allow_test: bool, health: dict) -> dict:
    cfg, f = p.cfg, p.fingerprint_fields
    dialect = cfg.environment.dialect
    env_identity = {"adapter": f"shopsim-wh-{dialect}", "base_url": public_url(cfg.environment.url),
                    "persona": cfg.environment.persona, "interaction_mode": "single_turn",
                    "environment_version": health.get("environment_version"),
                    "observation_version": health.get("observation_version")}
    provenance = {
        "model": model_identity(cfg), "environment": env_identity, "environment_health": health,
        "prompt": p.prompts.identity(),
        "skills": {"provider": "none"} if f["skill_bank_hash"] is None else
        {"provider": "skill_bank", "path": cfg.skills.path, "sha256": f["skill_bank_hash"], "mask_rate": cfg.skills.mask_rate},
        "runtime": {"max_steps": cfg.runtime.max_steps, "action_protocol": ACTION_PROTOCOL},
        "legacy_range_manifest": p.manifest.legacy_range,
    }
    return {
        "experiment": cfg.experiment.name, "fingerprint": p.fingerprint, "fingerprint_fields": json.dumps(f, sort_keys=True),
        "config": config_json(cfg), "created_at": datetime.now(UTC), "source_format": SOURCE_FORMAT,
        "model_name": cfg.model.name, "checkpoint_id": cfg.model.checkpoint_id, "split": cfg.tasks.split,
        "split_manifest_version": f["split_manifest_version"], "split_manifest_hash": f["split_manifest_hash"],
        "prompt_version": f["prompt_version"], "prompt_hash": f["prompt_hash"], "skill_bank_hash": f["skill_bank_hash"],
        "environment_mode": f["environment_mode"], "environment_dialect": dialect,
        "observation_fidelity": "canonical" if dialect == "shop_env" else "parsed_text",
        "action_limit": cfg.runtime.max_steps, "planned_episodes": len(p.jobs), "allow_test": allow_test,
        "tool_version": __version__, "load_id": load_id,
        "primary_reward": health.get("primary_reward") or PRIMARY_REWARD[dialect],
        "environment_version": health.get("environment_version"),
        "observation_version": health.get("observation_version"),
        "provenance": json.dumps(provenance, sort_keys=True, ensure_ascii=False),
    }
