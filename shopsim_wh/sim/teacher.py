"""The embedded scripted teacher: answers `reasoning-requests` (sql/exports/reasoning-requests.sql) so that
`shopsim-wh synth-reasoning` runs out of the box against the embedded server (model ``scripted-teacher``).

It reads the request the way a real teacher would have to: the action the agent took (the ``## Action the
agent took next`` section) and the task (the first user message of the conversation), and writes a short
first-person reasoning that ends in that action, as the JSON object the request asks for. Deterministic:
the same request gives the same answer.

``scripted_teacher: {"contradict_every": N}`` in the request body (the teacher config's ``extra_body``) makes
it answer about one request in N with a *different* action, to exercise the rejection path.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

TEACHER_MODEL = "scripted-teacher"
CREATED = 1764547200  # fixed: answers are byte-identical across runs

_ACTION = re.compile(r"## Action the agent took next\n(\S+) (.*)\n")
_TASK = re.compile(r"\[user\] (?:购物任务：\n)?([^\n]+)")


def _reasoning(task: str, name: str, args: dict) -> str:
    value = next(iter(args.values()), "") if args else ""
    if name == "search":
        return (f"The task asks for: {task}. I am on a page where I can search, so I search for its key terms: "
                f"{value}.")
    if name == "click" and value == "buy now":
        return "The product on this page matches the request and its options are set, so I buy it now."
    if name == "click" and "=" in str(value):
        axis, _, choice = str(value).partition("=")
        return f"This product needs a {axis} chosen; the request points to {choice}, so I select {value}."
    if name == "click":
        return f"Among what this page offers, {value} fits the request best, so I click it."
    return f"Given what I see and the request ({task}), the next step is {name} with {json.dumps(args, ensure_ascii=False)}."


def completion(body: dict[str, Any]) -> dict[str, Any]:
    """One chat-completions answer to a reasoning request (OpenAI shape, the answer JSON in `content`)."""
    messages = body.get("messages") or []
    text = "\n".join(m.get("content") or "" for m in messages if isinstance(m, dict) and m.get("role") == "user")
    key = hashlib.sha256(text.encode()).hexdigest()
    found = _ACTION.search(text + "\n")
    if found is None:
        answer = "I cannot find the action this request is about."
    else:
        name, raw = found.group(1), found.group(2)
        try:
            args = json.loads(raw)
        except ValueError:
            args = {}
        task_match = _TASK.search(text)
        task = task_match.group(1).strip() if task_match else "the user's request"
        options = body.get("scripted_teacher") if isinstance(body.get("scripted_teacher"), dict) else {}
        every = options.get("contradict_every")
        if isinstance(every, int) and every > 0 and int(key[:8], 16) % every == 0:
            args = {k: f"{v} (another choice)" for k, v in args.items()} or {"value": "back to search"}
        answer = json.dumps({"reasoning": _reasoning(task, name, args), "action": {"name": name, "arguments": args}},
                            ensure_ascii=False)
    prompt_tokens = len(json.dumps(messages, ensure_ascii=False)) // 4
    completion_tokens = len(answer) // 4
    return {
        "id": f"chatcmpl-teacher-{key[:24]}",
        "object": "chat.completion",
        "created": CREATED,
        "model": TEACHER_MODEL,
        "system_fingerprint": "shopsim-scripted-teacher-v1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop",
                     "logprobs": None}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }
