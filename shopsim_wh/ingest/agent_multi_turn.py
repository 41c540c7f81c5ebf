"""Reader for ``agent_multi_turn`` coding-agent traces (seed 001, part 2).

A file holds one trace (a JSON object), a JSON array of traces, or one trace per line. Each trace is
one episode (``episode_id`` = ``data_id``) with several agents:

* every ``main_agent`` segment is a *view* of the one main agent: later segments repeat an earlier
  prefix (sometimes abridged, e.g. a delegate call with fewer arguments) and then continue. Messages
  are merged in order and deduplicated: assistant messages by their tool-call ids (or by text when
  they call nothing), tool messages by ``tool_call_id``, and user/system messages while the segment is
  still inside the already-seen prefix. The first occurrence wins; differences are counted in
  ``runs.provenance.agent_multi_turn.<data_id>.dedup_conflicts``.
* every other segment is a subagent (``agent_id`` = ``segment_id``, ``agent_role`` / ``agent_type`` from
  the segment). It is linked to the delegating call (``delegate_subtask`` or another agent tool) whose
  ``query``/``prompt`` equals the segment's first user message; failing that, whose tool result equals
  the subagent's final answer; failing that, the first delegating call not yet linked, in order.
* tool types come from the tool's own ``tool_type`` when present, else by name (``delegate_subtask`` ->
  ``agent``, ``todo_write`` -> ``planning``, others ``execution``); every agent gets the trace's tool
  schemas in ``tools``. Messages with roles other than system/user/assistant/tool are kept as messages
  with their role and counted as ``kept_raw``. ``environment`` (repo, branch, commit_id) and the trace
  metadata go to ``runs.provenance.agent_multi_turn.<data_id>``.
"""

from __future__ import annotations

import re
from pathlib import Path

from ._chat import ChatAgent, norm_call
from ._common import accepted_documents, read_json_document, tool_type
from ._rows import jdump, tool_schema_hash, tools_set_hash
from .core import UnitContext
from .registry import Reader, register

KNOWN_ROLES = {"system", "user", "assistant", "tool"}
_SNIFF = re.compile(rb'"format"\s*:\s*"agent_multi_turn"')
QUERY_KEYS = ("query", "prompt", "task", "description", "instruction")


def sniff(head: bytes, path: Path) -> int:
    if _SNIFF.search(head):
        return 100
    if b'"segments"' in head and b'"agent_role"' in head:
        return 70
    return 0


def read(ctx: UnitContext):
    seen: dict[str, int] = {}
    n = 0

    def counted():
        nonlocal n
        for item in read_json_document(ctx, ctx.path):
            n += 1
            yield item

    for _idx, doc in accepted_documents(ctx, counted(), "trace", _check):
        eid = str(doc["data_id"])
        attempt = seen.get(eid, 0) + 1
        seen[eid] = attempt
        _trace(ctx, doc, eid, attempt)
        ctx.attempts += 1
    ctx.records = n
    ctx.episodes = len(seen)
    yield


def _check(doc):
    if not isinstance(doc, dict):
        return "wrong_type", f"a trace must be an object, got {type(doc).__name__}"
    fmt = doc.get("format")
    if fmt is not None and fmt != "agent_multi_turn":
        return "unknown_schema_version", f"format {str(fmt)[:40]!r} is not 'agent_multi_turn'"
    if not isinstance(doc.get("data_id"), (str, int)):
        return "wrong_type", "data_id must be a string"
    msg = doc.get("message")
    if not isinstance(msg, dict) or not isinstance(msg.get("segments"), list):
        return "wrong_type", "message.segments must be a list"
    for seg in msg["segments"]:
        if not isinstance(seg, dict) or not isinstance(seg.get("messages"), list):
            return "wrong_type", "each segment must be an object with a messages list"
    if msg.get("tools") is not None and not isinstance(msg["tools"], list):
        return "wrong_type", "message.tools must be a list"
    return None


def _msg_key(m: dict):
    role = m.get("role")
    if role == "assistant":
        ids = tuple(norm_call(tc)[0] for tc in (m.get("tool_calls") or []) if isinstance(tc, dict))
        if ids and all(ids):
            return ("assistant", ids)
        return ("assistant", m.get("content"), m.get("reasoning_content"))
    if role == "tool":
        return ("tool", m.get("tool_call_id"))
    return (role, jdump(m.get("content")))


