"""Reader for Claude Code session transcripts (``~/.claude/projects/<project>/<sessionId>.jsonl``).

One session file (plus ``<sessionId>/subagents/agent-*.jsonl`` when present) = one run = one episode
(``episode_id`` = ``sessionId``). Agents:

* ``main``: the chain of ``parentUuid`` links ending at the final leaf (the last non-sidechain
  user/assistant/system record of the file that nothing points to), plus the records hanging off it
  that belong to it (tool results of its calls, progress records, hook attachments);
* subagents from ``subagents/agent-<id>.jsonl``: ``agent_id`` = the record's ``agentId``, linked to the
  Task call whose result carries ``toolUseResult.agentId`` (file name as fallback);
* inline subagents (``isSidechain: true`` without ``agentId``, older versions): one agent per
  sidechain root, linked to the Task call whose ``prompt`` is the sidechain's first user message;
* abandoned branches: every other non-sidechain record is grouped by the point where it leaves the
  main line and kept as an agent with ``agent_role = 'abandoned_branch'`` (parent ``main``).

Steps: one per API response (records sharing ``message.id`` are merged); thinking -> ``reasoning``,
text -> ``content``, tool_use -> ``actions``, tool_result -> ``observations`` (aligned by id,
``is_error``; results of Task calls are ``subagent_summary``). Hooks: ``hook_additional_context`` /
``hook_system_message`` attachments and ``<system-reminder>`` text are model-visible context
(``observations`` of type ``hook_context``); blocking/stopping hooks become ``steps.intervention``;
log-only outcomes (``hook_success``, non-blocking errors) go to ``steps.metadata.hook_log`` of the step
they follow (``runs.provenance.claude_code.hook_log`` when there is none). Per-step model, Claude Code
version and usage: ``steps.model`` / ``tokens_*``; version, request id, message id, record uuids and
raw usage in ``steps.metadata`` (JSON). ``summary`` records are kept in
``runs.provenance.claude_code.summaries``; system, progress, queue-operation, file-history-snapshot
and unknown record types are stored verbatim in ``runs.provenance.claude_code.raw_records`` and
counted as ``kept_raw``.
"""

from __future__ import annotations

import re
from pathlib import Path

from ._common import args_text, read_jsonl_records, render_action, text_of, tool_type
from ._rows import jdump
from .core import UnitContext
from .registry import Reader, key_re, register

CONVERTED_TYPES = {"user", "assistant", "summary"}
CONTEXT_HOOKS = {"hook_additional_context", "hook_system_message"}
BLOCKING_HOOKS = {"hook_blocking_error", "hook_cancelled", "hook_stopped_continuation"}
LOG_HOOKS = {"hook_success", "hook_non_blocking_error", "hook_error_during_execution"}
_REMINDER = re.compile(r"<system-reminder>(.*?)</system-reminder>", re.S)
_SNIFF_TYPE = re.compile(rb'"type"\s*:\s*"(user|assistant|summary|file-history-snapshot|queue-operation|system)"')
_SNIFF_SESSION = key_re("sessionId")
_SNIFF_LEAF = key_re("leafUuid")


def sniff(head: bytes, path: Path) -> int:
    if _SNIFF_TYPE.search(head) and (_SNIFF_SESSION.search(head) or _SNIFF_LEAF.search(head)):
        return 90
    return 0


def companions(path: Path) -> list[Path]:
    stem = path.name.split(".")[0]
    d = path.parent / stem / "subagents"
    return sorted(d.glob("agent-*.jsonl")) if d.is_dir() else []


class _Agent:
    def __init__(self, agent_id, role, parent=None, spawned_by=None, depth=0, agent_type=None, source_file=None):
        self.id, self.role, self.parent, self.spawned_by = agent_id, role, parent, spawned_by
        self.depth, self.type, self.source_file = depth, agent_type, source_file
        self.records: list[tuple[int, dict]] = []  # (global order, record)
        self.steps: list[dict] = []
        self.step_by_msg: dict[str, dict] = {}
        self.messages: list[dict] = []
        self.model = None
        self.pending_context: list[dict] = []  # model-visible context seen before the agent's first step


