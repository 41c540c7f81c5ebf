"""The LLM builder of ``shopsim-wh skills mine --builder llm`` (docs/skills.md): one model request per failure
mechanism cluster, asking for one skill as a JSON object with ShopSimRL's chunk fields.

:func:`build_requests` renders a cluster's evidence (the episodes of its failure and success channels, as the rules
builder found them) with the exports' SQL building blocks, exactly as the offline judge does
(:mod:`.judge`): the public conversation from ``export_messages`` and the outcome from ``export_episode_facts``,
with the persona section and recorded reasoning left out (``export_include_persona`` / ``_reasoning`` false) and
nothing derived from the private goal. No episode id (it holds a task id) is sent. The size is capped: at most
:data:`SHOWN_FAILING` failing and :data:`SHOWN_SUCCEEDING` succeeding episodes, each message cut to
:data:`MESSAGE_CAP` characters and each episode's trace to :data:`EPISODE_CAP` (its head and tail kept).

:func:`ask` sends the requests through the runner's model client (:class:`.model.ChatModel`: retries, backoff),
``concurrency`` at a time, and :func:`parse_skill` checks each answer: one JSON object (a ```json fence around
it is fine) with ``title``, ``applicable_when``, ``verification``, ``common_failure`` (non-empty strings) and
``procedure`` (a non-empty list of non-empty strings). A malformed answer or an HTTP failure is an
:class:`Answer` with an ``error``, never an exception.

The model config is the judge's (:func:`.judge.load_judge_config`: the run config's ``model:`` section,
``concurrency``, ``dotenv``); there is no scripted skill writer, so ``embedded`` is refused. The builder's
fingerprint covers what the judge's does, with this module's request format.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
from dataclasses import dataclass

from ..core.config import EMBEDDED
from ..core.errors import ConfigError, ModelError, ModelUnavailable
from .judge import OUTCOME_FIELDS, JudgeConfig, judge_identity, load_judge_config, render_message

REQUEST_FORMAT = "shopsim-skill-request-v1"  # bump when the rendering of a request changes meaning
FIELDS = ("title", "applicable_when", "procedure", "verification", "common_failure")
SHOWN_FAILING = 3
SHOWN_SUCCEEDING = 2
MESSAGE_CAP = 1200
EPISODE_CAP = 6000
RAW_CAP = 20_000
FIELD_CAP = 600
MAX_STEPS = 12

SYSTEM = """You write skills for a shopping agent that works in a web shop through tools (search, click, buy).
A skill is short, general advice injected into the agent's prompt on every task.

Below are recorded episodes that failed by one failure mechanism, and episodes that succeeded. Write ONE skill
that would prevent this kind of failure on any task. It must be general: never copy a product title, a brand, an
option value, a price, a product id (ASIN), a task id or any other detail of these particular episodes.

Reply with one JSON object and nothing else:
{"title": "<an imperative, at most ten words>",
 "applicable_when": "<when the skill applies>",
 "procedure": ["<step 1>", "<step 2>", "<at most six steps>"],
 "verification": "<how the agent checks that it worked>",
 "common_failure": "<the mistake the skill prevents>"}"""
PROMPT_VERSION = hashlib.sha256(f"{REQUEST_FORMAT}\n{SYSTEM}".encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Cluster:
    """One failure mechanism and its evidence refs ({run_id, episode_id, step_idx}), as the rules builder found."""

    mechanism: str
    codes: tuple[str, ...]
    positive: tuple[dict, ...]
    negative: tuple[dict, ...]


@dataclass(frozen=True)
class Request:
    cluster: Cluster
    messages: tuple[dict, ...]
    input_hash: str


@dataclass(frozen=True)
class Answer:
    """A cluster's answer: ``skill`` (the chunk fields, ``procedure`` a tuple) or ``error`` (why not)."""

    request: Request
    skill: dict | None
    raw: str | None
    error: str | None
    unreachable: bool = False


def load_builder_config(spec: str | os.PathLike) -> JudgeConfig:
    """The model config (YAML with the run config's ``model:`` section); ``embedded`` has no skill writer."""
    if str(spec) == EMBEDDED:
        raise ConfigError("--model embedded has no scripted skill writer; pass a model config (YAML with a `model:` "
                          "section, docs/skills.md) or use --builder rules")
    return load_judge_config(spec)