def _trace(ctx: UnitContext, doc: dict, eid: str, attempt: int) -> None:
    add = ctx.sink.add
    msg = doc["message"]
    tools = [t for t in (msg.get("tools") or []) if isinstance(t, dict)]
    ttypes, trows = {}, []
    for t in tools:
        fn = t.get("function") if isinstance(t.get("function"), dict) else t
        name = fn.get("name")
        tt = t.get("tool_type") or tool_type(name)
        ttypes[name] = tt
        trows.append({"name": name, "description": fn.get("description"), "parameters": jdump(fn.get("parameters")),
                      "tool_type": tt, "schema_hash": tool_schema_hash(name, fn.get("description"), fn.get("parameters"))})
    thash = tools_set_hash([r["schema_hash"] for r in trows]) if trows else None
    meta = {k: doc.get(k) for k in ("version", "src", "dataset_id", "domain", "environment") if k in doc}
    meta["segments"] = []
    meta["dedup_conflicts"] = 0
    meta["extra_roles"] = {}
    ctx.provenance.setdefault("agent_multi_turn", {})[eid] = meta
    total = conv = kept = dropped = 0

    main = ChatAgent("main")
    main_keys: dict = {}
    subs: list[tuple[dict, ChatAgent]] = []
    for seg in msg["segments"]:
        role = seg.get("agent_role") or "main_agent"
        meta["segments"].append({"segment_id": seg.get("segment_id"), "agent_role": role,
                                 "agent_type": seg.get("agent_type"), "messages": len(seg["messages"])})
        is_main = role in ("main_agent", "main")
        ag = main if is_main else ChatAgent(str(seg.get("segment_id") or f"{role}-{len(subs)}"))
        keys = main_keys if is_main else {}
        in_prefix = is_main and bool(main.messages)
        for m in seg["messages"]:
            total += 1
            if not isinstance(m, dict):
                ctx.error(None, None, "wrong_type", f"{eid} segment {seg.get('segment_id')}: a message must be an object")
                dropped += 1
                continue
            r = m.get("role")
            k = _msg_key(m)
            if k in keys:
                if r in ("assistant", "tool") or in_prefix:
                    if keys[k] != m:
                        meta["dedup_conflicts"] += 1
                    conv += 1
                    continue
            elif r in ("assistant", "tool"):
                in_prefix = False
            keys.setdefault(k, m)
            if r not in KNOWN_ROLES:
                meta["extra_roles"][str(r)] = meta["extra_roles"].get(str(r), 0) + 1
                kept += 1
            else:
                conv += 1
            ag.add_message(m, ttypes)
        if not is_main:
            subs.append((seg, ag))
    agents = [("main", None, None, 0, "main", None, main)]
    # link subagents to delegating calls
    delegates = [(cid, st, a) for cid, (st, a) in main.calls.items() if a["tool_type"] == "agent"]
    for _seg, ag in subs:
        delegates += [(cid, st, a) for cid, (st, a) in ag.calls.items() if a["tool_type"] == "agent"]
    owner_of = {cid: "main" for cid in main.calls}
    for _seg, ag in subs:
        for cid in ag.calls:
            owner_of[cid] = ag.agent_id
    used: set[str] = set()
    depth = {"main": 0}
    pending = []
    for seg, ag in subs:
        first_user = next((m["content"] for m in ag.messages if m["role"] == "user"), None)
        last_answer = next((s["content"] for s in reversed(ag.steps) if s["content"]), None)
        cid = None
        for c, _st, a in delegates:
            args = a["_args"] if isinstance(a["_args"], dict) else {}
            if c not in used and owner_of.get(c) != ag.agent_id and first_user is not None and any(
                    isinstance(args.get(q), str) and args[q].strip() == str(first_user).strip() for q in QUERY_KEYS):
                cid = c
                break
        if cid is None and last_answer:
            for c, st, _a in delegates:
                if c not in used and owner_of.get(c) != ag.agent_id and any(
                        o["call_id"] == c and o["content"] and o["content"].strip() == last_answer.strip()
                        for o in st["observations"]):
                    cid = c
                    break
        if cid is None:
            cid = next((c for c, _st, _a in delegates if c not in used and owner_of.get(c) != ag.agent_id), None)
        if cid:
            used.add(cid)
        pending.append((seg, ag, cid))
    for seg, ag, cid in pending:
        parent = owner_of.get(cid, "main") if cid else "main"
        agents.append((ag.agent_id, parent, cid, None, seg.get("agent_role"), seg.get("agent_type"), ag))
    for _ in range(len(agents)):
        for a in agents[1:]:
            depth[a[0]] = depth.get(a[1], 0) + 1
    seq = 0
    n_calls = n_steps = 0
    for agent_id, parent, cid, _d, role, atype, ag in agents:
        key = {"episode_id": eid, "attempt": attempt, "agent_id": agent_id}
        for s in ag.steps:
            s["seq"] = seq
            s["tools_hash"] = thash
            seq += 1
        n_steps += len(ag.steps)
        n_calls += ag.emit(add, key)
        add("agents", {**key, "parent_agent_id": parent, "agent_role": role, "agent_type": atype,
                       "spawned_by_call_id": cid, "depth": depth.get(agent_id, 0), "model": ag.model})
        for r in trows:
            add("tools", {"episode_id": eid, "agent_id": agent_id, **r})
    first_user = next((m["content"] for m in main.messages if m["role"] == "user"), None)
    add("episodes", {"episode_id": eid, "attempt": attempt, **ctx.episode_common(), "status": "completed",
                     "model_steps": n_steps, "protocol_errors": 0, "total_actions": n_calls,
                     "instruction": first_user})
    ctx.fidelity(eid if attempt == 1 else f"{eid}#{attempt}", total, conv, kept, dropped)


register(Reader(name="agent-multi-turn", description="agent_multi_turn coding-agent traces (JSON / JSONL)",
                sniff=sniff, read=read))
