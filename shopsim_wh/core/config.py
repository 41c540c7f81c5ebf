"""Experiment config: YAML → pydantic models (unknown keys are errors).

The keys below are the public contract (docs/config.md is generated from these models).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from . import config_import
from .config_import import read_yaml_mapping
from .errors import ConfigError
from .names import RULE, is_name

log = logging.getLogger(__name__)

EMBEDDED = "embedded"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Experiment(_Strict):
    name: str = Field(description="Experiment name; also the warehouse run_id: 1-128 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit (docs/conventions.md, Names).")
    seed: int = Field(0, description="Experiment seed: it draws `tasks.sample_size` tasks and, hashed with the task id and sample id, gives every episode its seed (ShopSimRL's rules).")
    dotenv: str | None = Field(None, description="A dotenv file (relative to the config) to read `model.api_key_env` from when that variable is not set; only that variable is read, at run time, and never stored.")

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if not is_name(v):
            raise ValueError(RULE)
        return v


class Tasks(_Strict):
    split_manifest: str | None = Field(None, description="Split file: ShopSimRL's `shopsimrl-persona-splits-v1` (checksums verified), any `splits` mapping of that runtime, or flat train/val/test lists; null = the embedded simulator's frozen persona-splits-v1 file.")
    split: str = Field("val", description="Name of the split to take tasks from (`train`, `val`, `test`, or any split the file names).")
    sample_size: int | None = Field(None, ge=1, description="Draw this many tasks with `random.Random(experiment.seed).sample` (in the order drawn); null = every task of the split in file order.")
    repeats: int = Field(1, ge=1, description="Samples per task (sample_id 0..repeats-1); episode ids are `task-{task_id:06d}__sample-{sample_id:03d}`.")


class Sampling(_Strict):
    temperature: float = Field(0.6, ge=0.0, description="Sampling temperature.")
    top_p: float | None = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling; null = not sent.")
    max_tokens: int = Field(4096, ge=1, description="Per-call generation limit; `finish_reason = length` without exactly one valid tool call ends the episode (`generation_length`).")


class Model(_Strict):
    name: str = Field(description="Model name sent to the server (`scripted-strong`, `scripted-noisy` on the embedded policy).")
    base_url: str = Field(EMBEDDED, description="OpenAI-compatible base URL ending in /v1, or `embedded` for the in-process scripted policy.")
    api_key_env: str | None = Field(None, description="Name of the environment variable holding the API key (the key itself is never stored).")
    checkpoint_id: str | None = Field(None, description="Weights identity; recorded in the fingerprint, never sent to the API.")
    sampling: Sampling = Field(default_factory=Sampling)
    extra_body: dict[str, Any] = Field(default_factory=dict, description="Extra JSON merged into every request (e.g. `chat_template_kwargs`).")
    send_seed: bool = Field(False, description="Send a per-step `seed` (episode seed + step_index - 1). The released ShopSimRL configs send none; the demo configs set true so repeated samples differ.")
    tool_choice: str = Field("auto", min_length=1, description="`tool_choice` sent with the tools (`auto`, `required`, ...).")
    trust_env: bool = Field(False, description="Let httpx use proxy environment variables (true for remote APIs behind a proxy).")
    timeout_s: float = Field(120.0, gt=0, description="Per-request timeout.")
    max_retries: int = Field(5, ge=0, description="Retries on connection errors, 408, 409, 429 and retryable 5xx.")
    retry_backoff_s: float = Field(0.5, ge=0, description="Base of the jittered exponential backoff between retries (capped at 30 s).")
    record_tokens: bool = Field(False, description="Record each model turn's token ids and logprobs (tables `model_turn_tokens`, `training_samples`, `training_tokens`, `training_spans`; docs/usage.md, Recording token ids). Each request then also asks for `return_token_ids: true` and `logprobs: true`; off, the request is unchanged. The server must return the ids: vLLM >= 0.10.2 answers `prompt_token_ids` and `choices[].token_ids` to `return_token_ids`; SGLang's chat endpoint answers `choices[].prompt_token_ids` and `choices[].token_ids` in versions that take `return_token_ids`, and older ones give the same with `return_prompt_token_ids: true, return_meta_info: true` added in `model.extra_body` (the ids and logprobs of `meta_info.output_token_logprobs`); the embedded policy answers with the built-in tokenizer. An answer without ids stops the run (exit 2).")
    tokenizer: str | None = Field(None, description="The tokenizer the recorded ids belong to, stored as `tokenizer_id`: `builtin` (= `builtin:shopsim-bytes-v1`, the embedded policy's), the path of a Hugging Face tokenizer's files (relative to the working directory; their sha256 becomes `tokenizer_hash`), or a name, kept as given; null = the built-in on the embedded policy (`base_url: embedded`), else `model.name` (vLLM and SGLang serve a model under its Hugging Face name or path by default). Only read with `record_tokens`.")


class Environment(_Strict):
    url: str = Field(EMBEDDED, description="Environment server base URL (shop_env: http://127.0.0.1:5700), or `embedded` for the in-process simulator.")
    dialect: Literal["shop_env", "pi-slime"] = Field(
        "shop_env", description="`shop_env` (ShopSimulator's shop_env server: POST /api/shop_agent with leases, observation_state, "
        "reward = r_strict) or `pi-slime` (the single-endpoint slime deployment: no observation_state, reward = r_loose).")
    persona: bool = Field(False, description="`if_persona` sent with reset: persona tasks (the user persona joins the system prompt).")
    seed: int = Field(0, description="Embedded simulator: catalog seed.")
    timeout_s: float = Field(60.0, gt=0, description="Per-request timeout (a reset's wait for a free slot is bounded by lease_timeout_s instead).")
    lease_timeout_s: float = Field(600.0, gt=0, description="How long a reset may wait for a free environment slot (the server blocks while every slot is leased); then the episode fails at stage `reset` with `LeaseTimeout` and is retried by the next run (docs/reliability.md).")
    exclusive: bool = Field(False, description="This run is the environment server's only client: it sends `release_all` at its start and end, and mid-run when leases it cannot release (reset answers lost) fill the pool. Never set it on a shared server: release_all ends every client's sessions.")
    trust_env: bool = Field(False, description="Let httpx use proxy environment variables.")


class Skills(_Strict):
    path: str | None = Field(None, description="JSON skill bank; null = no skills (required for the test split).")
    mask_rate: float = Field(0.0, ge=0.0, lt=1.0, description="Seeded probability of leaving each skill out of an episode (masked rollouts for the gate; shopsim-wh's own mode).")
    mask_seed: int | None = Field(None, description="ShopSimRL's masks instead of mask_rate: each skill's presence is a hash of (mask_seed, split, task_id, sample_id, skill id) (ShopSimRL's default seed is 20260901; docs/gate.md). null = off.")
    max_skills: int | None = Field(None, ge=1, description="At most this many skills per episode: the first in scope, global skills before task-scoped ones, before any mask (ShopSimRL's `skills.max_skills`). null = all.")
    mask_rule: Literal["gate-a", "online"] = Field("gate-a", description="With mask_seed: `gate-a` = present iff the hash's first 8 bytes < 0.5 * 2**64 (cold-start Gate A); `online` = ShopSimRL's round gates (hash mod (versions + 1) per slot; a skill with `rewrites: <id>` shares that skill's slot).")

    @field_validator("mask_seed")
    @classmethod
    def _one_mask_mode(cls, v, info):
        if v is not None and (info.data.get("mask_rate") or 0) > 0:
            raise ValueError("mask_rate and mask_seed are two masking modes; set only one (mask_rate: 0 with mask_seed)")
        return v


class Runtime(_Strict):
    max_steps: int = Field(30, ge=1, description="Model turns per episode (protocol errors count); when they run out the runtime terminates with `action_limit`.")
    concurrency: int = Field(8, ge=1, description="Episodes in flight (execution parameter: not in the fingerprint); with `executor: ray`, per Ray worker.")
    executor: Literal["local", "ray"] = Field("local", description="`local` = this process runs every episode; `ray` = the job list is split across Ray tasks (`pip install 'shopsim-wh[ray]'`), each running its share with the same runtime and committing its own batches to the warehouse (docs/scale.md, Rollouts on Ray).")
    ray_address: str | None = Field(None, description="With `executor: ray`: null = start a local Ray (or use the one this process already started); `auto` = the cluster this machine belongs to; `ray://host:10001` = a remote cluster through Ray Client.")
    ray_workers: int | None = Field(None, ge=1, description="With `executor: ray`: Ray tasks to split the job list across (one CPU each); null = the cluster's CPU count.")


class Output(_Strict):
    warehouse: str | None = Field(None, description="Warehouse directory (relative to the working directory) or s3://bucket/prefix (endpoint, region and credentials from the AWS environment variables or profile; docs/scale.md); else $SHOPSIM_WH_HOME, else ./warehouse.")
    catalog: str | None = Field(None, description="BI catalog file (a DuckDB database, relative to the working directory) that `run` rebuilds after it commits (`shopsim-wh catalog`, docs/bi.md); null = none. The warehouse's own `<warehouse>/catalog.duckdb` is refreshed whenever it exists.")


class Config(_Strict):
    experiment: Experiment
    tasks: Tasks = Field(default_factory=Tasks)
    model: Model
    environment: Environment = Field(default_factory=Environment)
    skills: Skills = Field(default_factory=Skills)
    runtime: Runtime = Field(default_factory=Runtime)
    output: Output = Field(default_factory=Output)
    prompt_template: str | None = Field(None, description="Path to a system prompt template; null = the built-in one.")

    def api_key(self) -> str | None:
        """Read the key from the named variable (else from experiment.dotenv) at call time; it is never stored."""
        return resolve_api_key(self.model.api_key_env, self.experiment.dotenv, "model")


def resolve_api_key(name: str | None, dotenv: str | None, section: str) -> str | None:
    """The API key the variable ``name`` holds (``<section>.api_key_env``), else the one the ``dotenv`` file sets,
    read at call time and never stored; None when no variable is named (a server without auth)."""
    if not name:
        return None
    key = os.environ.get(name) or (dotenv_value(dotenv, name) if dotenv else None)
    if not key:
        where = f" and {dotenv} does not set it" if dotenv else ""
        raise ConfigError(f"{section}.api_key_env names {name!r} but that environment variable is empty{where}; "
                          f"export {name}=... or set {section}.api_key_env: null for servers without auth")
    return key


def dotenv_value(path: str, name: str) -> str | None:
    """The value of ``name`` in a dotenv file (``NAME=value``, optional ``export``, quotes stripped); nothing else is read out."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(f"experiment.dotenv: {path} not found; create it or remove experiment.dotenv") from None
    value = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, raw = line.partition("=")
        if key.removeprefix("export ").strip() == name:
            value = raw.strip().strip('"').strip("'")
    return value


