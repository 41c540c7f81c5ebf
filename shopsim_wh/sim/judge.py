"""The embedded scripted judge: answers `shopsim-wh judge` requests (model ``scripted-judge``) so that the judge
runs out of the box on the embedded default, with labels a test can predict.

It reads the request the way a real judge has to: the rubric's questions from the system message (one line
``- <id>: <prompt> [labels: a, b, ...]`` each, written by :mod:`shopsim_wh.rollout.judge`) and the trace's
``## Outcome`` section from the user message, and answers the JSON object the rubric asks for. Deterministic:
the same request gives the same answer. Per question:

* labels that name error-taxonomy codes (docs/taxonomy.md): the failure it can see from the public outcome,
  ``none`` for a strict success (``r_success: 1``), the termination reason when the episode ended on
  ``action_limit``, ``protocol_budget`` or ``generation_length``, ``no_purchase`` when it ended otherwise without
  a purchase, else (a purchase that was not a strict success: the reward components are not in the trace)
  ``option_miss``; a label the question does not allow becomes ``other`` (or the first label);
* labels ``yes`` / ``no``: ``yes`` iff the outcome counts protocol errors (``protocol_errors: N`` with N > 0);
* a step-grain request (``## Step to judge``): the taxonomy label of the step's protocol error
  (``protocol_error: CODE`` line, through :data:`shopsim_wh.core.protocol_codes.LABELS`), else ``none``;
* anything else: the question's first label (free questions: ``unknown``).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from ..core.protocol_codes import LABELS

JUDGE_MODEL = "scripted-judge"
CREATED = 1764547200  # fixed: answers are byte-identical across runs
TERMINATIONS = ("action_limit", "protocol_budget", "generation_length")
TAXONOMY_HINTS = {"none", "no_purchase", "option_miss", "action_limit", "protocol_budget", "generation_length",
                  "type_miss", "attribute_miss", "over_budget", "wrong_product"}

_QUESTION = re.compile(r"^- ([A-Za-z0-9_.-]+): .*?(?:\[labels: ([^\]]*)\])?$", re.MULTILINE)
_FIELD = re.compile(r"^([a-z_]+): (.*)$", re.MULTILINE)


def _section(text: str, title: str) -> str:
    start = text.find(f"## {title}\n")
    if start < 0:
        return ""
    rest = text[start + len(title) + 4:]
    end = rest.find("\n## ")
    return rest if end < 0 else rest[:end]


def _num(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "", "NULL") else None
    except ValueError:
        return None


def failure(outcome: dict[str, str]) -> str:
    """The failure the public outcome shows (see the module doc)."""
    if outcome.get("status") == "failed":
        return "other"
    if _num(outcome.get("r_success")) == 1:
        return "none"
    reason = outcome.get("termination_reason")
    if reason in TERMINATIONS:
        return reason
    if reason != "purchase":
        return "no_purchase"
    return "option_miss"


def answer(system: str, user: str) -> dict[str, Any]:
    """The judge's answer object for one request (the rubric's format: ``{"labels": {...}, "rationale": ...}``)."""
    outcome = dict(_FIELD.findall(_section(user, "Outcome")))
    step = dict(_FIELD.findall(_section(user, "Step to judge")))
    labels: dict[str, str] = {}
    for qid, allowed_text in _QUESTION.findall(system):
        allowed = [a.strip() for a in allowed_text.split(",") if a.strip()] if allowed_text else []
        if step:
            code = step.get("protocol_error")
            choice = LABELS.get(code, "protocol_other") if code and code != "NULL" else "none"
        elif set(allowed) & TAXONOMY_HINTS:
            choice = failure(outcome)
        elif set(allowed) == {"yes", "no"}:
            choice = "yes" if (_num(outcome.get("protocol_errors")) or 0) > 0 else "no"
        else:
            choice = allowed[0] if allowed else "unknown"
        if allowed and choice not in allowed:
            choice = "other" if "other" in allowed else allowed[0]
        labels[qid] = choice
    why = (f"status {outcome.get('status')}, ended by {outcome.get('termination_reason')}, "
           f"r_success {outcome.get('r_success')}, {outcome.get('protocol_errors', '0')} protocol error(s)")
    return {"labels": labels, "rationale": why}


def completion(body: dict[str, Any]) -> dict[str, Any]:
    """One chat-completions answer to a judge request (OpenAI shape, the answer JSON in `content`)."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    system = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")
    user = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "user")
    key = hashlib.sha256((system + "\x00" + user).encode()).hexdigest()
    content = json.dumps(answer(system, user), ensure_ascii=False, sort_keys=True)
    prompt_tokens = len(system + user) // 4
    completion_tokens = len(content) // 4
    return {
        "id": f"chatcmpl-judge-{key[:24]}", "object": "chat.completion", "created": CREATED, "model": JUDGE_MODEL,
        "system_fingerprint": "shopsim-scripted-judge-v1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop",
                     "logprobs": None}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


async def app(scope: dict, receive, send) -> None:
    """A minimal OpenAI-compatible ASGI app serving only the scripted judge (``POST /v1/chat/completions``): what
    ``base_url: embedded`` talks to through an in-process transport."""
    if scope["type"] != "http":
        return
    raw = b""
    while True:
        msg = await receive()
        raw += msg.get("body", b"")
        if not msg.get("more_body"):
            break
    status, doc = 200, None
    if scope["method"] == "POST" and scope["path"].rstrip("/").endswith("/chat/completions"):
        try:
            doc = completion(json.loads(raw or b"{}"))
        except ValueError:
            status, doc = 400, {"error": {"message": "the request body is not JSON", "type": "invalid_request_error"}}
    elif scope["path"].rstrip("/").endswith("/models"):
        doc = {"object": "list", "data": [{"id": JUDGE_MODEL, "object": "model", "owned_by": "shopsim-wh"}]}
    else:
        status, doc = 404, {"error": {"message": f"no route {scope['path']}", "type": "not_found"}}
    body = json.dumps(doc, ensure_ascii=False).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