def read(ctx: UnitContext):
    cc: dict = {"hook_log": [], "summaries": [], "raw_records": [], "versions": []}
    ctx.provenance["claude_code"] = cc
    main_recs, main_lines = read_jsonl_records(ctx, ctx.path, ctx.source_file)
    order = 0
    tagged = []  # (order, source_file, line, rec)
    for line, _off, rec in main_recs:
        tagged.append((order, ctx.source_file, line, rec))
        order += 1
    sub_files = []
    for c in ctx.companions:
        recs, n = read_jsonl_records(ctx, c, str(c))
        sub_files.append((c, recs, n))

    session = next((r.get("sessionId") for _, _, _, r in tagged if r.get("sessionId")), None)
    if session is None:
        for _, recs, _ in sub_files:
            session = next((r.get("sessionId") for _, _, r in recs if r.get("sessionId")), session)
    session = session or ctx.path.name.split(".")[0]
    eid = str(session)

    counts: dict[str, list[int]] = {}  # source_file -> [total, converted, kept_raw]

    def count(sf, kind):
        c = counts.setdefault(sf, [0, 0, 0])
        c[0] += 1
        c[1 if kind == "converted" else 2] += 1

    agents: dict[str, _Agent] = {"main": _Agent("main", "main")}
    # --- main file: classify records -----------------------------------------------------------
    chain_types = ("user", "assistant", "system")
    by_uuid: dict[str, tuple[int, dict]] = {}
    for o, _sf, _line, r in tagged:
        if r.get("uuid"):
            by_uuid[r["uuid"]] = (o, r)
    main_chain: set[str] = set()
    leaf = None
    for _o, _sf, _line, r in reversed(tagged):
        if r.get("type") in chain_types and not r.get("isSidechain") and r.get("uuid"):
            leaf = r["uuid"]
            break
    u = leaf
    while u and u in by_uuid and u not in main_chain:
        main_chain.add(u)
        u = by_uuid[u][1].get("parentUuid")
    main_tool_ids: set[str] = set()
    for u in main_chain:
        m = by_uuid[u][1].get("message")
        if isinstance(m, dict) and isinstance(m.get("content"), list):
            main_tool_ids.update(b.get("id") for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_use")

    def on_main(r) -> bool:
        if r.get("uuid") in main_chain:
            return True
        m = r.get("message")
        if r.get("type") == "user" and isinstance(m, dict) and isinstance(m.get("content"), list) and m["content"]:
            ids = [b.get("tool_use_id") for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
            if ids and len(ids) == len(m["content"]) and all(i in main_tool_ids for i in ids):
                return True
        return r.get("type") == "assistant" and r.get("parentUuid") in main_chain and leaf is None

    sidechain_root: dict[str, str] = {}
    branch_of: dict[str, str] = {}
    for o, sf, line, r in tagged:
        t = r.get("type")
        if t == "summary":
            cc["summaries"].append({"line": line, "summary": r.get("summary"), "leafUuid": r.get("leafUuid")})
            count(sf, "converted")
            continue
        if t == "attachment":
            att = r.get("attachment") if isinstance(r.get("attachment"), dict) else {}
            if str(att.get("type", "")).startswith("hook_"):
                agent = "main"
                if r.get("isSidechain"):
                    agent = _sidechain_agent(r, by_uuid, sidechain_root) or "main"
                agents.setdefault(agent, _Agent(agent, "sidechain", "main", None, 1)).records.append((o, r))
                count(sf, "converted")
                continue
        if t not in ("user", "assistant"):
            cc["raw_records"].append({"file": "main", "line": line, "record": r})
            count(sf, "kept_raw")
            continue
        count(sf, "converted")
        if r.get("isSidechain"):
            aid = r.get("agentId") and f"{r['agentId']}" or _sidechain_agent(r, by_uuid, sidechain_root)
            if aid not in agents:
                agents[aid] = _Agent(aid, "sidechain", "main", None, 1, source_file=sf)
            agents[aid].records.append((o, r))
        elif on_main(r):
            agents["main"].records.append((o, r))
        else:
            fork = _fork_point(r, by_uuid, main_chain, branch_of)
            aid = f"branch-{fork[:8]}"
            if aid not in agents:
                agents[aid] = _Agent(aid, "abandoned_branch", "main", None, 1, agent_type="abandoned_branch")
            agents[aid].records.append((o, r))

    # --- subagent files ------------------------------------------------------------------------
    for c, recs, _n in sub_files:
        sf = str(c)
        aid = next((r.get("agentId") for _, _, r in recs if r.get("agentId")), None) or c.stem.removeprefix("agent-")
        ag = agents.setdefault(aid, _Agent(aid, "subagent", "main", None, 1, source_file=sf))
        for line, _off, r in recs:
            t = r.get("type")
            if t in ("user", "assistant") or (t == "attachment" and str((r.get("attachment") or {}).get("type", "")).startswith("hook_")):
                ag.records.append((order, r))
                count(sf, "converted")
            elif t == "summary":
                cc["summaries"].append({"file": sf, "line": line, "summary": r.get("summary"), "leafUuid": r.get("leafUuid")})
                count(sf, "converted")
            else:
                cc["raw_records"].append({"file": sf, "line": line, "record": r})
                count(sf, "kept_raw")
            order += 1

    # --- build steps per agent -----------------------------------------------------------------
    call_owner: dict[str, tuple[_Agent, dict, int]] = {}
    for ag in agents.values():
        ag.records.sort(key=lambda x: x[0])
        _build(ag, call_owner, cc, ctx)

    # --- link subagents to their delegating calls ------------------------------------------------
    prompts: dict[str, str] = {}
    agent_ids: dict[str, str] = {}
    for cid, (_ag, act, _s) in call_owner.items():
        if act["tool_type"] == "agent":
            inp = act["_input"] if isinstance(act["_input"], dict) else {}
            if isinstance(inp.get("prompt"), str):
                prompts.setdefault(inp["prompt"].strip(), cid)
        if act.get("_agent_id"):
            agent_ids[str(act["_agent_id"])] = cid
    for ag in agents.values():
        if ag.id == "main" or ag.role == "abandoned_branch":
            continue
        cid = agent_ids.get(ag.id)
        if cid is None:
            first_user = next((m for m in ag.messages if m["role"] == "user" and m["content"]), None)
            if first_user:
                cid = prompts.get(str(first_user["content"]).strip())
        if cid is not None:
            owner, act, _ = call_owner[cid]
            ag.parent, ag.spawned_by, ag.depth = owner.id, cid, owner.depth + 1
            inp = act["_input"] if isinstance(act["_input"], dict) else {}
            ag.role = inp.get("subagent_type") or "subagent"
            ag.type = inp.get("subagent_type")
    # depth may chain (subagent spawning subagents)
    for _ in range(4):
        for ag in agents.values():
            if ag.parent and ag.parent in agents:
                ag.depth = agents[ag.parent].depth + 1

    _emit(ctx, eid, agents, cc)
    for sf, (total, conv, raw) in counts.items():
        ctx_unit = eid if sf == ctx.source_file else f"{eid}/{Path(sf).stem.removeprefix('agent-')}"
        lines_seen = main_lines if sf == ctx.source_file else next(n for c, _, n in sub_files if str(c) == sf)
        dropped = lines_seen - total
        ctx.fidelity(ctx_unit, lines_seen, conv, raw, dropped, source_file=sf)
    if ctx.source_file not in counts:
        ctx.fidelity(eid, main_lines, 0, 0, main_lines, source_file=ctx.source_file)
    for c, _recs, n in sub_files:
        if str(c) not in counts:
            ctx.fidelity(f"{eid}/{c.stem.removeprefix('agent-')}", n, 0, 0, n, source_file=str(c))
    ctx.records = main_lines + sum(n for _, _, n in sub_files)
    yield


def _sidechain_agent(r, by_uuid, cache) -> str:
    path = []
    u = r.get("uuid")
    while u and u in by_uuid and u not in cache:
        path.append(u)
        p = by_uuid[u][1].get("parentUuid")
        if not p or p not in by_uuid:
            break
        u = p
    root = cache.get(u) if u in cache else f"sidechain-{(u or 'x')[:8]}"
    for x in path:
        cache[x] = root
    return root


def _fork_point(r, by_uuid, main_chain, cache) -> str:
    path = []
    u = r.get("uuid") or ""
    first = u
    while u and u in by_uuid and u not in main_chain and u not in cache:
        path.append(u)
        first = u
        u = by_uuid[u][1].get("parentUuid")
    fork = cache.get(u) if u in cache else first
    for x in path:
        cache[x] = fork
    return fork


def _build(ag: _Agent, call_owner: dict, cc: dict, ctx: UnitContext) -> None:
    last_step = None
    for _o, r in ag.records:
        t = r.get("type")
        m = r.get("message") if isinstance(r.get("message"), dict) else {}
        content = m.get("content")
        if t == "assistant":
            mid = m.get("id") or r.get("uuid")
            step = ag.step_by_msg.get(mid)
            if step is None:
                msg = {"role": "assistant", "content": None, "reasoning_content": None, "tool_calls": None,
                       "tool_call_id": None, "name": None}
                step = {"idx": len(ag.steps), "msg_id": mid, "reasoning": [], "content": [], "actions": [],
                        "observations": [], "model": m.get("model"), "usage": None, "stop": None,
                        "started_at": r.get("timestamp"), "prompt_msg_count": len(ag.messages), "intervention": [],
                        "msg": msg, "version": r.get("version"), "request_id": r.get("requestId"), "uuids": []}
                ag.steps.append(step)
                ag.step_by_msg[mid] = step
                ag.messages.append(msg)
            step["uuids"].append(r.get("uuid"))
            if m.get("usage"):
                step["usage"] = m["usage"]
            if m.get("stop_reason"):
                step["stop"] = m["stop_reason"]
            ag.model = ag.model or m.get("model")
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}] if content else []
            for b in blocks:
                if not isinstance(b, dict):
                    continue
                bt = b.get("type")
                if bt == "thinking":
                    step["reasoning"].append(b.get("thinking") or "")
                elif bt == "redacted_thinking":
                    step["reasoning"].append("[redacted thinking]")
                elif bt == "text":
                    step["content"].append(b.get("text") or "")
                elif bt in ("tool_use", "server_tool_use"):
                    name, inp = b.get("name"), b.get("input")
                    act = {"call_idx": len(step["actions"]), "call_id": b.get("id"), "tool_name": name,
                           "arguments": args_text(inp), "action": render_action(name, inp),
                           "action_type": "delegate" if tool_type(name) == "agent" else "tool_use",
                           "tool_type": tool_type(name), "action_valid": None, "_input": inp, "_agent_id": None}
                    step["actions"].append(act)
                    if b.get("id"):
                        call_owner[b["id"]] = (ag, act, step["idx"])
            last_step = step
        elif t == "user":
            blocks = content if isinstance(content, list) else None
            if blocks is None:
                text = content if isinstance(content, str) else text_of(content)
                ag.messages.append(_msg("user", text))
                _reminders(ag, text, last_step)
                continue
            texts = []
            for b in blocks:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    cid = b.get("tool_use_id")
                    res_text = text_of(b.get("content"))
                    ag.messages.append(_msg("tool", res_text, tool_call_id=cid))
                    owner = call_owner.get(cid)
                    is_err = bool(b.get("is_error"))
                    tur = r.get("toolUseResult")
                    if owner:
                        o_ag, act, sidx = owner
                        act["action_valid"] = not is_err
                        if isinstance(tur, dict) and tur.get("agentId"):
                            act["_agent_id"] = tur["agentId"]
                        o_step = o_ag.steps[sidx]
                        o_step["observations"].append({
                            "call_id": cid, "observation_type": "subagent_summary" if act["tool_type"] == "agent"
                            else "tool_result", "content": res_text, "is_error": is_err})
                    else:
                        tgt = last_step
                        if tgt is not None:
                            tgt["observations"].append({"call_id": cid, "observation_type": "tool_result",
                                                        "content": res_text, "is_error": is_err})
                else:
                    texts.append(b)
            if texts:
                text = text_of(texts)
                ag.messages.append(_msg("user", text))
                _reminders(ag, text, last_step)
        elif t == "attachment":
            att = r.get("attachment") or {}
            kind = att.get("type")
            target = last_step
            tid = att.get("toolUseID")
            if tid and tid in call_owner:
                o_ag, _act, sidx = call_owner[tid]
                target = o_ag.steps[sidx] if o_ag is ag else target
            entry = {"kind": kind, "hookName": att.get("hookName"), "hookEvent": att.get("hookEvent"),
                     "toolUseID": tid, "content": att.get("content")}
            if kind in CONTEXT_HOOKS:
                text = text_of(att.get("content"))
                ag.messages.append(_msg("user", text))
                obs = {"call_id": tid, "observation_type": "hook_context", "content": text, "is_error": False}
                if target is not None:
                    target["observations"].append(obs)
                else:
                    ag.pending_context.append(obs)
            elif kind in BLOCKING_HOOKS and target is not None:
                target["intervention"].append(entry)
            else:
                cc["hook_log"].append({"agent_id": ag.id, "step_idx": target["idx"] if target else None, **entry})


