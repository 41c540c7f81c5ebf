"""Reader for ATIF v1.x (Harbor's Agent Trajectory Interchange Format) trajectory files.

One trajectory file = one run = one episode (``episode_id`` = ``session_id``). Steps with
``source: agent`` become ``steps`` rows (``message`` -> content, ``reasoning_content`` -> reasoning,
``metrics`` -> tokens); ``tool_calls`` become ``actions``; ``observation.results`` join to their call
by ``source_call_id`` (a result without one is attached to the step with ``call_id`` NULL). A result
with ``subagent_trajectory_ref`` is a ``subagent_summary``; the referenced trajectory becomes a
subagent (``agent_id`` = its ``session_id``) when it is embedded in ``extra.subagent_trajectories``
(what ``dump_episode(..., "atif")`` writes) or found at ``trajectory_path`` beside the file.
``system`` / ``user`` steps become messages. ``final_metrics``, ``agent``, ``notes`` and ``extra`` go to
``runs.provenance.atif``.
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson

from ._chat import ChatAgent
from ._common import accepted_documents, read_json_document
from ._rows import jdump
from .core import UnitContext
from .registry import Reader, register

_SNIFF = re.compile(rb'"schema_version"\s*:\s*"ATIF-')
_VERSION = re.compile(r"^ATIF-v1\.\d+$")


def sniff(head: bytes, path: Path) -> int:
    return 100 if _SNIFF.search(head) else 0


def read(ctx: UnitContext):
    docs = list(read_json_document(ctx, ctx.path))
    total = len(docs)
    landed = 0
    seen: dict[str, int] = {}
    for _idx, doc in accepted_documents(ctx, docs, "document", _check):
        eid = str(doc["session_id"])
        attempt = seen.get(eid, 0) + 1
        seen[eid] = attempt
        n_steps, kept = _emit_trajectory(ctx, doc, eid, attempt)
        landed += 1
        ctx.fidelity(eid, n_steps, n_steps - kept, kept, 0)
    ctx.records = total
    ctx.episodes = len(seen)
    ctx.attempts = landed
    yield


def _check(doc) -> tuple[str, str] | None:
    if not isinstance(doc, dict):
        return "wrong_type", f"an ATIF trajectory must be an object, got {type(doc).__name__}"
    v = doc.get("schema_version")
    if not isinstance(v, str) or not _VERSION.match(v):
        return "unknown_schema_version", f"schema_version {str(v)[:40]!r} is not ATIF-v1.x"
    if not isinstance(doc.get("session_id"), (str, int)):
        return "wrong_type", "session_id must be a string"
    if not isinstance(doc.get("steps"), list) or not all(isinstance(s, dict) for s in doc["steps"]):
        return "wrong_type", "steps must be a list of objects"
    for s in doc["steps"]:
        if s.get("tool_calls") is not None and not isinstance(s["tool_calls"], list):
            return "wrong_type", f"step {s.get('step_id')}: tool_calls must be a list"
        if s.get("observation") is not None and not isinstance(s["observation"], dict):
            return "wrong_type", f"step {s.get('step_id')}: observation must be an object"
    return None


def _emit_trajectory(ctx: UnitContext, doc: dict, eid: str, attempt: int) -> tuple[int, int]:
    add = ctx.sink.add
    embedded = {}
    extra = doc.get("extra") if isinstance(doc.get("extra"), dict) else {}
    for sub in extra.get("subagent_trajectories") or []:
        if isinstance(sub, dict) and sub.get("session_id") is not None:
            embedded[str(sub["session_id"])] = sub
    agent_meta = doc.get("agent") if isinstance(doc.get("agent"), dict) else {}
    prov = ctx.provenance.setdefault("atif", {})
    prov[eid] = {k: doc.get(k) for k in ("schema_version", "trajectory_id", "agent", "notes", "final_metrics")
                 if k in doc} | {"extra": {k: v for k, v in extra.items() if k != "subagent_trajectories"}}
    ctx.run_fields["model_name"] = agent_meta.get("model_name")
    walk = _Walk(ctx, eid, attempt, embedded)
    walk.agent(doc, "main", None, None, 0, "main")
    counters = walk.counters
    for a in walk.agents:
        add("agents", a)
    final = doc.get("final_metrics") if isinstance(doc.get("final_metrics"), dict) else {}
    fx = final.get("extra") if isinstance(final.get("extra"), dict) else {}
    ep = extra.get("episode") if isinstance(extra.get("episode"), dict) else {}
    reward = fx.get("reward", ep.get("reward"))
    first_user = next((s.get("message") for s in doc["steps"] if s.get("source") == "user"), None)
    times = [t for t in counters["times"] if t]
    add("episodes", {"episode_id": eid, "attempt": attempt, **ctx.episode_common(),
                     "status": ep.get("status", "completed"), "done": ep.get("done"),
                     "reward": float(reward) if isinstance(reward, (int, float)) and not isinstance(reward, bool) else None,
                     "termination_reason": ep.get("termination_reason"),
                     "model_steps": counters["steps"], "protocol_errors": 0, "total_actions": counters["calls"],
                     "tokens_in": final.get("total_prompt_tokens", counters["tin"]),
                     "tokens_out": final.get("total_completion_tokens", counters["tout"]),
                     "instruction": first_user if isinstance(first_user, str) else None,
                     "started_at": min(times) if times else None, "finished_at": max(times) if times else None})
    return len(doc["steps"]), counters["kept"]


class _Walk:
    """One trajectory's agents, the main one then its subagents depth first: the state they share."""

    def __init__(self, ctx: UnitContext, eid: str, attempt: int, embedded: dict[str, dict]):
        self.ctx, self.eid, self.attempt = ctx, eid, attempt
        self.embedded = embedded  # session_id -> subagent trajectory in extra.subagent_trajectories
        self.agents: list[dict] = []  # the ``agents`` rows, in the order the walk met them
        self.counters = {"steps": 0, "kept": 0, "calls": 0, "tin": None, "tout": None, "seq": 0, "times": []}
        self.seen_ids = {"main"}

    def agent(self, doc: dict, agent_id: str, parent, spawned_by, depth: int, role: str) -> None:
        """Rows of agent ``agent_id`` (trajectory ``doc``), then of the subagents it delegated to."""
        ctx, eid, attempt, counters = self.ctx, self.eid, self.attempt, self.counters
        embedded, agents, seen_ids = self.embedded, self.agents, self.seen_ids
        add = ctx.sink.add
        key = {"episode_id": eid, "attempt": attempt, "agent_id": agent_id}
        meta = doc.get("agent") if isinstance(doc.get("agent"), dict) else {}
        ag = ChatAgent(agent_id)
        subs = []
        for s in doc.get("steps") or []:
            src = s.get("source")
            msg = s.get("message")
            text = msg if isinstance(msg, str) or msg is None else jdump(msg)
            if src in ("system", "user"):
                ag.add_message({"role": src, "content": text})
                if s.get("observation"):
                    counters["kept"] += 1  # a system-initiated observation: kept only in the source file
                continue
            if src != "agent":
                counters["kept"] += 1
                continue
            calls = []
            for tc in s.get("tool_calls") or []:
                if isinstance(tc, dict):
                    calls.append({"id": tc.get("tool_call_id"), "type": "function",
                                  "function": {"name": tc.get("function_name"), "arguments": tc.get("arguments")}})
            step = ag.add_message({"role": "assistant", "content": text or None, "reasoning_content": s.get("reasoning_content"),
                                   "tool_calls": calls or None, "model_name": s.get("model_name") or meta.get("model_name"),
                                   "timestamp": s.get("timestamp")})
            metrics = s.get("metrics") if isinstance(s.get("metrics"), dict) else {}
            step["tokens_in"], step["tokens_out"] = metrics.get("prompt_tokens"), metrics.get("completion_tokens")
            for k, v in (("tin", step["tokens_in"]), ("tout", step["tokens_out"])):
                if isinstance(v, int):
                    counters[k] = (counters[k] or 0) + v
            counters["times"].append(s.get("timestamp"))
            step["seq"] = counters["seq"]
            counters["seq"] += 1
            counters["steps"] += 1
            obs = s.get("observation") or {}
            for res in obs.get("results") or []:
                if not isinstance(res, dict):
                    continue
                cid = res.get("source_call_id")
                content = res.get("content")
                content = content if isinstance(content, str) or content is None else jdump(content)
                refs = res.get("subagent_trajectory_ref") or []
                ag.add_message({"role": "tool", "tool_call_id": cid, "content": content})
                if refs:
                    target = ag.calls.get(cid)
                    if target:
                        target[1]["tool_type"], target[1]["action_type"] = "agent", "delegate"
                        for o in target[0]["observations"]:
                            if o["call_id"] == cid:
                                o["observation_type"] = "subagent_summary"
                    elif step["observations"]:
                        step["observations"][-1]["observation_type"] = "subagent_summary"
                    for ref in refs:
                        if isinstance(ref, dict):
                            subs.append((ref, cid))
        ag.emit(add, key)
        counters["calls"] += sum(len(s["actions"]) for s in ag.steps)
        agents.append({**key, "parent_agent_id": parent, "agent_role": role,
                       "agent_type": None if agent_id == "main" else role, "spawned_by_call_id": spawned_by,
                       "depth": depth, "model": ag.model or meta.get("model_name")})
        for ref, cid in subs:
            sid = str(ref.get("session_id"))
            sub = embedded.get(sid)
            if sub is None and isinstance(ref.get("trajectory_path"), str):
                p = (ctx.path.parent / ref["trajectory_path"])
                if p.is_file() and p.resolve() != ctx.path.resolve():
                    try:
                        sub = orjson.loads(p.read_bytes())
                    except (orjson.JSONDecodeError, OSError) as e:
                        ctx.error(None, None, "invalid_json", f"subagent trajectory {p}: {e}", rejected=False)
            if not isinstance(sub, dict) or not isinstance(sub.get("steps"), list):
                continue
            rx = ref.get("extra") if isinstance(ref.get("extra"), dict) else {}
            sub_id = str(rx.get("agent_id") or sid)
            if sub_id in seen_ids:
                continue
            seen_ids.add(sub_id)
            self.agent(sub, sub_id, agent_id, cid, depth + 1, rx.get("agent_role") or "subagent")


register(Reader(name="atif", description="ATIF v1.x trajectory (Harbor)", sniff=sniff, read=read))
