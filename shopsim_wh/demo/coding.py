"""Synthetic coding-agent sessions (Claude-Code-like) as an ingest reader would land them.

Each session: a ``main`` agent that reads, greps (parallel calls), delegates to an ``Explore`` sub-agent
(whose own steps end in an ``answer`` that comes back as the parent's ``subagent_summary``), edits, runs
tests, receives ``hook_context`` reminders, and answers. Variations by session number plant every coding
error label: tool errors, an edit without a prior read, a repeated identical call, a failing sub-agent.
Messages are consistent with the steps (``prompt_msg_count``), as docs/conventions.md describes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pyarrow as pa

from ..core.schema import TABLES

RUN_ID = "synth-coding"
MODEL = "synth-coder-large"
SUB_MODEL = "synth-coder-small"
TOOLS = {
    "Read": ({"file_path": {"type": "string"}}, "execution"),
    "Edit": ({"file_path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"}}, "execution"),
    "Grep": ({"pattern": {"type": "string"}}, "execution"),
    "Glob": ({"pattern": {"type": "string"}}, "execution"),
    "Bash": ({"command": {"type": "string"}}, "execution"),
    "Task": ({"subagent_type": {"type": "string"}, "prompt": {"type": "string"}}, "agent"),
    "TodoWrite": ({"todos": {"type": "array"}}, "planning"),
}
MAIN_TOOLS = ("Read", "Edit", "Grep", "Bash", "Task", "TodoWrite")
SUB_TOOLS = ("Glob", "Read", "Grep")


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def _schema(name: str) -> dict:
    props, _ = TOOLS[name]
    return {"name": name, "description": f"{name} tool.", "parameters": {"type": "object", "properties": props}}


def _schema_hash(name: str) -> str:
    return _sha(json.dumps(_schema(name), sort_keys=True, separators=(",", ":")))


def _tools_hash(names) -> str:
    return _sha(",".join(sorted(_schema_hash(n) for n in names)))


class _Agent:
    def __init__(self, sess: _Session, agent_id: str, system: str, task: str, model: str, tools) -> None:
        self.s, self.agent_id, self.model, self.tools = sess, agent_id, model, tools
        self.msgs: list[dict] = []
        self.step_idx = 0
        self.msg("system", system)
        self.msg("user", task)

    def msg(self, role: str, content: str | None, **kw) -> None:
        self.msgs.append({"role": role, "content": content, **kw})

    def step(self, calls: list[tuple[str, dict, str, bool]], hook: str | None = None, answer: str | None = None,
             reasoning: str | None = None, obs_type: dict | None = None) -> list[str]:
        """One model turn: calls = [(tool, args, result, is_error)], or a final ``answer``."""
        s, t = self.s, self.step_idx
        base = dict(episode_id=s.eid, attempt=1, agent_id=self.agent_id, step_idx=t)
        s.rows["steps"].append({**base, "seq": s.next_seq(), "prompt_msg_count": len(self.msgs),
                                "tools_hash": _tools_hash(self.tools),
                                "tool_schema_hashes": json.dumps([_schema_hash(n) for n in self.tools]),
                                "reasoning": reasoning,
                                "content": answer, "finish_reason": "stop" if answer else "tool_calls",
                                "model": self.model, "tokens_in": 900 + 250 * len(self.msgs),
                                "tokens_out": 60 + 40 * len(calls), "latency_ms": 1500.0 + 100 * t,
                                "started_at": s.clock()})
        ids, tool_calls = [], []
        for j, (tool, args, _, _) in enumerate(calls):
            cid = f"toolu_{s.n:03d}_{self.agent_id}_{t}_{j}"
            ids.append(cid)
            arg_text = json.dumps(args)
            tool_calls.append({"id": cid, "type": "function", "function": {"name": tool, "arguments": arg_text}})
            kind = "delegate" if TOOLS[tool][1] == "agent" else "tool_use"
            s.rows["actions"].append({**base, "call_idx": j, "call_id": cid, "tool_name": tool, "arguments": arg_text,
                                      "action": f"{tool}({next(iter(args.values()), '')})"[:200],
                                      "action_type": kind, "tool_type": TOOLS[tool][1],
                                      "action_valid": not calls[j][3]})
        if answer is not None and not calls:
            s.rows["actions"].append({**base, "call_idx": 0, "call_id": None, "tool_name": None, "arguments": None,
                                      "action": "answer", "action_type": "answer", "tool_type": None,
                                      "action_valid": True})
        self.msg("assistant", answer, tool_calls=json.dumps(tool_calls) if tool_calls else None)
        for j, (tool, _, result, is_err) in enumerate(calls):
            otype = (obs_type or {}).get(j) or ("subagent_summary" if TOOLS[tool][1] == "agent" else "tool_result")
            s.rows["observations"].append({**base, "call_id": ids[j], "observation_type": otype, "content": result,
                                           "is_error": is_err})
            self.msg("tool", result, tool_call_id=ids[j])
        if hook:
            s.rows["observations"].append({**base, "call_id": None, "observation_type": "hook_context",
                                           "content": hook, "is_error": False})
            self.msg("user", hook)
        self.step_idx += 1
        return ids

    def flush(self) -> None:
        for i, m in enumerate(self.msgs):
            self.s.rows["messages"].append({"episode_id": self.s.eid, "attempt": 1, "agent_id": self.agent_id,
                                            "msg_idx": i, **m})
        for name in self.tools:
            props, ttype = TOOLS[name]
            sch = _schema(name)
            self.s.rows["tools"].append({"episode_id": self.s.eid, "attempt": 1, "agent_id": self.agent_id, "name": name,
                                         "description": sch["description"],
                                         "parameters": json.dumps(sch["parameters"], sort_keys=True),
                                         "tool_type": ttype, "schema_hash": _schema_hash(name)})


class _Session:
    def __init__(self, n: int, rows: dict[str, list[dict]], start: datetime) -> None:
        self.n, self.rows, self.t = n, rows, start
        self.eid = f"session-{n:04d}"
        self.seq = 0

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq - 1

    def clock(self) -> datetime:
        self.t += timedelta(seconds=2)
        return self.t


def _session(n: int, rows: dict[str, list[dict]], start: datetime) -> None:
    s = _Session(n, rows, start)
    main = _Agent(s, "main", "You are a coding agent. Follow CLAUDE.md.", f"Fix the failing test in module_{n}.py",
                  MODEL, MAIN_TOOLS)
    main.step([("Read", {"file_path": f"src/module_{n}.py"}, f"def f():\n    return {n}\n", False)],
              reasoning="Start by reading the module.")
    main.step([("Grep", {"pattern": "def f"}, f"src/module_{n}.py:1", False),
               ("Read", {"file_path": f"tests/test_module_{n}.py"}, "def test_f():\n    assert f() == 0\n", False)],
              reasoning="Read the test and find callers in parallel.")
    # delegate to an Explore sub-agent
    task_args = {"subagent_type": "Explore", "prompt": f"Find where module_{n}.f is used"}
    sub_id = f"agent-{n}-explore"
    sub = _Agent(s, sub_id, "You are an Explore agent: search and report.", task_args["prompt"], SUB_MODEL, SUB_TOOLS)
    summary = f"f is used in src/app.py and tests/test_module_{n}.py (session {n})."
    # the parent's delegate step comes first in time; its summary arrives after the sub-agent's steps
    main_seq_delegate = s.next_seq()
    sub.step([("Glob", {"pattern": "**/*.py"}, "src/app.py\nsrc/module.py", False)])
    sub.step([("Read", {"file_path": "src/app.py"}, "from module import f", False)])
    sub.step([], answer=summary, reasoning="Enough evidence.")
    s.seq, saved = main_seq_delegate, s.seq
    ids = main.step([("Task", task_args, summary, False)], reasoning="Delegate the search.")
    s.seq = saved
    rows["agents"].append({"episode_id": s.eid, "attempt": 1, "agent_id": sub_id, "parent_agent_id": "main",
                           "agent_role": "Explore", "agent_type": "subagent", "spawned_by_call_id": ids[0],
                           "depth": 1, "model": SUB_MODEL})
    sub.flush()
    main.step([("Edit", {"file_path": f"src/module_{n}.py", "old_string": f"return {n}", "new_string": "return 0"},
                "The file has been updated.", False)],
              hook="<system-reminder>Remember to run the tests after editing.</system-reminder>")
    if n % 2 == 0:  # edit of a file never read
        main.step([("Edit", {"file_path": "src/app.py", "old_string": "f()", "new_string": "f() or 0"},
                    "The file has been updated.", False)])
    failing = n % 3 == 0
    main.step([("Bash", {"command": "pytest -q"}, "1 failed" if failing else "1 passed", failing)])
    if failing:  # the same call again
        main.step([("Bash", {"command": "pytest -q"}, "1 passed", False)])
    if n % 4 == 1:  # a verification sub-agent that fails
        vargs = {"subagent_type": "Verification", "prompt": "Verify the fix"}
        vid = f"agent-{n}-verify"
        vsub = _Agent(s, vid, "You are a Verification agent.", vargs["prompt"], SUB_MODEL, SUB_TOOLS)
        dseq = s.next_seq()
        vsub.step([("Grep", {"pattern": "assert"}, "Error: ripgrep crashed", True)])
        s.seq, saved = dseq, s.seq
        vids = main.step([("Task", vargs, "Agent failed: tool error while verifying", True)])
        s.seq = saved
        rows["agents"].append({"episode_id": s.eid, "attempt": 1, "agent_id": vid, "parent_agent_id": "main",
                               "agent_role": "Verification", "agent_type": "subagent", "spawned_by_call_id": vids[0],
                               "depth": 1, "model": SUB_MODEL})
        vsub.flush()
    main.step([("TodoWrite", {"todos": ["fix", "test"]}, "Todos updated", False)])
    main.step([], answer="Fixed f() to return 0; the tests pass.", reasoning="Done.")
    main.flush()
    rows["agents"].append({"episode_id": s.eid, "attempt": 1, "agent_id": "main", "parent_agent_id": None,
                           "agent_role": "main", "agent_type": None, "spawned_by_call_id": None, "depth": 0,
                           "model": MODEL})
    steps = [r for r in rows["steps"] if r["episode_id"] == s.eid]
    rows["episodes"].append({
        "episode_id": s.eid, "attempt": 1, "experiment": "claude-code", "task_id": None, "sample_id": 0,
        "split": None, "status": "completed", "done": True, "termination_reason": "end_turn",
        "model_steps": sum(1 for r in steps if r["agent_id"] == "main"), "protocol_errors": 0,
        "total_actions": sum(1 for r in rows["actions"] if r["episode_id"] == s.eid and r["agent_id"] == "main"
                             and r["action_type"] != "answer"),
        "invalid_actions": 0, "tokens_in": sum(r["tokens_in"] for r in steps),
        "tokens_out": sum(r["tokens_out"] for r in steps), "instruction": f"Fix the failing test in module_{n}.py",
        "started_at": start, "finished_at": s.t, "duration_s": (s.t - start).total_seconds(),
        "source_format": "claude-code", "source_file": f"sessions/{s.eid}.jsonl",
    })


def coding_tables(n: int, seed: int, make: Callable[[str, dict, str], pa.Table]) -> list[tuple[str, pa.Table]]:
    """``n`` sessions as ``(table, arrow table)`` pairs, plus their runs/loads rows."""
    names = ("episodes", "agents", "steps", "actions", "observations", "messages", "tools")
    rows: dict[str, list[dict]] = {k: [] for k in names}
    start = datetime(2026, 2, 1, tzinfo=UTC)
    for i in range(n):
        _session(i, rows, start + timedelta(hours=i))
    load_id = "load-synth-coding"
    out = []
    for name in names:
        cols = {c: [r.get(c) for r in rows[name]] for c in TABLES[name].column_names
                if c not in ("load_id", "schema_version") and any(c in r for r in rows[name])}
        tbl = make(name, cols, load_id)
        out.append((name, tbl.sort_by([(k, "ascending") for k in TABLES[name].sort_key])))
    runs = {"experiment": ["claude-code"], "created_at": [start], "source_format": ["claude-code"],
            "source_file": ["sessions/"], "source_hash": [_sha(f"synth-coding-{seed}-{n}")],
            "model_name": [MODEL], "planned_episodes": [n],
            "fingerprint_fields": [json.dumps({"source": "claude-code", "files": n})]}
    out.append(("runs", make("runs", runs, load_id)))
    out.append(("loads", make("loads", {"command": ["ingest"], "started_at": [start], "finished_at": [start],
                                        "episodes_written": [n], "status": ["complete"]}, load_id)))
    return out
