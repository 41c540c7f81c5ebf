"""OpenAI-style chat messages -> messages / steps / actions / observations rows of one agent."""

from __future__ import annotations

import orjson

from ._common import args_text, render_action, text_of, tool_type
from ._rows import jdump


def norm_call(tc) -> tuple[str | None, str | None, object]:
    """(id, name, arguments) of an OpenAI (``function``-wrapped) or flat tool call."""
    if not isinstance(tc, dict):
        return None, None, None
    fn = tc.get("function") if isinstance(tc.get("function"), dict) else tc
    return tc.get("id"), fn.get("name"), fn.get("arguments")


def parse_args(a):
    if isinstance(a, str):
        try:
            return orjson.loads(a)
        except orjson.JSONDecodeError:
            return a
    return a


class ChatAgent:
    """Accumulates one agent's conversation; call :meth:`emit` to write its rows."""

    def __init__(self, agent_id: str):
        self.agent_id = agent_id
        self.messages: list[dict] = []
        self.steps: list[dict] = []
        self.calls: dict[str, tuple[dict, dict]] = {}  # call id -> (step, action)
        self.model = None

    def add_message(self, m: dict, tool_types: dict | None = None) -> dict | None:
        """Add one message; returns the new step for assistant messages."""
        role = m.get("role")
        content = m.get("content")
        text = content if isinstance(content, str) or content is None else text_of(content)
        row = {"role": role, "content": text, "reasoning_content": m.get("reasoning_content"),
               "tool_calls": None, "tool_call_id": m.get("tool_call_id"), "name": m.get("name")}
        step = None
        if role == "assistant":
            calls = m.get("tool_calls") or []
            step = {"idx": len(self.steps), "prompt_msg_count": len(self.messages), "content": text,
                    "reasoning": m.get("reasoning_content"), "actions": [], "observations": [],
                    "model": m.get("model_name") or m.get("model"), "started_at": m.get("timestamp")}
            self.model = self.model or step["model"]
            oa = []
            for tc in calls if isinstance(calls, list) else []:
                cid, name, args = norm_call(tc)
                tt = (tool_types or {}).get(name) or tool_type(name)
                a = {"call_idx": len(step["actions"]), "call_id": cid, "tool_name": name,
                     "arguments": args_text(args), "action": render_action(name, parse_args(args)),
                     "action_type": "delegate" if tt == "agent" else "tool_use", "tool_type": tt,
                     "action_valid": None, "_args": parse_args(args)}
                step["actions"].append(a)
                oa.append({"id": cid, "type": "function", "function": {"name": name, "arguments": args_text(args)}})
                if cid:
                    self.calls[cid] = (step, a)
            if oa:
                row["tool_calls"] = jdump(oa)
            self.steps.append(step)
        elif role == "tool":
            cid = m.get("tool_call_id")
            hit = self.calls.get(cid)
            is_err = m.get("is_error")
            if hit:
                st, a = hit
                if is_err is not None:
                    a["action_valid"] = not is_err
                st["observations"].append({
                    "call_id": cid, "observation_type": "subagent_summary" if a["tool_type"] == "agent" else "tool_result",
                    "content": text, "is_error": is_err})
            elif self.steps:
                self.steps[-1]["observations"].append({"call_id": cid, "observation_type": "tool_result",
                                                       "content": text, "is_error": is_err})
        self.messages.append(row)
        return step

    def emit(self, add, key: dict, seq_start: int = 0) -> int:
        """Write messages, steps, actions, observations; returns the number of tool calls."""
        n_calls = 0
        for i, m in enumerate(self.messages):
            add("messages", {**key, "msg_idx": i, **m})
        for s in self.steps:
            add("steps", {**key, "step_idx": s["idx"], "seq": seq_start + s["idx"] if s.get("seq") is None else s["seq"],
                          "prompt_msg_count": s["prompt_msg_count"], "reasoning": s["reasoning"],
                          "content": s["content"], "model": s["model"], "started_at": s.get("started_at"),
                          "tokens_in": s.get("tokens_in"), "tokens_out": s.get("tokens_out"),
                          "finish_reason": "tool_calls" if s["actions"] else "stop",
                          "tools_hash": s.get("tools_hash")})
            if not s["actions"]:
                add("actions", {**key, "step_idx": s["idx"], "call_idx": 0, "action": "answer",
                                "action_type": "answer"})
            for a in s["actions"]:
                n_calls += 1
                add("actions", {**key, "step_idx": s["idx"], **{k: v for k, v in a.items() if not k.startswith("_")}})
            for o in s["observations"]:
                add("observations", {**key, "step_idx": s["idx"], **o})
        return n_calls
