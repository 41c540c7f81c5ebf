"""Stored episodes read back from the warehouse, one attempt at a time: what ``dump`` (dump.py, dump_v4.py) and
the export's record kinds (export/records.py) rebuild records from."""

from __future__ import annotations

from collections.abc import Collection

import orjson

_TABLES = {  # table -> order within an attempt
    "agents": "depth, agent_id", "steps": "agent_id, step_idx", "actions": "agent_id, step_idx, call_idx",
    "observations": "agent_id, step_idx, call_id NULLS FIRST", "messages": "agent_id, msg_idx",
    "skills_selected": "skill_id", "failures": "attempt",
}


def _loads(s):
    return None if s is None else orjson.loads(s)


def _iso(v):
    return None if v is None else v.isoformat()


def _fetch(con, sql: str, params: list) -> list[dict]:
    cur = con.execute(sql, params)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


class _Episode:
    """One stored attempt: its rows of every table (``of`` filters them by agent / step)."""

    def __init__(self, run_id: str, eid: str, attempt: int, episode: dict, rows: dict[str, list[dict]],
                 tools: list[dict], run: dict):
        self.run_id, self.eid, self.attempt, self.episode = run_id, eid, attempt, episode
        self.agents, self.steps, self.actions = rows["agents"], rows["steps"], rows["actions"]
        self.observations, self.messages = rows["observations"], rows["messages"]
        self.skills, self.failures, self.tools = rows["skills_selected"], rows["failures"], tools
        self.run = run
        self.run_prov = _loads(run.get("provenance")) or {} if run else {}
        self.run_source_format = run.get("source_format") if run else None

    def of(self, rows, agent_id, step_idx=None):
        return [r for r in rows if r["agent_id"] == agent_id and (step_idx is None or r["step_idx"] == step_idx)]


def load_episodes(con, run_id: str, episode_id: str | None = None, attempt: int | None = None,
                  episode_ids: list[str] | None = None, base_views: Collection[str] = ()) -> list[_Episode]:
    """Every stored attempt of a run (or of one episode / attempt, or of the episodes ``episode_ids``), in
    (episode_id, attempt) order: one query per table, grouped here, so dumping a whole run does not cost one
    round trip per episode. ``base_views``: tables read through their base view (the rows of each episode's last
    attempt) instead of ``stg_``, for a caller that wants the last attempts only: in an export's batch those views
    are the batch's own copy, where ``stg_`` would scan the whole warehouse once per call (the record kinds'
    fallback, export/records.py: its cost grew with the warehouse times the batches)."""
    cond, params = "run_id = ?", [run_id]
    if episode_id is not None:
        cond, params = cond + " AND episode_id = ?", params + [episode_id]
    if episode_ids is not None:
        cond, params = cond + " AND list_contains(?, episode_id)", params + [list(episode_ids)]
    if attempt is not None:
        cond, params = cond + " AND attempt = ?", params + [attempt]
    eps = _fetch(con, f"SELECT * FROM stg_episodes WHERE {cond} ORDER BY episode_id, attempt", params)
    grouped: dict[str, dict[tuple, list]] = {}

    def table(t: str) -> str:
        return t if t in base_views else f"stg_{t}"

    for t, order in _TABLES.items():
        g = grouped[t] = {}
        for r in _fetch(con, f"SELECT * FROM {table(t)} WHERE {cond} ORDER BY episode_id, attempt, {order}", params):
            g.setdefault((r["episode_id"], r["attempt"]), []).append(r)
    tcond = cond.replace(" AND attempt = ?", "")
    tools: dict[str, list] = {}
    for r in _fetch(con, f"SELECT * FROM {table('tools')} WHERE {tcond} ORDER BY episode_id, agent_id, name",
                    params if attempt is None else params[:-1]):
        tools.setdefault(r["episode_id"], []).append(r)
    run = _fetch(con, "SELECT * FROM stg_runs WHERE run_id = ?", [run_id])
    out = []
    for e in eps:
        k = (e["episode_id"], e["attempt"])
        rows = {t: grouped[t].get(k, []) for t in _TABLES}
        ts = [t for t in tools.get(e["episode_id"], []) if t["attempt"] in (None, e["attempt"])]
        out.append(_Episode(run_id, e["episode_id"], e["attempt"], e, rows, ts, run[0] if run else {}))
    return out