def builder_identity(cfg: JudgeConfig) -> dict:
    """What the builder's fingerprint covers (the judge's identity with this module's request format; no key)."""
    return {**judge_identity(cfg.model), "request_format": REQUEST_FORMAT}


def builder_fingerprint(cfg: JudgeConfig) -> str:
    return hashlib.sha256(json.dumps(builder_identity(cfg), sort_keys=True).encode()).hexdigest()


# --- the requests --------------------------------------------------------------------------------------------


def _cut_middle(text: str, cap: int) -> str:
    if len(text) <= cap:
        return text
    head = cap // 3
    return f"{text[:head]}\n[... {len(text) - cap} characters cut ...]\n{text[len(text) - (cap - head):]}"


def _install(con, runs: list[str]) -> None:
    """The exports' building blocks over ``runs``, with no persona and no reasoning (as the judge's default)."""
    from ..engines.db import install_exports

    install_exports(con, views=set())
    for name in ("export_window", "export_max_tokens", "export_gamma", "export_min_margin", "export_min_step_margin"):
        con.execute(f"SET VARIABLE {name} = NULL")
    con.execute("SET VARIABLE export_include_persona = false")
    con.execute("SET VARIABLE export_include_reasoning = false")
    con.execute("CREATE OR REPLACE TEMP TABLE export_scope (run_id VARCHAR)")
    if runs:
        con.executemany("INSERT INTO export_scope VALUES (?)", [[r] for r in runs])


def _episodes(con, keys: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Each episode's public trace and outcome, rendered (a block of text per episode)."""
    con.execute("CREATE OR REPLACE TEMP TABLE skill_writer_wanted (run_id VARCHAR, episode_id VARCHAR)")
    if keys:
        con.executemany("INSERT INTO skill_writer_wanted VALUES (?, ?)", [list(k) for k in keys])
    cols = ("run_id", "episode_id", "instruction") + OUTCOME_FIELDS
    facts = {(r[0], r[1]): dict(zip(cols, r, strict=True)) for r in con.execute(
        f"SELECT {', '.join('f.' + c for c in cols)} FROM export_episode_facts AS f SEMI JOIN skill_writer_wanted "
        "AS w ON w.run_id = f.run_id AND w.episode_id = f.episode_id").fetchall()}
    traces: dict[tuple[str, str], list[str]] = {}
    for run, ep, agent, msg in con.execute(
            "SELECT m.run_id, m.episode_id, m.agent_id, CAST(m.message AS VARCHAR) FROM export_messages AS m "
            "SEMI JOIN skill_writer_wanted AS w ON w.run_id = m.run_id AND w.episode_id = m.episode_id "
            "ORDER BY m.run_id, m.episode_id, m.agent_id <> 'main', m.agent_id, m.ord").fetchall():
        traces.setdefault((run, ep), []).append(render_message(json.loads(msg), MESSAGE_CAP, agent))
    out = {}
    for key, f in facts.items():
        trace = _cut_middle("\n".join(traces.get(key, ["(no messages recorded)"])), EPISODE_CAP)
        outcome = "\n".join(f"{k}: {'NULL' if f[k] is None else f[k]}" for k in OUTCOME_FIELDS)
        out[key] = f"#### Task\n{f['instruction'] or '(no instruction recorded)'}\n#### Trace\n{trace}\n" \
                   f"#### Outcome\n{outcome}"
    return out


def _channel(title: str, refs: tuple[dict, ...], shown: int, rendered: dict) -> list[str]:
    keys = [(r["run_id"], r["episode_id"]) for r in refs if (r["run_id"], r["episode_id"]) in rendered][:shown]
    if not keys:
        return [f"## {title} episodes", "(none recorded)"]
    out = [f"## {title} episodes (showing {len(keys)} of {len(refs)})"]
    for i, key in enumerate(keys, 1):
        out += ["", f"### {title} episode {i}", rendered[key]]
    return out


def build_requests(con, clusters: list[Cluster]) -> list[Request]:
    """One request per cluster, on ``con`` (a :func:`shopsim_wh.engines.db.connect` connection; the exports'
    building blocks are added to it), built under the exports' privacy rules (see the module doc)."""
    runs = sorted({r["run_id"] for c in clusters for r in (*c.positive, *c.negative)})
    _install(con, runs)
    keys = sorted({(r["run_id"], r["episode_id"]) for c in clusters
                   for r in (*c.negative[:SHOWN_FAILING], *c.positive[:SHOWN_SUCCEEDING])})
    rendered = _episodes(con, keys)
    out = []
    for c in clusters:
        user = "\n".join([f"## Failure mechanism\n{c.mechanism} (rule labels: {', '.join(c.codes)})", "",
                          *_channel("Failing", c.negative, SHOWN_FAILING, rendered), "",
                          *_channel("Succeeding", c.positive, SHOWN_SUCCEEDING, rendered)])
        messages = ({"role": "system", "content": SYSTEM}, {"role": "user", "content": user})
        canon = json.dumps(messages, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        out.append(Request(c, messages, hashlib.sha256(canon.encode()).hexdigest()))
    return out


# --- the answers -----------------------------------------------------------------------------------------------

_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


def _text(value, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"missing_field: {name} is not a non-empty string")
    return " ".join(value.split())[:FIELD_CAP]


def parse_skill(content: str | None) -> tuple[dict | None, str | None]:
    """(the skill's chunk fields, None) or (None, why the answer is not one skill)."""
    text = _FENCE.sub("", (content or "").strip())
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None, "not_json: the answer holds no JSON object"
    try:
        doc = json.loads(text[start:end + 1])
    except ValueError as exc:
        return None, f"not_json: the answer is not one JSON object ({exc})"
    if not isinstance(doc, dict):
        return None, "not_json: the answer holds no JSON object"
    try:
        skill = {k: _text(doc.get(k), k) for k in FIELDS if k != "procedure"}
        steps = doc.get("procedure")
        if not isinstance(steps, list) or not steps:
            raise ValueError("missing_field: procedure is not a non-empty list of steps")
        skill["procedure"] = tuple(_text(s, f"procedure[{i}]") for i, s in enumerate(steps[:MAX_STEPS]))
    except ValueError as exc:
        return None, str(exc)
    return skill, None


# --- the run ---------------------------------------------------------------------------------------------------


def ask(cfg: JudgeConfig, requests: list[Request], transport=None) -> list[Answer]:
    """Send the requests (``cfg.concurrency`` at a time) and check each answer; in the requests' order."""
    if not requests:
        return []
    return asyncio.run(_ask_all(cfg, requests, transport))


async def _ask_all(cfg: JudgeConfig, requests: list[Request], transport) -> list[Answer]:
    from .judge import _client
    from .model import ChatModel, ChatOptions

    m = cfg.model
    sem = asyncio.Semaphore(cfg.concurrency)
    async with _client(cfg, cfg.concurrency, transport) as client:
        chat = ChatModel(client, m.name, ChatOptions(
            temperature=m.sampling.temperature, top_p=m.sampling.top_p, max_tokens=m.sampling.max_tokens,
            extra_body=m.extra_body, max_retries=m.max_retries, backoff_base_s=m.retry_backoff_s),
            api_key_env=m.api_key_env)

        async def one(req: Request) -> Answer:
            async with sem:
                try:
                    out = await chat.generate(list(req.messages), [])
                except ModelError as exc:
                    return Answer(req, None, None, f"request_failed: {exc}", isinstance(exc, ModelUnavailable))
            if out.protocol_error or out.policy_failure:
                err = out.protocol_error or out.policy_failure
                raw = out.content if out.content is not None else json.dumps(out.raw, ensure_ascii=False, default=str)
                return Answer(req, None, raw[:RAW_CAP], f"model_protocol_error: {err['code']}: {err['message']}")
            skill, error = parse_skill(out.content)
            return Answer(req, skill, (out.content or "")[:RAW_CAP], error)

        return list(await asyncio.gather(*(one(r) for r in requests)))
