"""``dump_episode`` / ``dump_run``: stored episodes back out as ``shopsimrl-episode-v4`` records or ATIF files.

v4 (``dump_v4.py``): rebuilt from the tables plus ``episodes.source_extra``; an ingested record dumps back
JSON-equal to its input minus the private goal (never stored). ``dump_run`` writes a whole run directory
(``traces.jsonl`` with every attempt, ``manifest.json``, ``summary.json``) that the ShopSimRL tools read.

ATIF (v1.7): one trajectory per episode; subagents are embedded in ``extra.subagent_trajectories``
and referenced from the delegating call's observation result (``subagent_trajectory_ref``), so the
ATIF reader ingests the dump back to the same agents and steps.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from .. import __version__
from ..core.errors import IngestError
from ..engines.db import connect
from .stored import _Episode, _iso, _loads, load_episodes  # noqa: F401  (re-exported)

FORMATS = ("shopsimrl-v4", "atif")


def _find(con, episode_id: str, run_id: str | None) -> tuple[str, int]:
    if run_id is None:
        runs = [r[0] for r in con.execute(
            "SELECT DISTINCT run_id FROM stg_episodes WHERE episode_id = ? ORDER BY 1", [episode_id]).fetchall()]
        if not runs:
            raise IngestError(f"no episode {episode_id!r} in this warehouse; list them with "
                              "`shopsim-wh sql \"select run_id, episode_id from episodes\"`")
        if len(runs) > 1:
            raise IngestError(f"episode {episode_id!r} is in several runs ({', '.join(runs)}); pass run_id / --run")
        run_id = runs[0]
    row = con.execute("SELECT max(attempt) FROM stg_episodes WHERE run_id = ? AND episode_id = ?",
                      [run_id, episode_id]).fetchone()
    if row is None or row[0] is None:
        raise IngestError(f"no episode {episode_id!r} in run {run_id!r}")
    return run_id, int(row[0])


def dump_episode(warehouse: str | os.PathLike, episode_id: str, fmt: str, run_id: str | None = None,
                 attempt: int | None = None) -> str:
    """The episode's final attempt (or ``attempt``) as JSON text in ``fmt`` (``shopsimrl-v4`` or ``atif``)."""
    if fmt not in FORMATS:
        raise IngestError(f"unknown dump format {fmt!r}; valid: {', '.join(FORMATS)}")
    con = connect(warehouse)
    try:
        rid, last = _find(con, episode_id, run_id)
        eps = load_episodes(con, rid, episode_id, attempt or last)
    finally:
        con.close()
    if not eps:
        raise IngestError(f"episode {episode_id!r} has no attempt {attempt} in run {rid!r}")
    if fmt == "shopsimrl-v4":
        from .dump_v4 import to_v4
        return orjson.dumps(to_v4(eps[0]), option=orjson.OPT_NON_STR_KEYS).decode()
    return orjson.dumps(to_atif(eps[0]), option=orjson.OPT_NON_STR_KEYS).decode()


def dump_run(warehouse: str | os.PathLike, run_id: str, out_dir: str | os.PathLike) -> Path:
    """Write run ``run_id`` as a ShopSimRL run directory ``out_dir/{traces.jsonl, manifest.json, summary.json}``."""
    from .dump_v4 import write_run_dir
    con = connect(warehouse)
    try:
        if not con.execute("SELECT count(*) FROM stg_runs WHERE run_id = ?", [run_id]).fetchone()[0]:
            raise IngestError(f"no run {run_id!r} in this warehouse; list them with "
                              "`shopsim-wh sql \"select run_id, experiment from runs\"`")
        eps = load_episodes(con, run_id)
    finally:
        con.close()
    return write_run_dir(eps, Path(out_dir))


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
