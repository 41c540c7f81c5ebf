"""Trajectory-grounded synthetic reasoning: send `reasoning-requests` to a teacher, store what it answers.

``synthesize(warehouse, teacher)`` reads the rows of the ``reasoning-requests`` export kind (one request per
decision: the state, the recorded action and the outcome as a constraint; sql/exports/reasoning-requests.sql),
sends each distinct request once to an OpenAI-compatible teacher with the runner's model client
(:class:`shopsim_wh.rollout.model.ChatModel`: retries, backoff), ``concurrency`` at a time, and commits the answers
to the ``synthetic_reasoning`` table through the warehouse writer, in batches, with the teacher's provenance.

* Idempotent per (request, teacher): a request is identified by ``request_hash`` (md5 of the messages) and
  the teacher by ``teacher_fingerprint`` (sha256 over model, base URL, sampling, extra_body and
  :data:`REQUEST_FORMAT`). A request already answered by that teacher (accepted or rejected) is not sent
  again, so an interrupted run resumes where it stopped and a repeated run sends nothing.
* Checked: the answer must be one JSON object ``{"reasoning": str, "action": {"name", "arguments"}}`` whose
  action equals the recorded one (name and decoded arguments). Anything else is stored with verdict
  ``rejected`` and a ``reject_reason`` (``unreadable_answer``, ``missing_reasoning``, ``action_mismatch``,
  ``model_protocol_error``); only accepted answers reach the ``sft-reasoning`` kind.
* HTTP failures (server down after the retries, a 4xx) store nothing: the request is sent again next time.
* Private by construction: requests are built by SQL under the default export flags (no persona, no recorded
  reasoning) from views that hold nothing derived from the private goal.

The teacher config is YAML: ``teacher:`` takes the keys of the runner's ``model:`` section (``base_url:
embedded`` = the embedded scripted teacher, model ``scripted-teacher``), plus ``concurrency`` and ``dotenv``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import Field

from ..core.config import EMBEDDED, Model, _Strict, resolve_api_key
from ..core.errors import ModelError, ModelUnavailable
from ..rollout.model import load_model_file, model_fingerprint, model_identity

REQUEST_FORMAT = "shopsim-reasoning-request-v1"  # bump when sql/exports/reasoning-requests.sql changes meaning
KIND = "reasoning-requests"
COMMIT_EVERY = 64
RAW_CAP = 20_000


class TeacherConfig(_Strict):
    teacher: Model = Field(description="The teacher: the runner's `model:` keys (name, base_url, api_key_env, sampling, extra_body, retries).")
    concurrency: int = Field(8, ge=1, description="Requests in flight.")
    dotenv: str | None = Field(None, description="A dotenv file (relative to this config) to read `teacher.api_key_env` from when that variable is not set.")

    def api_key(self) -> str | None:
        return resolve_api_key(self.teacher.api_key_env, self.dotenv, "teacher")


def load_teacher(path: str | os.PathLike) -> TeacherConfig:
    return load_model_file(path, TeacherConfig, "see docs/export_rl.md (synthetic reasoning) for the keys")


def teacher_identity(t: Model) -> dict:
    return model_identity(t, REQUEST_FORMAT)


def teacher_fingerprint(t: Model) -> str:
    return model_fingerprint(t, REQUEST_FORMAT)


@dataclass
class SynthResult:
    teacher_fingerprint: str
    requests: int = 0           # distinct requests selected
    already_answered: int = 0   # skipped: answered by this teacher before
    sent: int = 0
    accepted: int = 0
    rejected: int = 0
    failed: int = 0             # HTTP failures: nothing stored, sent again next time
    errors: list[str] = field(default_factory=list)
    reject_reasons: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    unreachable: bool = False
    teacher_base_url: str = ""

    def as_json(self) -> dict:
        return dict(self.__dict__)


_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


def judge(content: str | None, action_name: str, action_arguments: Any) -> tuple[str, str | None, str | None, str | None]:
    """(verdict, reject_reason, reasoning, answer_action JSON) of one teacher answer."""
    text = _FENCE.sub("", (content or "").strip())
    start, end = text.find("{"), text.rfind("}")
    try:
        doc = json.loads(text[start:end + 1]) if start >= 0 else None
    except ValueError as exc:
        return "rejected", f"unreadable_answer: not one JSON object ({exc})", None, None
    if not isinstance(doc, dict):
        return "rejected", "unreadable_answer: the answer holds no JSON object", None, None
    reasoning = doc.get("reasoning")
    action = doc.get("action") if isinstance(doc.get("action"), dict) else {}
    args = action.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    answer_action = json.dumps({"name": action.get("name"), "arguments": args}, ensure_ascii=False, sort_keys=True)
    if not isinstance(reasoning, str) or not reasoning.strip():
        return "rejected", "missing_reasoning: the answer has no non-empty `reasoning`", None, answer_action
    if action.get("name") != action_name or args != action_arguments:
        recorded = json.dumps({"name": action_name, "arguments": action_arguments}, ensure_ascii=False, sort_keys=True)
        return ("rejected", f"action_mismatch: the answer ends with {answer_action} but the recorded action is {recorded}",
                reasoning, answer_action)
    return "accepted", None, reasoning, answer_action


def select_requests(con, where: str | None = None) -> list[dict]:
    """Distinct requests of the kind's view in scope (first decision of each request_hash as lineage); ``where``
    is checked like an export's --where (only the kind's filter columns), None = the kind's default."""
    from ..export import get_kind
    from ..export.scope import where_clause

    expr, _ = where_clause(con, get_kind(KIND), where)
    sql = (f"SELECT request_hash, run_id, episode_id, agent_id, step_idx, messages, action_name, action_arguments "
           f"FROM {get_kind(KIND).view} {f'WHERE ({expr})' if expr else ''} "
           "QUALIFY row_number() OVER (PARTITION BY request_hash ORDER BY run_id, episode_id, agent_id, step_idx) = 1 "
           "ORDER BY run_id, episode_id, agent_id, step_idx")
    cur = con.execute(sql)
    cols = [d[0] for d in cur.description]
    out = []
    for row in cur.fetchall():
        r = dict(zip(cols, row, strict=True))
        r["messages"] = [json.loads(m) for m in r["messages"]]
        r["action_arguments"] = json.loads(r["action_arguments"])
        out.append(r)
    return out


