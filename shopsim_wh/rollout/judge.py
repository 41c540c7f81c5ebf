"""The offline judge: ``shopsim-wh judge --rubric RUBRIC.yaml --model CONFIG`` over frozen traces (docs/judge.md).

``judge(warehouse, rubric, model, options)`` reads the episodes already in the warehouse (no new rollout), builds
one request per episode (rubric ``grain: episode``) or per step of agent ``main`` (``grain: step``), sends each
new one to an OpenAI-compatible judge with the runner's model client (:class:`.model.ChatModel`: retries,
backoff), ``concurrency`` at a time, and commits the answers to ``judge_outputs`` (one row per answer, the raw
output always kept) and ``judge_labels`` (one row per question answered) in batches.

* What the judge sees is built by the exports' SQL (sql/exports): the conversation from ``export_messages``
  (episode grain) or the decision from ``export_decisions`` (step grain), the outcome from
  ``export_episode_facts``, under the exports' privacy flags: never anything derived from the private goal; the
  persona section of a system prompt only when the rubric's ``include`` names ``persona``; recorded reasoning only
  when it names ``reasoning``.
* Idempotent and resumable: an answer is identified by (input hash, rubric sha256, judge fingerprint); one
  already stored (parsed or not) is not asked again, so a killed judge resumes where it stopped and a repeated
  one sends nothing. HTTP failures store nothing (asked again next time).
* Checked: the answer must be one JSON object ``{"labels": {question: label}, "rationale": ...}`` (a flat
  ``{question: label}`` object is accepted too) whose labels are allowed by the rubric; what is not is named in
  ``parse_error`` and the allowed part is kept.

The model config is YAML with the runner's ``model:`` section (``base_url: embedded`` = the embedded scripted
judge, model ``scripted-judge``: :mod:`shopsim_wh.sim.judge`), plus ``concurrency`` and ``dotenv``; ``--model
embedded`` is that default without a file.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from ..core.config import EMBEDDED, Model, _Strict, read_yaml_mapping, resolve_api_key
from ..core.errors import ConfigError, ModelError, ModelUnavailable, TestSplitGuard
from .model import load_model_file, model_fingerprint, model_identity

REQUEST_FORMAT = "shopsim-judge-request-v1"  # bump when the rendering of a judge request changes meaning
JUDGE_MODEL = "scripted-judge"
COMMIT_EVERY = 32
RAW_CAP = 20_000
RATIONALE_CAP = 4_000
FREE_CAP = 200
INCLUDES = ("persona", "reasoning")
EXTRA_LABELS = ("none", "other")  # allowed beside taxonomy codes in a question compared with the taxonomy


class Question(_Strict):
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="Question id: the key of its answer (and a human label's name).")
    prompt: str = Field(min_length=1, description="The question as the judge reads it.")
    labels: list[str] | None = Field(None, description="The allowed labels (null: a free label, a short phrase).")
    taxonomy: Literal["primary_failure", "category"] | None = Field(
        None, description="Compare with the rule taxonomy: the episode's `primary_failure` code or its `category`.")

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            if not v or len(set(v)) != len(v) or any(not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", x) for x in v):
                raise ValueError("labels must be a non-empty list of distinct names (letters, digits, '_', '.', '-')")
        return v


class Rubric(_Strict):
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,128}$", description="Rubric id.")
    version: str = Field(min_length=1, description="Rubric version (a string: `1`, `2024-05`, ...).")
    instructions: str = Field("You review one recorded episode of a shopping agent.",
                              description="What the judge is told first (its role and what to look for).")
    grain: Literal["episode", "step"] = Field("episode", description="Judge whole episodes or each step of agent `main`.")
    include: list[Literal["persona", "reasoning"]] = Field(
        default_factory=list, description="What the judge may see beyond the public trace (default: neither).")
    max_message_chars: int = Field(4000, ge=200, description="Each message of the trace is cut to this many characters.")
    output: Literal["json"] = Field("json", description="The answer format (JSON is the one supported).")
    questions: list[Question] = Field(min_length=1, description="The questions, each with its allowed labels.")

    @field_validator("questions")
    @classmethod
    def _distinct(cls, v: list[Question]) -> list[Question]:
        ids = [q.id for q in v]
        if len(set(ids)) != len(ids) or "rationale" in ids:
            raise ValueError("question ids must be distinct and not `rationale`")
        return v


@dataclass(frozen=True)
class LoadedRubric:
    rubric: Rubric
    sha256: str
    path: str

    def system_prompt(self) -> str:
        r = self.rubric
        lines = [r.instructions.strip(), "", "Answer every question with exactly one of its labels. Questions:"]
        for q in r.questions:
            allowed = f"[labels: {', '.join(q.labels)}]" if q.labels else "(a free label: a short phrase)"
            lines.append(f"- {q.id}: {' '.join(q.prompt.split())} {allowed}")
        example = ", ".join(f'"{q.id}": "<label>"' for q in r.questions)
        lines += ["", "Reply with one JSON object and nothing else:",
                  '{"labels": {' + example + '}, "rationale": "<one or two sentences>"}']
        return "\n".join(lines)


def load_rubric(path: str | os.PathLike) -> LoadedRubric:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the rubric {path}: {exc.strerror or exc}; pass --rubric FILE.yaml") from None
    raw = read_yaml_mapping(path)
    try:
        rubric = Rubric.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "(top level)"
        raise ConfigError(f"{path}: {where}: {err['msg']}; see docs/judge.md (rubric format)") from None
    return LoadedRubric(rubric, hashlib.sha256(data).hexdigest(), str(path))


class JudgeConfig(_Strict):
    model: Model = Field(description="The judge: the runner's `model:` keys (base_url: embedded = the scripted judge).")
    concurrency: int = Field(8, ge=1, description="Requests in flight.")
    dotenv: str | None = Field(None, description="A dotenv file (relative to this config) to read `model.api_key_env` from.")

    def api_key(self) -> str | None:
        return resolve_api_key(self.model.api_key_env, self.dotenv, "model")


def load_judge_config(spec: str | os.PathLike) -> JudgeConfig:
    """``embedded`` (the scripted judge) or a YAML file with a ``model:`` section."""
    if str(spec) == EMBEDDED:
        return JudgeConfig(model=Model(name=JUDGE_MODEL, sampling={"temperature": 0.0}))
    return load_model_file(spec, JudgeConfig, "the judge config takes `model:` (the run config's model keys), "
                           "`concurrency`, `dotenv` (docs/judge.md)")


def judge_identity(m: Model) -> dict:
    return model_identity(m, REQUEST_FORMAT)


def judge_fingerprint(m: Model) -> str:
    return model_fingerprint(m, REQUEST_FORMAT)


# --- the requests --------------------------------------------------------------------------------------------


@dataclass
class Item:
    """One judge request: the judged episode (or step) and the messages sent."""

    run_id: str
    episode_id: str
    step_idx: int | None
    messages: list[dict]
    input_hash: str = ""

    def __post_init__(self) -> None:
        canon = json.dumps(self.messages, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        self.input_hash = hashlib.sha256(canon.encode()).hexdigest()


def _cut(text: str, cap: int) -> str:
    return text if len(text) <= cap else text[:cap] + f" [... {len(text) - cap} characters cut]"


def render_message(msg: dict, cap: int, agent: str = "main") -> str:
    """One OpenAI message (as the exports write it) as a line block of the trace."""
    who = msg.get("role", "?") if agent == "main" else f"{agent}:{msg.get('role', '?')}"
    parts = []
    if msg.get("reasoning_content"):
        parts.append(f"[{who} reasoning] {_cut(str(msg['reasoning_content']), cap)}")
    content = msg.get("content")
    if content not in (None, ""):
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        parts.append(f"[{who}] {_cut(text, cap)}")
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") or {}
        args = fn.get("arguments")
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, sort_keys=True)
        parts.append(f"[{who} tool call] {fn.get('name')}({_cut(args, cap)})")
    return "\n".join(parts) if parts else f"[{who}] (empty)"


OUTCOME_FIELDS = ("status", "termination_reason", "reward", "r_success", "r_strict", "model_steps", "protocol_errors")


def _value(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return repr(round(v, 6))
    return str(v)


def _facts(con, wanted: str) -> dict[tuple[str, str], dict]:
    cols = ("run_id", "episode_id", "instruction") + OUTCOME_FIELDS
    rows = con.execute(f"SELECT {', '.join('f.' + c for c in cols)} FROM export_episode_facts AS f "
                       f"JOIN {wanted} AS w ON w.run_id = f.run_id AND w.episode_id = f.episode_id").fetchall()
    return {(r[0], r[1]): dict(zip(cols, r, strict=True)) for r in rows}


def _user_message(trace: str, facts: dict, step: str | None = None) -> str:
    out = ["## Task", str(facts.get("instruction") or "(no instruction recorded)"), "", "## Trace", trace, "",
           "## Outcome", *(f"{k}: {_value(facts.get(k))}" for k in OUTCOME_FIELDS)]
    if step is not None:
        out += ["", "## Step to judge", step]
    return "\n".join(out)


def episode_items(con, lr: LoadedRubric, wanted: str) -> list[Item]:
    """One request per wanted episode: its agents' conversations (export_messages) and outcome."""
    cap, system = lr.rubric.max_message_chars, lr.system_prompt()
    facts = _facts(con, wanted)
    rows = con.execute(
        f"SELECT m.run_id, m.episode_id, m.agent_id, CAST(m.message AS VARCHAR) FROM export_messages AS m "
        f"JOIN {wanted} AS w ON w.run_id = m.run_id AND w.episode_id = m.episode_id "
        "ORDER BY m.run_id, m.episode_id, m.agent_id <> 'main', m.agent_id, m.ord").fetchall()
    traces: dict[tuple[str, str], list[str]] = {}
    for run, ep, agent, msg in rows:
        traces.setdefault((run, ep), []).append(render_message(json.loads(msg), cap, agent))
    items = []
    for key in sorted(facts):
        user = _user_message("\n".join(traces.get(key, ["(no messages recorded)"])), facts[key])
        items.append(Item(key[0], key[1], None, [{"role": "system", "content": system},
                                                 {"role": "user", "content": user}]))
    return items


