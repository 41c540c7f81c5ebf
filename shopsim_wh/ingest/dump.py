"""``dump_episode``: re-emit one stored episode as a ``shopsimrl-episode-v4`` record or an ATIF file.

v4: rebuilt from the tables plus ``episodes.source_extra`` (what the tables cannot hold, see v4.py;
warehouses written before it existed: ``runs.provenance.v4_residual``); an ingested record dumps back
equal to its input except key order, timestamp formatting and the private goal (never stored). A
step's tools come back in the offered order (``steps.tool_schema_hashes``; without it, the set that
hashes to ``steps.tools_hash``, sorted by name).

ATIF (v1.7): one trajectory per episode; subagents are embedded in ``extra.subagent_trajectories``
and referenced from the delegating call's observation result (``subagent_trajectory_ref``), so the
ATIF reader ingests the dump back to the same agents and steps.
"""

from __future__ import annotations

import hashlib
import itertools
import os

import orjson

from .. import __version__
from ..db import connect
from ..errors import IngestError

V4 = "shopsimrl-episode-v4"


def _loads(s):
    return None if s is None else orjson.loads(s)


def _iso(v):
    return None if v is None else v.isoformat()


class _Episode:
    def __init__(self, con, run_id: str, eid: str, attempt: int):
        self.run_id, self.eid, self.attempt = run_id, eid, attempt
        p = [run_id, eid, attempt]

        def rows(table, order, attempt_col=True):
            cond = "run_id = ? AND episode_id = ?" + (" AND attempt = ?" if attempt_col else "")
            cur = con.execute(f"SELECT * FROM stg_{table} WHERE {cond} ORDER BY {order}", p if attempt_col else p[:2])
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]

        self.episode = rows("episodes", "attempt")[0]
        self.agents = rows("agents", "depth, agent_id")
        self.steps = rows("steps", "agent_id, step_idx")
        self.actions = rows("actions", "agent_id, step_idx, call_idx")
        self.observations = rows("observations", "agent_id, step_idx")
        self.messages = rows("messages", "agent_id, msg_idx")
        self.skills = rows("skills_selected", "skill_id")
        self.failures = rows("failures", "attempt")
        self.tools = rows("tools", "agent_id, name", attempt_col=False)
        cur = con.execute("SELECT provenance, tool_version, source_format FROM stg_runs WHERE run_id = ?", [run_id])
        r = cur.fetchone()
        self.run_prov = _loads(r[0]) if r and r[0] else {}
        self.run_source_format = r[2] if r else None

    def of(self, rows, agent_id, step_idx=None):
        return [r for r in rows if r["agent_id"] == agent_id and (step_idx is None or r["step_idx"] == step_idx)]


def _find(con, episode_id: str, run_id: str | None) -> tuple[str, int]:
    if run_id is None:
        runs = [r[0] for r in con.execute(
            "SELECT DISTINCT run_id FROM stg_episodes WHERE episode_id = ? ORDER BY 1", [episode_id]).fetchall()]
        if not runs:
            raise IngestError(f"no episode {episode_id!r} in this warehouse")
        if len(runs) > 1:
            raise IngestError(f"episode {episode_id!r} is in several runs ({', '.join(runs)}); pass run_id / --run")
        run_id = runs[0]
    row = con.execute("SELECT max(attempt) FROM stg_episodes WHERE run_id = ? AND episode_id = ?",
                      [run_id, episode_id]).fetchone()
    if row is None or row[0] is None:
        raise IngestError(f"no episode {episode_id!r} in run {run_id!r}")
    return run_id, int(row[0])


def dump_episode(warehouse: str | os.PathLike, episode_id: str, fmt: str, run_id: str | None = None) -> str:
    """The episode's final attempt as JSON text in ``fmt`` (``shopsimrl-v4`` or ``atif``)."""
    if fmt not in ("shopsimrl-v4", "atif"):
        raise IngestError(f"unknown dump format {fmt!r}; valid: shopsimrl-v4, atif")
    con = connect(warehouse)
    try:
        rid, attempt = _find(con, episode_id, run_id)
        ep = _Episode(con, rid, episode_id, attempt)
    finally:
        con.close()
    doc = to_v4(ep) if fmt == "shopsimrl-v4" else to_atif(ep)
    return orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS).decode()


# --- shopsimrl-episode-v4 ----------------------------------------------------------------------
def _tool_sets(tools: list[dict]):
    by_hash = {t["schema_hash"]: t for t in tools}
    hashes = sorted(by_hash)
    sets: dict[str, list[str]] = {}

    def key(hs):
        return hashlib.sha256(",".join(sorted(hs)).encode()).hexdigest()

    sets[key(hashes)] = hashes
    for k in (1, 2, 3):
        if k > len(hashes) or (k == 3 and len(hashes) > 40):
            break
        for combo in itertools.combinations(hashes, k):
            sets.setdefault(key(combo), list(combo))
    return by_hash, sets


def _tool_json(t: dict) -> dict:
    return {"type": "function", "function": {"name": t["name"], "description": t["description"],
                                             "parameters": _loads(t["parameters"])}}