def _reminders(ag: _Agent, text: str | None, last_step) -> None:
    if not text or "<system-reminder>" not in text:
        return
    for rem in _REMINDER.findall(text):
        obs = {"call_id": None, "observation_type": "hook_context", "content": rem.strip(), "is_error": False}
        if last_step is not None:
            last_step["observations"].append(obs)
        else:
            ag.pending_context.append(obs)


def _msg(role, content, tool_call_id=None):
    return {"role": role, "content": content, "reasoning_content": None, "tool_calls": None,
            "tool_call_id": tool_call_id, "name": None}


def _emit(ctx: UnitContext, eid: str, agents: dict[str, _Agent], cc: dict) -> None:
    add = ctx.sink.add
    all_steps = []
    for ag in agents.values():
        if ag.pending_context and ag.steps:
            ag.steps[0]["observations"][:0] = ag.pending_context
        for s in ag.steps:
            all_steps.append((s["started_at"] or "", ag.id != "main", ag.id, s["idx"], ag, s))
    all_steps.sort(key=lambda x: (x[0], x[1], x[2], x[3]))
    seq = {(x[2], x[3]): i for i, x in enumerate(all_steps)}
    tin = tout = 0
    n_actions = 0
    times = []
    hooks: dict[tuple[str, int], list] = {}  # log-only hook outcomes of a step go to its steps.metadata
    for h in cc["hook_log"]:
        if h.get("step_idx") is not None:
            hooks.setdefault((h["agent_id"], h["step_idx"]), []).append(
                {k: v for k, v in h.items() if k not in ("agent_id", "step_idx")})
    cc["hook_log"] = [h for h in cc["hook_log"] if h.get("step_idx") is None]
    models, versions = [], []
    for ag in agents.values():
        key = {"episode_id": eid, "attempt": 1, "agent_id": ag.id}
        add("agents", {**key, "parent_agent_id": ag.parent, "agent_role": ag.role, "agent_type": ag.type,
                       "spawned_by_call_id": ag.spawned_by, "depth": ag.depth, "model": ag.model})
        for s in ag.steps:
            msg = s["msg"]
            reasoning = "\n\n".join(s["reasoning"]) if s["reasoning"] else None
            content = "\n".join(s["content"]) if s["content"] else None
            msg["content"], msg["reasoning_content"] = content, reasoning
            calls = s["actions"]
            if calls:
                msg["tool_calls"] = jdump([{"id": a["call_id"], "type": "function",
                                            "function": {"name": a["tool_name"], "arguments": a["arguments"]}}
                                           for a in calls])
            u = s["usage"] or {}
            pt = None
            if u:
                pt = sum(int(u.get(k) or 0) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
            ct = u.get("output_tokens") if u else None
            tin += pt or 0
            tout += ct or 0
            if s["started_at"]:
                times.append(s["started_at"])
            if s["model"] and s["model"] not in models:
                models.append(s["model"])
            if s["version"] and s["version"] not in versions:
                versions.append(s["version"])
            meta = {"version": s["version"], "request_id": s["request_id"], "message_id": s["msg_id"],
                    "uuids": s["uuids"], "usage": u or None}
            if (ag.id, s["idx"]) in hooks:
                meta["hook_log"] = hooks[(ag.id, s["idx"])]
            add("steps", {**key, "step_idx": s["idx"], "seq": seq[(ag.id, s["idx"])],
                          "prompt_msg_count": s["prompt_msg_count"], "reasoning": reasoning, "content": content,
                          "finish_reason": s["stop"], "intervention": jdump(s["intervention"] or None),
                          "response_id": s["msg_id"], "model": s["model"], "tokens_in": pt, "tokens_out": ct,
                          "started_at": s["started_at"], "metadata": jdump(meta)})
            if not calls and content is not None:
                add("actions", {**key, "step_idx": s["idx"], "call_idx": 0, "action": "answer",
                                "action_type": "answer", "tool_type": None})
            for a in calls:
                n_actions += 1
                add("actions", {**key, "step_idx": s["idx"], **{k: v for k, v in a.items() if not k.startswith("_")}})
            for ob in s["observations"]:
                add("observations", {**key, "step_idx": s["idx"], **ob})
        for i, m in enumerate(ag.messages):
            add("messages", {**key, "msg_idx": i, **m})
    main = agents["main"]
    first_user = next((m["content"] for m in main.messages if m["role"] == "user" and m["content"]), None)
    cc["versions"] = versions
    cc["models"] = models
    ctx.run_fields["model_name"] = models[0] if models else None
    add("episodes", {"episode_id": eid, "attempt": 1, **ctx.episode_common(), "status": "completed",
                     "model_steps": len(all_steps), "protocol_errors": 0, "total_actions": n_actions,
                     "tokens_in": tin, "tokens_out": tout, "instruction": first_user,
                     "started_at": min(times) if times else None, "finished_at": max(times) if times else None})
    ctx.episodes = ctx.attempts = 1


register(Reader(name="claude-code", description="Claude Code session transcript (.jsonl, with subagents/)",
                sniff=sniff, read=read, companions=companions))
