"""Evaluator: config → plan (jobs + fingerprint) → concurrent episodes → batched atomic commits.

* ``plan(cfg)`` validates everything without calling any server.
* ``run(cfg, ...)`` refuses a fingerprint change under an existing experiment name, guards the test
  split, skips exactly the episodes already completed with ``done`` and re-runs failed ones (as a new
  ``attempt``), runs episodes with asyncio concurrency and commits finished episodes in group
  commits (whatever finished while the previous commit was being written), so a crash loses at most
  the episodes in flight. A finished run's files are compacted into few large ones.
* an episode that failed because the environment gave no usable answer (:class:`EnvUnavailable`, or a
  5xx / 409 of its own) is re-run from reset up to ``EPISODE_RERUNS`` times in the same run; every failed
  try stays an attempt with its ``failures`` row (docs/reliability.md). A model 401/403/404/400/422 stops
  the run (the message says what to check).
* nothing waits without a bound (docs/reliability.md, "Leases and time limits"): every model and environment
  request has its timeout and a bounded number of retries, a reset waits at most ``environment.lease_timeout_s``
  for a slot, every lease is released (owed releases are tried again at the end), leases whose id was lost are
  counted and, with ``environment.exclusive``, reclaimed with ``release_all``; after the first SIGTERM / SIGINT
  the episodes still waiting for a slot are cancelled and the others get ``STOP_GRACE_S`` to finish.

This module is the entry point, :func:`run`, which picks the executor: in this process, or on Ray
(:mod:`shopsim_wh.rollout.ray_executor`). What one process does for a run (plan, the episode loop, the runs / loads rows)
is in :mod:`shopsim_wh.rollout.execution`, used by both executors and re-exported here.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from ..core.config import EMBEDDED, Config
from ..core.errors import ConfigError, TestSplitGuard, WarehouseFullError
from ..store.runlock import experiment_lock
from ..store.warehouse import Warehouse
from .environment import make_adapter  # noqa: F401  (re-exported: bench/bench_runner.py)
from .execution import (  # noqa: F401  (config_json, make_clients, make_model: re-exported for tests and bench/)
    RunResult,
    _existing_state,
    _run_async,
    _Start,
    check_resume,
    config_json,
    grace_seconds,
    make_clients,
    make_model,
    plan,
    record_load,
)
from .runtime import EpisodeRecord

log = logging.getLogger(__name__)


# Every config field, classified once. A test walks the Config models and fails on a field in neither set.
# SEMANTIC: what an episode does or means; each feeds the fingerprint key(s) named, and a resume that changes
#   it is refused (FingerprintMismatch with the diff). A file path counts by content: moving a split manifest,
#   skill bank or prompt template with the same bytes changes nothing.
# EXECUTION: how, where and how fast it runs; not in the fingerprint, a resume may change it.
# experiment.name is the run id itself: a new name is a new run, not a change to this one.
SEMANTIC_FIELDS: dict[str, tuple[str, ...]] = {
    "experiment.seed": ("experiment_seed", "job_list_hash"),
    "tasks.split_manifest": ("split_manifest_hash",),
    "tasks.split": ("split", "job_list_hash"),
    "tasks.sample_size": ("job_list_hash",),
    "tasks.repeats": ("job_list_hash",),
    "model.name": ("model_name",),
    "model.checkpoint_id": ("checkpoint_id",),
    "model.sampling.temperature": ("sampling",),
    "model.sampling.top_p": ("sampling",),
    "model.sampling.max_tokens": ("sampling",),
    "model.extra_body": ("extra_body",),
    "model.send_seed": ("send_seed",),
    "model.tool_choice": ("tool_choice",),
    "environment.url": ("environment_mode",),  # embedded vs remote; one remote URL for another is execution
    "environment.seed": ("environment_mode",),  # the embedded catalog's seed
    "environment.dialect": ("environment_dialect",),
    "environment.persona": ("environment_persona",),
    "skills.path": ("skill_bank_hash",),
    "skills.mask_rate": ("skills_mask_rate",),
    "skills.mask_seed": ("skills_mask_seed",),
    "skills.mask_rule": ("skills_mask_rule",),
    "skills.max_skills": ("skills_max_skills",),
    "runtime.max_steps": ("max_steps",),
    "prompt_template": ("prompt_hash", "system_prompt_sha256"),
}
EXECUTION_FIELDS: frozenset[str] = frozenset({
    "experiment.dotenv", "model.base_url", "model.api_key_env", "model.trust_env", "model.timeout_s",
    "model.max_retries", "model.retry_backoff_s", "environment.timeout_s", "environment.trust_env",
    "environment.lease_timeout_s", "environment.exclusive", "model.record_tokens", "model.tokenizer",
    "runtime.concurrency", "runtime.executor", "runtime.ray_address", "runtime.ray_workers", "output.warehouse",
    "output.catalog",
})
IDENTITY_FIELDS: frozenset[str] = frozenset({"experiment.name"})


def run(cfg: Config, warehouse: str | None = None, concurrency: int | None = None, allow_test: bool = False,
        progress: Callable[[EpisodeRecord], None] | None = None, on_start: Callable[[int, int], None] | None = None,
        on_signal: Callable[[str, int], None] | None = None) -> RunResult:
    """Run or resume ``cfg``. SIGTERM / SIGINT (in the main thread) stop it gracefully: nothing new starts, the
    episodes in flight finish and are committed (a second signal abandons them), ``result.interrupted`` names
    the signal and the run resumes with the same command. ``on_signal(name, in_flight)`` is told at once."""
    from ..store.warehouse import default_root

    p = plan(cfg)
    if cfg.tasks.split == "test" and not allow_test:
        raise TestSplitGuard("tasks.split is 'test': pass --allow-test to run it (checkpoint selection must use train/val only)")
    wh = Warehouse(default_root(warehouse, cfg.output.warehouse))
    t0 = time.perf_counter()
    load_id = f"{p.run_id}.{datetime.now(UTC):%Y%m%dT%H%M%S}.{uuid.uuid4().hex[:6]}"
    started = datetime.now(UTC)
    if cfg.runtime.executor == "ray":
        from .ray_executor import RunHooks, run_on_ray

        with experiment_lock(wh, p.run_id):
            result = run_on_ray(p, wh, load_id, concurrency or cfg.runtime.concurrency, allow_test,
                                RunHooks(progress, on_start, on_signal))
        result.seconds = time.perf_counter() - t0
        return result
    with experiment_lock(wh, p.run_id), wh.writer(grace_s=grace_seconds()) as writer:
        stored, stored_env, done, attempts = _existing_state(wh, p.run_id)
        check_resume(p.run_id, stored, p.fingerprint_fields)
        start = _Start(stored, stored_env, done, attempts, allow_test, on_start, on_signal)
        status = "interrupted"
        try:
            asyncio.run(_run_async(p, writer, start, load_id, concurrency or cfg.runtime.concurrency, progress))
            status = "interrupted" if start.result.interrupted else "complete"
        except WarehouseFullError as exc:
            n = start.result.committed if start.result else 0
            raise WarehouseFullError(f"run {p.run_id!r}: {n} episode(s) of this invocation were committed before the "
                                     f"disk filled ({len(done) + n} of {len(p.jobs)} planned are stored). {exc}") from exc
        finally:
            result = start.result
            if result is not None:  # the run started (health read, runs row written): record this load
                record_load(writer, p, load_id, stored is not None, started, result.attempted, status)
    result.seconds = time.perf_counter() - t0
    return result


def check_config_usable(cfg: Config) -> None:
    """Cheap checks `plan` does beyond pydantic (used by the CLI before printing the plan)."""
    if cfg.model.base_url != EMBEDDED and not cfg.model.base_url.startswith(("http://", "https://")):
        raise ConfigError(f"model.base_url {cfg.model.base_url!r}: use an http(s) URL ending in /v1, or `embedded`")
    if cfg.environment.url != EMBEDDED and not cfg.environment.url.startswith(("http://", "https://")):
        raise ConfigError(f"environment.url {cfg.environment.url!r}: use an http(s) URL, or `embedded`")