def to_v4(ep: _Episode) -> dict:
    e = ep.episode
    res = _loads(e.get("source_extra")) or (ep.run_prov.get("v4_residual") or {}).get(f"{ep.eid}#{ep.attempt}", {})
    msgs = ep.of(ep.messages, "main")
    conv = []
    for m in msgs:
        d = {"role": m["role"], "content": m["content"]}
        for k in ("reasoning_content", "tool_call_id", "name"):
            if m[k] is not None:
                d[k] = m[k]
        if m["tool_calls"] is not None:
            d["tool_calls"] = _loads(m["tool_calls"])
        extra = (res.get("messages") or {}).get(str(m["msg_idx"]), {})
        if extra.pop("content_json", False) and d["content"] is not None:
            d["content"] = _loads(d["content"])
        d.update(extra)
        conv.append(d)
    by_hash, sets = _tool_sets(ep.of(ep.tools, "main"))
    steps = []
    for s in ep.of(ep.steps, "main"):
        i = s["step_idx"]
        si = str(i)
        acts = ep.of(ep.actions, "main", i)
        act = acts[0] if acts else None
        obs = [o for o in ep.of(ep.observations, "main", i) if o["observation_type"] == "environment"]
        ob = obs[0] if obs else None
        tc = None
        if act and (act["call_id"] is not None or act["tool_name"] is not None):
            args = act["arguments"]
            if i in (res.get("args_json") or []):
                args = _loads(args)
            tc = {"id": act["call_id"], "name": act["tool_name"], "arguments": args}
            tc.update({k: v for k, v in (res.get("tool_call") or {}).get(si, {}).items() if k not in tc})
        pe = s["protocol_error"]
        if si in (res.get("feedback") or {}):
            fb = res["feedback"][si]
        elif pe or act is None or i in (res.get("feedback_null") or []):
            fb = None
        else:
            fb = {"valid": act["action_valid"], "code": act["feedback_code"], "message": act["feedback_message"]}
        env = None
        if ob is not None:
            env = {"observation": ob["content"], "observation_state": _loads(ob["observation_state"]),
                   "reward": ob["reward"], "done": ob["done"]}
            env.update((res.get("environment") or {}).get(si, {}))
        usage = {"prompt_tokens": s["tokens_in"], "completion_tokens": s["tokens_out"]}
        usage.update((res.get("usage") or {}).get(si, {}))
        pf = (res.get("policy_failure") or {}).get(si) or ({"code": s["policy_failure"]} if s["policy_failure"] else None)
        tools = None
        if i not in (res.get("no_tools") or []):
            exact = _loads(s.get("tool_schema_hashes"))
            if exact is not None and all(h in by_hash for h in exact):
                tools = [_tool_json(by_hash[h]) for h in exact]  # the offered order
            else:  # older warehouses: the set that hashes to tools_hash, sorted by name
                members = sets.get(s["tools_hash"]) if s["tools_hash"] else None
                tools = sorted((_tool_json(by_hash[h]) for h in members or []), key=lambda t: t["function"]["name"])
        step = {"step": (res.get("step_numbers") or {}).get(si, i),
                "observation_state": _loads(s["observation_state"]), "tools": tools, "thinking": s["reasoning"],
                "content": s["content"], "tool_call": tc,
                "action": None if act is None or act["action_type"] == "terminate" else act["action"],
                "finish_reason": s["finish_reason"], "response_id": s["response_id"], "model": s["model"],
                "seed": s["step_seed"], "usage": usage, "latency_ms": s["latency_ms"],
                "started_at": _iso(s["started_at"]), "environment": env, "action_feedback": fb,
                "protocol_error": pe, "protocol_feedback": s["protocol_feedback"], "policy_failure": pf,
                "raw_response": _loads(s["raw_response"])}
        if i in (res.get("no_tools") or []):
            del step["tools"]
        step.update((res.get("steps") or {}).get(si, {}))
        steps.append(step)
    reset = {"instruction": e["instruction"], "persona": e["persona"]}
    ro = res.get("reset_obs")
    if isinstance(ro, list) and ro[0] < len(msgs):
        reset["observation"] = (msgs[ro[0]]["content"] or "")[ro[1]:ro[1] + ro[2]]
    elif isinstance(ro, dict):
        reset["observation"] = ro.get("text")
    if "reset_state" in res:
        reset["observation_state"] = res["reset_state"]
    elif steps:
        reset["observation_state"] = steps[0]["observation_state"]
    reset.update(res.get("reset_extra") or {})
    skill_order = _loads(e["skill_ids"]) or []
    skills_by_id = {sk["skill_id"]: sk for sk in ep.skills}
    skills = []
    for sid in skill_order:
        sk = skills_by_id.get(sid)
        if sk:
            d = {"id": sk["skill_id"], "version": sk["skill_version"], "scope": sk["scope"], "content": sk["content"],
                 "content_hash": sk["content_hash"], "metadata": _loads(sk["metadata"])}
            d.update((res.get("skills") or {}).get(str(sid), {}))
            skills.append(d)
    final = {"reward": e["reward"], "reward_detail": _loads(e["reward_detail"]),
             "purchase": res.get("purchase", {"asin": e["purchase_asin"]} if e["purchase_asin"] else None),
             "termination_reason": e["termination_reason"], "done": e["done"]}
    final.update(res.get("final_extra") or {})
    err = None
    if ep.failures:
        f = ep.failures[0]
        err = {"stage": f["stage"], "type": f["exception_type"], "message": f["message"], "traceback": f["traceback"]}
        err.update(res.get("error_extra") or {})
    job = {"task_id": e["task_id"], "sample_id": e["sample_id"], "seed": e["seed"], "split": e["split"]}
    job.update(res.get("job") or {})
    prov = res.get("provenance", (ep.run_prov.get("v4") or {}).get("record_provenance"))
    rec = {"schema": V4, "episode_id": ep.eid, "job": job, "status": e["status"], "provenance": prov,
           "reset": reset, "selected_skills": skills, "conversation": conv, "steps": steps,
           "final": None if res.get("final_null") else final, "error": err,
           "started_at": _iso(e["started_at"]), "finished_at": _iso(e["finished_at"]), "duration_s": e["duration_s"]}
    if res.get("no_final"):
        del rec["final"]
    for k in res.get("absent") or []:
        rec.pop(k, None)
    for k in res.get("null") or []:
        rec[k] = None
    rec.update(res.get("extra") or {})
    return rec