def _client(cfg: TeacherConfig, transport=None):
    import httpx

    t = cfg.teacher
    key = cfg.api_key()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if transport is None and t.base_url == EMBEDDED:
        from ..sim.server import create_app

        transport = httpx.ASGITransport(app=create_app())
    base = "http://embedded/v1" if t.base_url == EMBEDDED else t.base_url
    n = cfg.concurrency * 2
    return httpx.AsyncClient(base_url=base.rstrip("/") + "/", timeout=t.timeout_s, headers=headers, transport=transport,
                             trust_env=t.trust_env, limits=httpx.Limits(max_connections=n, max_keepalive_connections=n))


def _row(req: dict, fp: str, identity: dict, out, verdict: tuple, load_id: str) -> dict:
    status, reason, reasoning, answer_action = verdict
    return {"request_hash": req["request_hash"], "teacher_fingerprint": fp, "teacher_model": identity["model"],
            "teacher_base_url": identity["base_url"], "teacher_identity": json.dumps(identity, sort_keys=True),
            "episode_id": req["episode_id"], "agent_id": req["agent_id"], "step_idx": req["step_idx"],
            "verdict": status, "reject_reason": reason, "reasoning": reasoning, "answer_action": answer_action,
            "raw_answer": (out.content or "")[:RAW_CAP] if out is not None else None,
            "response_id": getattr(out, "response_id", None), "tokens_in": getattr(out, "prompt_tokens", None),
            "tokens_out": getattr(out, "completion_tokens", None), "latency_ms": getattr(out, "latency_ms", None),
            "created_at": datetime.now(UTC), "load_id": load_id}


@dataclass(frozen=True)
class SynthOptions:
    """Which reasoning requests :func:`synthesize` sends, and how many at a time (``synth-reasoning``'s options)."""

    runs: list[str] | None = None  # run ids to read (default every run)
    experiment: str | None = None  # only the runs of this experiment
    where: str | None = None  # over the kind's filter columns (default: status = 'completed' AND success)
    limit: int | None = None  # send at most this many new requests
    allow_test: bool = False  # allow runs holding test-split episodes
    concurrency: int | None = None  # requests in flight (default: the teacher config's)


@dataclass(frozen=True)
class _Teacher:
    """The teacher asked: its config, its fingerprint and identity (stored with each answer), the HTTP transport."""

    cfg: TeacherConfig
    fingerprint: str
    identity: dict
    transport: Any = None  # None: the network (or the embedded teacher)