def _resolve(base: Path, value: str | None) -> str | None:
    if value is None or value == EMBEDDED:
        return value
    p = Path(value)
    return os.path.normpath(p if p.is_absolute() else (base / p))


def load_config(path: str | os.PathLike) -> Config:
    path = Path(path)
    raw = read_yaml_mapping(path)
    base = path.resolve().parent
    origin: dict[str, str] = {}
    try:
        original = config_import.is_original(raw)
        imported = config_import.convert(raw, base, source_name=path.stem) if original else None
    except ConfigError as exc:
        raise ConfigError(f"{path} (ShopSimRL format): {exc}") from None
    if imported is not None:  # a ShopSimRL experiment YAML, converted (docs/config_import.md)
        for note in imported.notes:
            log.warning("%s: %s", path, note)
        raw, origin = imported.config, imported.origin
    try:
        cfg = Config.model_validate(raw)
    except ValidationError as exc:
        msgs = []
        for e in exc.errors():
            key = ".".join(str(p) for p in e["loc"])
            came = next((f" (from {o})" for k, o in origin.items() if key == k or key.startswith(k + ".")), "")
            msgs.append(f"  {key}{came}: {e['msg']}")
        raise ConfigError(f"{path} has invalid settings:\n" + "\n".join(msgs)) from None
    cfg.tasks.split_manifest = _resolve(base, cfg.tasks.split_manifest)
    cfg.skills.path = _resolve(base, cfg.skills.path)
    cfg.prompt_template = _resolve(base, cfg.prompt_template)
    cfg.experiment.dotenv = _resolve(base, cfg.experiment.dotenv)
    if cfg.experiment.dotenv and not Path(cfg.experiment.dotenv).is_file():
        raise ConfigError(f"{path}: experiment.dotenv: {cfg.experiment.dotenv} not found; create it or remove the key")
    return cfg


_SECRET_PARAM = re.compile(r"key|token|secret|passw|auth|sig", re.IGNORECASE)


def public_url(url: str) -> str:
    """``url`` as the run records it (runs.config, runs.provenance, a dump's ``provenance.*.base_url``): no
    ``user:password@``, no query parameter named like a credential, no trailing slash; ``embedded`` as it is."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    if url == EMBEDDED:
        return url
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if not _SECRET_PARAM.search(k)])
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), query, ""))