# --- ATIF --------------------------------------------------------------------------------------
def to_atif(ep: _Episode) -> dict:
    e = ep.episode
    agents = {a["agent_id"]: a for a in ep.agents}
    by_call = {a["spawned_by_call_id"]: a for a in ep.agents if a["spawned_by_call_id"]}
    subs: list[dict] = []

    def traj(agent_id: str, session_id: str) -> dict:
        steps_out = []
        steps = {s["step_idx"]: s for s in ep.of(ep.steps, agent_id)}
        msgs = ep.of(ep.messages, agent_id)
        k = 0
        items: list[tuple[str, object]] = []
        for m in msgs:
            if m["role"] == "assistant":
                if k in steps:
                    items.append(("step", steps[k]))
                k += 1
            elif m["role"] in ("system", "user"):
                items.append((m["role"], m))
        items += [("step", steps[i]) for i in sorted(steps) if i >= k]  # steps without an assistant message
        for kind, obj in items:
            sid = len(steps_out) + 1
            if kind != "step":
                steps_out.append({"step_id": sid, "source": kind, "message": obj["content"] or ""})
                continue
            s = obj
            out = {"step_id": sid, "source": "agent", "message": s["content"] or ""}
            if s["started_at"] is not None:
                out["timestamp"] = s["started_at"].isoformat()
            if s["model"]:
                out["model_name"] = s["model"]
            if s["reasoning"] is not None:
                out["reasoning_content"] = s["reasoning"]
            calls = [a for a in ep.of(ep.actions, agent_id, s["step_idx"]) if a["call_id"] or a["tool_name"]]
            if calls:
                out["tool_calls"] = [{"tool_call_id": a["call_id"], "function_name": a["tool_name"],
                                      "arguments": _args_obj(a["arguments"])} for a in calls]
            results = []
            for o in ep.of(ep.observations, agent_id, s["step_idx"]):
                r = {"source_call_id": o["call_id"], "content": o["content"]}
                child = by_call.get(o["call_id"]) if o["observation_type"] == "subagent_summary" else None
                if child is not None:
                    csid = f"{ep.eid}::{child['agent_id']}"
                    r["subagent_trajectory_ref"] = [{"session_id": csid, "trajectory_path": None, "extra": {
                        "agent_id": child["agent_id"], "agent_role": child["agent_role"], "embedded": True}}]
                    subs.append(traj(child["agent_id"], csid))
                results.append(r)
            if results:
                out["observation"] = {"results": results}
            metrics = {k2: v for k2, v in (("prompt_tokens", s["tokens_in"]), ("completion_tokens", s["tokens_out"]))
                       if v is not None}
            if metrics:
                out["metrics"] = metrics
            steps_out.append(out)
        a = agents.get(agent_id) or {}
        return {"schema_version": "ATIF-v1.7", "session_id": session_id,
                "agent": {"name": "shopsim-wh", "version": __version__, "model_name": a.get("model")},
                "steps": steps_out}

    doc = traj("main", ep.eid)
    doc["final_metrics"] = {"total_prompt_tokens": e["tokens_in"], "total_completion_tokens": e["tokens_out"],
                            "total_steps": len(doc["steps"]), "extra": {"reward": e["reward"]}}
    doc["extra"] = {"episode": {"run_id": ep.run_id, "attempt": ep.attempt, "status": e["status"], "done": e["done"],
                                "reward": e["reward"], "termination_reason": e["termination_reason"],
                                "source_format": e["source_format"], "task_id": e["task_id"],
                                "sample_id": e["sample_id"]},
                    "subagent_trajectories": subs}
    return doc


def _args_obj(a):
    if a is None:
        return {}
    try:
        v = orjson.loads(a)
    except orjson.JSONDecodeError:
        return {"_raw": a}
    return v if isinstance(v, dict) else {"_value": v}