def synthesize(warehouse: str | os.PathLike, teacher: TeacherConfig | str | os.PathLike,
               options: SynthOptions | None = None, *, progress: Callable[[int, int], None] | None = None,
               transport=None) -> SynthResult:
    """Send the selected runs' reasoning requests to ``teacher`` and store the answers (see the module doc).

    ``options`` (default ``SynthOptions()``) select the requests; ``progress(done, total)`` is called after each
    answer; ``transport`` overrides the HTTP transport (tests).
    """
    opts = options or SynthOptions()
    from ..engines.db import connect, install_exports
    from ..export.scope import bind_params, select_runs

    cfg = teacher if isinstance(teacher, TeacherConfig) else load_teacher(teacher)
    t0 = time.perf_counter()
    fp, identity = teacher_fingerprint(cfg.teacher), teacher_identity(cfg.teacher)
    result = SynthResult(fp, teacher_base_url=identity["base_url"])
    con = connect(warehouse)
    try:
        install_exports(con)
        bind_params(con, {})  # the default flags: no persona, no recorded reasoning ever reaches a teacher
        select_runs(con, opts.runs, opts.experiment, opts.allow_test)
        requests = select_requests(con, opts.where)
        done = {r[0] for r in con.execute(
            "SELECT DISTINCT request_hash FROM synthetic_reasoning WHERE teacher_fingerprint = ?", [fp]).fetchall()}
    finally:
        con.close()
    result.requests = len(requests)
    todo = [r for r in requests if r["request_hash"] not in done]
    result.already_answered = len(requests) - len(todo)
    if opts.limit is not None:
        todo = todo[:opts.limit]
    if todo:
        asyncio.run(_send_all(warehouse, _Teacher(cfg, fp, identity, transport), todo, result,
                              opts.concurrency or cfg.concurrency, progress))
    result.seconds = time.perf_counter() - t0
    return result


async def _send_all(warehouse, teacher: _Teacher, todo: list[dict], result: SynthResult, concurrency: int,
                    progress) -> None:
    from ..core.schema import to_arrow
    from ..rollout.model import ChatModel, ChatOptions
    from ..store.warehouse import Warehouse

    cfg, fp, identity, transport = teacher.cfg, teacher.fingerprint, teacher.identity, teacher.transport
    t = cfg.teacher
    load_id = f"synth-reasoning.{datetime.now(UTC):%Y%m%dT%H%M%S}.{uuid.uuid4().hex[:6]}"
    started = datetime.now(UTC)
    sem = asyncio.Semaphore(concurrency)
    pending: list[dict] = []
    touched: set[str] = set()
    runs_of = {r["request_hash"]: r["run_id"] for r in todo}

    def flush(writer) -> None:
        by_run: dict[str, list[dict]] = {}
        for row in pending:
            by_run.setdefault(runs_of[row["request_hash"]], []).append(row)
        writer.commit([("synthetic_reasoning", run, to_arrow("synthetic_reasoning", rows)) for run, rows in by_run.items()])
        touched.update(by_run)
        pending.clear()

    async with _client(cfg, transport) as client:
        model = ChatModel(client, t.name, ChatOptions(
            temperature=t.sampling.temperature, top_p=t.sampling.top_p, max_tokens=t.sampling.max_tokens,
            extra_body=t.extra_body, max_retries=t.max_retries, backoff_base_s=t.retry_backoff_s))

        async def one(req: dict):
            async with sem:
                try:
                    out = await model.generate(req["messages"], [])
                except ModelError as exc:
                    return req, None, exc
                return req, out, None

        with Warehouse(warehouse).writer() as writer:
            tasks = [asyncio.ensure_future(one(r)) for r in todo]
            try:
                for n, fut in enumerate(asyncio.as_completed(tasks), 1):
                    req, out, exc = await fut
                    result.sent += 1
                    if exc is not None:
                        result.failed += 1
                        result.unreachable = result.unreachable or isinstance(exc, ModelUnavailable)
                        if len(result.errors) < 20:
                            result.errors.append(f"{req['request_hash']}: {exc}")
                        if isinstance(exc, ModelUnavailable) and result.accepted + result.rejected == 0:
                            break  # nothing ever connected (after the retries): stop instead of failing each request
                    else:
                        if out.protocol_error:
                            verdict = ("rejected", f"model_protocol_error: {out.protocol_error['code']}: "
                                       f"{out.protocol_error['message']}", None, None)
                        else:
                            verdict = judge(out.content, req["action_name"], req["action_arguments"])
                        if verdict[0] == "accepted":
                            result.accepted += 1
                        else:
                            result.rejected += 1
                            code = verdict[1].split(":", 1)[0]
                            result.reject_reasons[code] = result.reject_reasons.get(code, 0) + 1
                        pending.append(_row(req, fp, identity, out, verdict, load_id))
                        if len(pending) >= COMMIT_EVERY:
                            flush(writer)
                    if progress:
                        progress(n, len(todo))
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                if pending:
                    flush(writer)
                if touched:
                    writer.commit([("loads", run, to_arrow("loads", [{
                        "load_id": load_id, "command": "synth-reasoning", "started_at": started,
                        "finished_at": datetime.now(UTC), "episodes_written": 0, "status": "complete",
                        "tool_version": _version()}])) for run in sorted(touched)])


def _version() -> str:
    from .. import __version__

    return __version__