def step_items(con, lr: LoadedRubric, wanted: str) -> list[Item]:
    """One request per step of agent main of the wanted episodes: the decision as export_decisions builds it."""
    cap, system = lr.rubric.max_message_chars, lr.system_prompt()
    facts = _facts(con, wanted)
    con.execute("DELETE FROM export_decisions_wanted")
    con.execute(f"INSERT INTO export_decisions_wanted SELECT s.run_id, s.episode_id, s.agent_id, s.step_idx "
                f"FROM steps AS s JOIN {wanted} AS w ON w.run_id = s.run_id AND w.episode_id = s.episode_id "
                "WHERE s.agent_id = 'main'")
    con.execute("SET VARIABLE export_decisions_subset = true")
    rows = con.execute(
        "SELECT d.run_id, d.episode_id, d.step_idx, CAST(d.prompt AS VARCHAR[]), CAST(d.completion AS VARCHAR[]), "
        "CAST(d.observation AS VARCHAR[]), d.page, d.protocol_error, d.policy_failure FROM export_decisions AS d "
        "SEMI JOIN export_decisions_wanted AS w ON w.run_id = d.run_id AND w.episode_id = d.episode_id "
        "AND w.agent_id = d.agent_id AND w.step_idx = d.step_idx "
        "ORDER BY d.run_id, d.episode_id, d.step_idx").fetchall()
    items = []
    for run, ep, step, prompt, completion, observation, page, perr, pfail in rows:
        if (run, ep) not in facts:
            continue
        trace = "\n".join(render_message(json.loads(m), cap) for m in [*prompt, *completion, *observation])
        about = "\n".join([f"step_idx: {step}", f"page: {_value(page)}", f"protocol_error: {_value(perr)}",
                           f"policy_failure: {_value(pfail)}"])
        user = _user_message(trace, facts[(run, ep)], about)
        items.append(Item(run, ep, int(step), [{"role": "system", "content": system},
                                              {"role": "user", "content": user}]))
    return items


