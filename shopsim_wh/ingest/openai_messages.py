"""Reader for OpenAI chat-message trajectories (tau-bench ``historical_trajectories`` and alike).

Accepted shapes: a JSON array of runs ``{task_id, trial, reward, info, traj|messages}`` (tau-bench),
the same objects one per line (JSONL), or a bare list of messages (one episode). Each element is one
episode: ``episode_id = task-{task_id}__trial-{trial}`` (``sample_id`` = trial), reward from the
top-level ``reward`` (``info.reward_info`` is null in some runs). The file is one run (the "element
group" of docs/conventions.md). ``info.task`` (the user simulator's private instruction and the
ground-truth actions) plays the role of the private goal and is not stored; ``reward_info.info``
(e.g. ``r_actions``) lands in ``episodes.reward_detail``.
"""

from __future__ import annotations

import re
from pathlib import Path

from ._chat import ChatAgent
from ._common import accepted_documents, read_json_document
from ._rows import jdump
from .core import UnitContext
from .registry import Reader, key_re, register

_SNIFF_TRAJ = key_re("traj")
_SNIFF_TASK = key_re("task_id")
_SNIFF_ROLE = re.compile(rb'^\s*\[\s*\{\s*"(role|content)"')
_SNIFF_TOOLCALLS = key_re("tool_calls")


def sniff(head: bytes, path: Path) -> int:
    if _SNIFF_TRAJ.search(head) and _SNIFF_TASK.search(head):
        return 80
    if _SNIFF_ROLE.search(head):
        return 40
    if b'"messages"' in head and _SNIFF_TOOLCALLS.search(head) and b'"segments"' not in head:
        return 20
    return 0


def read(ctx: UnitContext):
    add = ctx.sink.add
    stem = ctx.path.name.split(".")[0]
    elements = list(read_json_document(ctx, ctx.path))
    if elements and all(isinstance(e, dict) and "role" in e for _, e in elements) and elements[0][0] == 0 \
            and not any("traj" in e or "messages" in e for _, e in elements):
        elements = [(None, {"traj": [e for _, e in elements]})]  # a bare message list: one episode
    seen: dict[str, int] = {}
    total = len(elements)
    for idx, el in accepted_documents(ctx, elements, "element", _check):
        traj = el.get("traj", el.get("messages"))
        reward = el.get("reward")
        task_id, trial = el.get("task_id"), el.get("trial")
        if task_id is not None:
            eid = f"task-{task_id}__trial-{trial if trial is not None else 0}"
        else:
            eid = f"{stem}-{idx if idx is not None else 0}"
        attempt = seen.get(eid, 0) + 1
        seen[eid] = attempt
        key = {"episode_id": eid, "attempt": attempt, "agent_id": "main"}
        ag = ChatAgent("main")
        for m in traj:
            ag.add_message(m)
        n_calls = ag.emit(add, key)
        info = el.get("info") if isinstance(el.get("info"), dict) else {}
        ri = info.get("reward_info") if isinstance(info.get("reward_info"), dict) else None
        detail = {"reward": reward, "reward_info": ri.get("info") if ri else None,
                  "user_cost": info.get("user_cost"), "source": info.get("source")}
        first_user = next((m.get("content") for m in traj if m.get("role") == "user"), None)
        add("agents", {**key, "agent_role": "main", "depth": 0, "model": ag.model})
        add("episodes", {"episode_id": eid, "attempt": attempt, **ctx.episode_common(),
                         "task_id": task_id if isinstance(task_id, int) else None,
                         "sample_id": trial if isinstance(trial, int) else None, "status": "completed",
                         "done": True, "reward": float(reward) if reward is not None else None,
                         "reward_detail": jdump(detail), "model_steps": len(ag.steps), "protocol_errors": 0,
                         "total_actions": n_calls, "instruction": first_user if isinstance(first_user, str) else None})
        ctx.fidelity(eid if attempt == 1 else f"{eid}#{attempt}", 1, 1, 0, 0)
        ctx.attempts += 1
    ctx.episodes = len(seen)
    ctx.records = total
    yield


register(Reader(name="openai-messages", description="OpenAI chat messages (tau-bench trajectories)",
                sniff=sniff, read=read))


def _check(el) -> tuple[str, str] | None:
    if not isinstance(el, dict):
        return "wrong_type", f"element must be an object, got {type(el).__name__}"
    traj = el.get("traj", el.get("messages"))
    if not isinstance(traj, list) or not all(isinstance(m, dict) for m in traj):
        return "wrong_type", "traj/messages must be a list of message objects"
    reward = el.get("reward")
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
        return "wrong_type", f"reward must be a number, got {type(reward).__name__}"
    return None