# --- the answers ---------------------------------------------------------------------------------------------


_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


@dataclass(frozen=True)
class Parsed:
    labels: dict[str, str]
    rationale: str | None
    error: str | None


def parse_answer(content: str | None, rubric: Rubric) -> Parsed:
    """The allowed labels of one answer, its rationale, and what was wrong with it (None: nothing)."""
    text = _FENCE.sub("", (content or "").strip())
    start, end = text.find("{"), text.rfind("}")
    try:
        doc = json.loads(text[start:end + 1]) if start >= 0 and end > start else None
    except ValueError as exc:
        return Parsed({}, None, f"not_json: the answer is not one JSON object ({exc})")
    if not isinstance(doc, dict):
        return Parsed({}, None, "not_json: the answer holds no JSON object")
    answers = doc.get("labels") if isinstance(doc.get("labels"), dict) else doc
    rationale = doc.get("rationale") if isinstance(doc.get("rationale"), str) else None
    labels: dict[str, str] = {}
    problems: list[str] = []
    for q in rubric.questions:
        value = answers.get(q.id)
        if not isinstance(value, str) or not value.strip():
            problems.append(f"missing_label: {q.id}")
        elif q.labels is not None and value.strip() not in q.labels:
            problems.append(f"invalid_label: {q.id} = {value.strip()[:80]!r} (allowed: {', '.join(q.labels)})")
        else:
            labels[q.id] = value.strip()[:FREE_CAP]
    return Parsed(labels, rationale[:RATIONALE_CAP] if rationale else None, "; ".join(problems) or None)


# --- the run ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JudgeOptions:
    """Which frozen traces :func:`judge` reads (``shopsim-wh judge``'s options)."""

    runs: list[str] | None = None  # run ids (default every run)
    where: str | None = None  # a boolean expression over the `episodes` view (sandboxed)
    limit: int | None = None  # send at most this many new requests
    allow_test: bool = False  # allow runs holding test-split episodes
    concurrency: int | None = None  # requests in flight (default: the config's)


@dataclass
class JudgeResult:
    rubric_id: str
    rubric_version: str
    rubric_sha256: str
    judge_fingerprint: str
    judge_base_url: str = ""
    grain: str = "episode"
    items: int = 0            # requests in scope
    already_judged: int = 0   # skipped: this rubric and judge answered them before
    sent: int = 0
    parsed: int = 0           # stored with every question answered
    parse_errors: int = 0     # stored with a parse_error (raw output kept)
    failed: int = 0           # HTTP failures: nothing stored, asked again next time
    label_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    unreachable: bool = False

    def as_json(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class _Judge:
    """The judge asked: its config, fingerprint and identity, the rubric, the HTTP transport."""

    cfg: JudgeConfig
    fingerprint: str
    identity: dict
    rubric: LoadedRubric
    transport: Any = None


def _select_runs(con, runs: list[str] | None, allow_test: bool) -> list[str]:
    rows = con.execute("""
        SELECT r.run_id, coalesce(r.split = 'test', false) OR coalesce(t.has_test, false)
        FROM runs AS r
        LEFT JOIN (SELECT run_id, bool_or(split = 'test') AS has_test FROM episodes GROUP BY run_id) AS t
            ON t.run_id = r.run_id
        ORDER BY r.run_id""").fetchall()
    known = dict(rows)
    if runs:
        unknown = [r for r in runs if r not in known]
        if unknown:
            raise ConfigError(f"no run {', '.join(map(repr, unknown))} in this warehouse; list them with "
                              "`shopsim-wh runs list`")
    chosen = [r for r in known if not runs or r in runs]
    test = [r for r in chosen if known[r]]
    if test and not allow_test:
        raise TestSplitGuard(f"run(s) {', '.join(test)} hold test-split episodes; judge outputs feed skill "
                             "mining, so the test split stays unseen: choose other runs with --runs, or pass --allow-test")
    return chosen


def _wanted(root, con, runs: list[str], where: str | None) -> list[tuple[str, str]]:
    if where is None:
        return con.execute("SELECT run_id, episode_id FROM episodes WHERE list_contains(?, run_id) "
                           "ORDER BY run_id, episode_id", [runs]).fetchall()
    from ..engines import sandbox

    expr = sandbox.check_expression(where, "--where")
    sb = sandbox.connect(root)
    try:
        with sandbox.limited(sb):
            return sandbox.execute(sb, f"SELECT run_id, episode_id FROM episodes WHERE list_contains(?, run_id) "
                                       f"AND {expr} ORDER BY run_id, episode_id", [runs]).fetchall()
    finally:
        sb.close()


def build_items(root, con, lr: LoadedRubric, options: JudgeOptions) -> list[Item]:
    """The requests of the traces in scope, built under the exports' privacy flags (see the module doc), on ``con``
    (a :func:`shopsim_wh.engines.db.connect` connection of ``root``; the exports' building blocks are added)."""
    from ..engines.db import install_exports

    runs = _select_runs(con, options.runs, options.allow_test)
    wanted = _wanted(root, con, runs, options.where)
    install_exports(con, views=set())  # the building blocks only (export_messages, export_decisions, ...)
    for name in ("export_window", "export_max_tokens", "export_gamma", "export_min_margin", "export_min_step_margin"):
        con.execute(f"SET VARIABLE {name} = NULL")
    con.execute("SET VARIABLE export_include_persona = ?", ["persona" in lr.rubric.include])
    con.execute("SET VARIABLE export_include_reasoning = ?", ["reasoning" in lr.rubric.include])
    con.execute("CREATE OR REPLACE TEMP TABLE export_scope (run_id VARCHAR)")
    scoped = sorted({r for r, _ in wanted})
    if scoped:
        con.executemany("INSERT INTO export_scope VALUES (?)", [[r] for r in scoped])
    con.execute("CREATE OR REPLACE TEMP TABLE judge_wanted (run_id VARCHAR, episode_id VARCHAR)")
    if wanted:
        con.executemany("INSERT INTO judge_wanted VALUES (?, ?)", [list(w) for w in wanted])
    if lr.rubric.grain == "step":
        return step_items(con, lr, "judge_wanted")
    return episode_items(con, lr, "judge_wanted")


def check_taxonomy_labels(con, rubric: Rubric) -> None:
    """A question compared with the taxonomy may use only its codes (or categories), `none` and `other`."""
    questions = [q for q in rubric.questions if q.taxonomy and q.labels]
    if not questions:
        return
    codes = {r[0] for r in con.execute("SELECT code FROM taxonomy").fetchall()}
    cats = {r[0] for r in con.execute("SELECT DISTINCT category FROM taxonomy").fetchall()}
    for q in questions:
        names = (codes if q.taxonomy == "primary_failure" else cats) | set(EXTRA_LABELS)
        unknown = [x for x in q.labels if x not in names]
        if unknown:
            raise ConfigError(f"question {q.id!r} is compared with the taxonomy's {q.taxonomy} but its label(s) "
                              f"{', '.join(unknown)} are not taxonomy names; use the codes of the `taxonomy` view "
                              f"(docs/taxonomy.md), `none` or `other`, or drop `taxonomy:` from the question")


def output_id(input_hash: str, rubric_sha256: str, fingerprint: str) -> str:
    return hashlib.sha256(f"{input_hash}:{rubric_sha256}:{fingerprint}".encode()).hexdigest()


def judge(warehouse: str | os.PathLike, rubric: LoadedRubric | str | os.PathLike,
          model: JudgeConfig | str | os.PathLike, options: JudgeOptions | None = None, *,
          progress: Callable[[int, int], None] | None = None, transport=None) -> JudgeResult:
    """Judge the selected frozen traces with ``rubric`` and store the answers (see the module doc).

    ``progress(done, total)`` is called after each answer; ``transport`` overrides the HTTP transport (tests)."""
    opts = options or JudgeOptions()
    lr = rubric if isinstance(rubric, LoadedRubric) else load_rubric(rubric)
    cfg = model if isinstance(model, JudgeConfig) else load_judge_config(model)
    t0 = time.perf_counter()
    fp, identity = judge_fingerprint(cfg.model), judge_identity(cfg.model)
    r = lr.rubric
    result = JudgeResult(r.id, r.version, lr.sha256, fp, judge_base_url=identity["base_url"], grain=r.grain)
    from ..engines.db import connect

    con = connect(warehouse)
    try:
        check_taxonomy_labels(con, r)
        items = build_items(warehouse, con, lr, opts)
        done = {row[0] for row in con.execute(
            "SELECT DISTINCT output_id FROM stg_judge_outputs WHERE rubric_sha256 = ? AND judge_fingerprint = ?",
            [lr.sha256, fp]).fetchall()}
    finally:
        con.close()
    result.items = len(items)
    todo = [i for i in items if output_id(i.input_hash, lr.sha256, fp) not in done]
    result.already_judged = len(items) - len(todo)
    if opts.limit is not None:
        todo = todo[:opts.limit]
    if todo:
        asyncio.run(_send_all(warehouse, _Judge(cfg, fp, identity, lr, transport), todo, result,
                              (opts.concurrency or cfg.concurrency, progress)))
    result.seconds = time.perf_counter() - t0
    return result


def _client(cfg: JudgeConfig, concurrency: int, transport=None):
    import httpx

    m = cfg.model
    key = cfg.api_key()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if transport is None and m.base_url == EMBEDDED:
        from ..sim.judge import app

        transport = httpx.ASGITransport(app=app)
    base = "http://embedded/v1" if m.base_url == EMBEDDED else m.base_url
    n = concurrency * 2
    return httpx.AsyncClient(base_url=base.rstrip("/") + "/", timeout=m.timeout_s, headers=headers, transport=transport,
                             trust_env=m.trust_env, limits=httpx.Limits(max_connections=n, max_keepalive_connections=n))


def _rows(item: Item, j: _Judge, out, load_id: str) -> tuple[dict, list[dict], Parsed]:
    r = j.rubric.rubric
    if out.protocol_error or out.policy_failure:
        err = out.protocol_error or out.policy_failure
        parsed = Parsed({}, None, f"model_protocol_error: {err['code']}: {err['message']}")
        raw = out.content if out.content is not None else json.dumps(out.raw, ensure_ascii=False, default=str)
    else:
        parsed = parse_answer(out.content, r)
        raw = out.content or ""
    now = datetime.now(UTC)
    oid = output_id(item.input_hash, j.rubric.sha256, j.fingerprint)
    key = {"rubric_id": r.id, "rubric_version": r.version, "rubric_sha256": j.rubric.sha256,
           "judge_fingerprint": j.fingerprint, "input_hash": item.input_hash, "episode_id": item.episode_id,
           "step_idx": item.step_idx, "output_id": oid, "created_at": now, "load_id": load_id}
    row = {**key, "grain": r.grain, "judge_model": j.identity["model"], "judge_base_url": j.identity["base_url"],
           "judge_identity": json.dumps(j.identity, sort_keys=True), "included": json.dumps(sorted(r.include)),
           "labels": json.dumps(parsed.labels, sort_keys=True, ensure_ascii=False), "rationale": parsed.rationale,
           "parse_error": parsed.error, "raw_output": raw[:RAW_CAP], "response_id": out.response_id,
           "tokens_in": out.prompt_tokens, "tokens_out": out.completion_tokens, "latency_ms": out.latency_ms}
    taxonomy = {q.id: q.taxonomy for q in r.questions}
    labels = [{**key, "question": q, "label": v, "taxonomy": taxonomy[q]} for q, v in sorted(parsed.labels.items())]
    return row, labels, parsed


async def _send_all(warehouse, j: _Judge, todo: list[Item], result: JudgeResult, how: tuple) -> None:
    from ..core.schema import to_arrow
    from ..store.warehouse import Warehouse
    from .model import ChatModel, ChatOptions

    concurrency, progress = how
    m = j.cfg.model
    load_id = f"judge.{datetime.now(UTC):%Y%m%dT%H%M%S}.{uuid.uuid4().hex[:6]}"
    started = datetime.now(UTC)
    sem = asyncio.Semaphore(concurrency)
    pending: dict[str, list] = {"judge_outputs": [], "judge_labels": []}
    touched: set[str] = set()
    run_of = {output_id(i.input_hash, j.rubric.sha256, j.fingerprint): i.run_id for i in todo}

    def flush(writer) -> None:
        batches = []
        for table, rows in pending.items():
            by_run: dict[str, list[dict]] = {}
            for row in rows:
                by_run.setdefault(run_of[row["output_id"]], []).append(row)
            batches += [(table, run, to_arrow(table, rs)) for run, rs in sorted(by_run.items())]
            touched.update(by_run)
            rows.clear()
        if batches:
            writer.commit(batches)

    async with _client(j.cfg, concurrency, j.transport) as client:
        chat = ChatModel(client, m.name, ChatOptions(
            temperature=m.sampling.temperature, top_p=m.sampling.top_p, max_tokens=m.sampling.max_tokens,
            extra_body=m.extra_body, max_retries=m.max_retries, backoff_base_s=m.retry_backoff_s),
            api_key_env=m.api_key_env)

        async def one(item: Item):
            async with sem:
                try:
                    return item, await chat.generate(item.messages, []), None
                except ModelError as exc:
                    return item, None, exc

        with Warehouse(warehouse).writer() as writer:
            tasks = [asyncio.ensure_future(one(i)) for i in todo]
            try:
                for n, fut in enumerate(asyncio.as_completed(tasks), 1):
                    item, out, exc = await fut
                    result.sent += 1
                    if exc is not None:
                        result.failed += 1
                        result.unreachable = result.unreachable or isinstance(exc, ModelUnavailable)
                        if len(result.errors) < 20:
                            result.errors.append(f"{item.run_id}/{item.episode_id}: {exc}")
                        if isinstance(exc, ModelUnavailable) and result.parsed + result.parse_errors == 0:
                            break  # nothing ever connected (after the retries): stop instead of failing each one
                    else:
                        row, labels, parsed = _rows(item, j, out, load_id)
                        if parsed.error:
                            result.parse_errors += 1
                        else:
                            result.parsed += 1
                        for q, v in parsed.labels.items():
                            counts = result.label_counts.setdefault(q, {})
                            counts[v] = counts.get(v, 0) + 1
                        pending["judge_outputs"].append(row)
                        pending["judge_labels"].extend(labels)
                        if len(pending["judge_outputs"]) >= COMMIT_EVERY:
                            flush(writer)
                    if progress:
                        progress(n, len(todo))
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                flush(writer)
                if touched:
                    writer.commit([("loads", run, to_arrow("loads", [{
                        "load_id": load_id, "command": "judge", "started_at": started,
                        "finished_at": datetime.now(UTC), "episodes_written": 0, "status": "complete",
                        "tool_version": _version()}])) for run in sorted(touched)])


def _version() -> str:
    from .. import __version__

    return __version__
