"""Trajectory IR views and context reconstruction over runner-style and coding-agent episodes."""

from __future__ import annotations

import json

import pytest

from shopsim_wh.engines.db import connect

from .test_analytics_support import synth_connection, synth_warehouse

RUN = "synth-ckpt-a-skill"
CODING = "synth-coding"


@pytest.fixture(scope="module")
def con():
    return synth_connection()


def _dups(con, view: str, key: str) -> int:
    return con.execute(f"SELECT count(*) FROM (SELECT {key} FROM {view} GROUP BY {key} HAVING count(*) > 1)").fetchone()[0]


def test_grains_are_unique_and_complete(con):
    assert _dups(con, "ir_agents", "run_id, trace_id, agent_id") == 0
    n_agents = con.execute("SELECT count(*) FROM (SELECT DISTINCT run_id, episode_id, agent_id FROM steps)").fetchone()[0]
    assert con.execute("SELECT count(*) FROM ir_agents WHERE n_steps > 0").fetchone()[0] == n_agents
    con.execute("""CREATE OR REPLACE TEMP TABLE ir_grain_check AS
        SELECT run_id, trace_id, agent_id, step_idx, action.action_type AS action_type,
               observation.observation_type AS observation_type, n_calls FROM ir_steps""")
    assert _dups(con, "ir_grain_check", "run_id, trace_id, agent_id, step_idx") == 0
    assert con.execute("SELECT count(*) FROM ir_grain_check").fetchone() == con.execute("SELECT count(*) FROM steps").fetchone()
    # every decision's action type is one the issue names; calls match the actions table
    types = {r[0] for r in con.execute("SELECT DISTINCT action_type FROM ir_grain_check").fetchall()}
    assert types - {None} == {"tool_use", "delegate", "answer", "terminate"}
    assert con.execute("SELECT sum(n_calls) FROM ir_grain_check").fetchone() == con.execute("SELECT count(*) FROM actions").fetchone()
    obs_types = {r[0] for r in con.execute("SELECT DISTINCT observation_type FROM ir_grain_check").fetchall()}
    assert {"environment", "tool_result", "subagent_summary", "error"} <= obs_types
    con.execute("DROP TABLE ir_grain_check")


def test_steps_without_a_call_and_terminal_rewards(con):
    row = con.execute(f"""
        SELECT count(*) FILTER (WHERE action IS NULL),
               count(*) FILTER (WHERE action IS NULL AND protocol_error = 'no_tool_call'),
               count(*) FILTER (WHERE action IS NULL AND observation.observation_type = 'error')
        FROM ir_steps WHERE run_id = '{RUN}'""").fetchone()
    assert row[0] > 0 and row[0] == row[1] == row[2]
    # the reward at the terminal step is the episode reward; elsewhere 0
    bad = con.execute(f"""
        SELECT count(*) FROM ir_steps
        WHERE run_id = '{RUN}' AND outcome.status = 'completed'
          AND ((is_terminal AND reward <> outcome.reward) OR (NOT is_terminal AND reward <> 0))""").fetchone()[0]
    assert bad == 0
    terminal = con.execute(f"SELECT count(*) FROM ir_steps WHERE run_id = '{RUN}' AND is_terminal").fetchone()[0]
    completed = con.execute(f"SELECT count(*) FROM episodes WHERE run_id = '{RUN}' AND status = 'completed'").fetchone()[0]
    assert terminal == completed


def test_both_subagent_views(con):
    rows = con.execute(f"""
        SELECT s.episode_id, s.spawned_agent_id, s.observation.observation_type, s.observation.content, a.parent_agent_id,
               a.agent_role, a.depth, a.spawned_by_call_id = s.action.call_id
        FROM ir_steps AS s
        JOIN ir_agents AS a ON a.run_id = s.run_id AND a.trace_id = s.trace_id AND a.agent_id = s.spawned_agent_id
        WHERE s.run_id = '{CODING}' AND s.action.action_type = 'delegate'""").fetchall()
    assert len(rows) == 8  # 6 Explore + 2 Verification
    for _, _child, otype, content, parent, role, depth, linked in rows:
        assert otype == "subagent_summary" and parent == "main" and depth == 1 and linked
        assert role in ("Explore", "Verification") and content
    # the child's own steps are there, under its parent, and its last answer is the parent's summary
    ep, child = rows[0][0], rows[0][1]
    child_steps = con.execute(f"""
        SELECT step_idx, parent_agent_id, depth, action.action_type, content FROM ir_steps
        WHERE run_id = '{CODING}' AND episode_id = ? AND agent_id = ? ORDER BY step_idx""", [ep, child]).fetchall()
    assert len(child_steps) >= 2 and all(r[1] == "main" and r[2] == 1 for r in child_steps)
    summary = [r for r in rows if r[1] == child][0][3]
    assert child_steps[-1][3] == "answer" and child_steps[-1][4] == summary
    # parallel calls are all there, in call order, each with its own result
    par = con.execute(f"""SELECT calls FROM ir_steps WHERE run_id = '{CODING}' AND n_calls = 2 LIMIT 1""").fetchone()[0]
    assert [c["call_idx"] for c in par] == [0, 1]
    assert all(c["observation"]["call_id"] == c["action"]["call_id"] for c in par)
    hooks = con.execute(f"SELECT count(*) FROM ir_steps WHERE run_id = '{CODING}' AND hook_context LIKE '%system-reminder%'").fetchone()[0]
    assert hooks == 6


def _messages(con, run, ep, agent, below=None):
    rows = con.execute(
        "SELECT msg_idx, role, content, reasoning_content, tool_calls, tool_call_id FROM messages "
        "WHERE run_id = ? AND episode_id = ? AND agent_id = ? AND msg_idx < coalesce(?, 1000000) ORDER BY msg_idx",
        [run, ep, agent, below]).fetchall()
    return [_norm(r[1:]) for r in rows]


def _norm(r):
    role, content, reasoning, tool_calls, tool_call_id = r
    return (role, content, reasoning, json.loads(tool_calls) if tool_calls else None, tool_call_id)


def _sample_steps(con, run, n=12):
    return con.execute(f"""
        SELECT episode_id, agent_id, step_idx, prompt_msg_count FROM steps
        WHERE run_id = '{run}' ORDER BY hash(episode_id || agent_id || step_idx) LIMIT {n}""").fetchall()


@pytest.mark.parametrize("run", [RUN, "synth-ckpt-b-bare", CODING])
def test_full_context_is_what_the_model_saw(con, run):
    for ep, agent, step, pmc in _sample_steps(con, run):
        ctx = con.execute("SELECT role, content, reasoning_content, tool_calls, tool_call_id FROM ir_context(?, ?, ?, ?, NULL)",
                          [run, ep, agent, step]).fetchall()
        assert [_norm(r) for r in ctx] == _messages(con, run, ep, agent, pmc)


@pytest.mark.parametrize("run", [RUN, CODING])
def test_ir_render_reproduces_the_recorded_messages(con, run):
    """The IR alone (steps, actions, observations) is lossless for what the model saw."""
    episodes = con.execute(f"SELECT DISTINCT episode_id, agent_id FROM steps WHERE run_id = '{run}' LIMIT 25").fetchall()
    for ep, agent in episodes:
        rendered = con.execute("SELECT role, content, reasoning_content, tool_calls, tool_call_id FROM ir_render(?, ?, ?) "
                               "ORDER BY from_step, sub", [run, ep, agent]).fetchall()
        prefix = con.execute("SELECT min(prompt_msg_count) FROM steps WHERE run_id = ? AND episode_id = ? AND agent_id = ?",
                             [run, ep, agent]).fetchone()[0]
        recorded = _messages(con, run, ep, agent)[prefix:]
        assert [_norm(r) for r in rendered] == recorded


def test_window_of_k_turns(con):
    ep, agent, step, _ = con.execute(f"""
        SELECT episode_id, agent_id, step_idx, prompt_msg_count FROM steps
        WHERE run_id = '{RUN}' AND step_idx = 9 ORDER BY episode_id LIMIT 1""").fetchone()
    full = con.execute("SELECT part, from_step, role FROM ir_context(?, ?, ?, ?, NULL)", [RUN, ep, agent, step]).fetchall()
    two = con.execute("SELECT position, part, from_step, role FROM ir_context(?, ?, ?, ?, 2)", [RUN, ep, agent, step]).fetchall()
    assert [r[0] for r in two] == list(range(len(two)))
    assert [r[1:] for r in two] == [r for r in full if r[0] == "prefix" or r[1] >= step - 2]
    assert {r[2] for r in two if r[1] == "history"} == {step - 2, step - 1}
    assert [r[3] for r in two][:2] == ["system", "user"]
    zero = con.execute("SELECT count(*) FROM ir_context(?, ?, ?, ?, 0)", [RUN, ep, agent, step]).fetchone()[0]
    assert zero == 2  # the global prefix alone


def test_token_budget_variant(con):
    ep, agent, step = con.execute(f"""
        SELECT episode_id, agent_id, step_idx FROM steps WHERE run_id = '{RUN}' AND step_idx = 12
        ORDER BY episode_id LIMIT 1""").fetchone()
    full = con.execute("SELECT part, from_step, est_tokens, content, tool_calls, reasoning_content FROM "
                       "ir_context_messages(?, ?, ?, ?)", [RUN, ep, agent, step]).fetchall()
    for _part, _, est, content, tool_calls, reasoning in full:  # the documented estimate
        chars = len(content or "") + len(tool_calls or "") + len(reasoning or "")
        assert est == -(-chars // 4) + 4
    prefix = sum(r[2] for r in full if r[0] == "prefix")
    previous = None
    for budget in (10, prefix, prefix + 300, prefix + 1500, 10**9):
        kept = con.execute("SELECT part, from_step, est_tokens FROM ir_context_budget(?, ?, ?, ?, ?)",
                           [RUN, ep, agent, step, budget]).fetchall()
        turns = sorted({r[1] for r in kept if r[0] == "history"})
        assert sum(r[2] for r in kept if r[0] == "prefix") == prefix  # the prefix is always kept
        if turns:
            assert sum(r[2] for r in kept) <= budget
            assert turns == list(range(step - len(turns), step))  # the most recent whole turns
        if previous is not None:
            assert len(turns) >= previous
        previous = len(turns)
    assert previous == step  # a huge budget keeps every earlier turn


def test_context_json_is_an_openai_message_list(con):
    ep, agent, step = con.execute(f"""SELECT episode_id, agent_id, step_idx FROM steps
        WHERE run_id = '{RUN}' AND step_idx = 5 ORDER BY episode_id LIMIT 1""").fetchone()
    messages, n, est = con.execute("SELECT * FROM ir_context_json(?, ?, ?, ?, 3)", [RUN, ep, agent, step]).fetchone()
    doc = json.loads(messages)
    rows = con.execute("SELECT role, content, tool_call_id, est_tokens FROM ir_context(?, ?, ?, ?, 3)",
                       [RUN, ep, agent, step]).fetchall()
    assert n == len(doc) == len(rows) and est == sum(r[3] for r in rows)
    for m, (role, content, tool_call_id, _) in zip(doc, rows, strict=True):
        assert m["role"] == role and m.get("content") == content and m.get("tool_call_id") == tool_call_id
        if "tool_calls" in m:
            assert m["role"] == "assistant" and isinstance(m["tool_calls"], list)
            assert all(tc["type"] == "function" and "arguments" in tc["function"] for tc in m["tool_calls"])
    tools = con.execute("SELECT name, tool FROM ir_tools(?, ?, ?)", [RUN, ep, agent]).fetchall()
    assert {t[0] for t in tools} == {"search", "click"}
    assert json.loads(tools[0][1])["type"] == "function"


def test_context_falls_back_to_the_ir_without_recorded_messages():
    root, _ = synth_warehouse()
    con = connect(root)
    con.execute("CREATE OR REPLACE VIEW messages AS SELECT * FROM stg_messages WHERE false")
    ref = synth_connection()
    ep, step = ref.execute(f"""SELECT episode_id, step_idx FROM steps WHERE run_id = '{RUN}' AND step_idx = 6
                               ORDER BY episode_id LIMIT 1""").fetchone()
    ctx = con.execute("SELECT part, role, content, reasoning_content, tool_calls, tool_call_id FROM ir_context(?, ?, 'main', ?, NULL)",
                      [RUN, ep, step]).fetchall()
    recorded = _messages(ref, RUN, ep, "main", ref.execute(
        "SELECT prompt_msg_count FROM steps WHERE run_id = ? AND episode_id = ? AND agent_id = 'main' AND step_idx = ?",
        [RUN, ep, step]).fetchone()[0])
    assert ctx[0][:2] == ("prefix", "user")
    instruction = ref.execute("SELECT instruction FROM episodes WHERE run_id = ? AND episode_id = ?", [RUN, ep]).fetchone()[0]
    assert ctx[0][2] == instruction
    assert [_norm(r[1:]) for r in ctx[1:]] == recorded[2:]  # the turns are the same; the prefix is the task
    sub = ref.execute(f"""SELECT episode_id, agent_id FROM ir_agents WHERE run_id = '{CODING}' AND depth = 1 LIMIT 1""").fetchone()
    first = con.execute("SELECT role, content FROM ir_context(?, ?, ?, 1, NULL) WHERE position = 0", [CODING, *sub]).fetchone()
    assert first[0] == "user" and "prompt" in json.loads(first[1])  # a sub-agent's task: the delegating call's arguments


def test_ir_render_reproduces_real_runner_messages(tmp_path):
    """On the runner's own episodes (embedded shop and scripted policy, protocol errors injected), the IR alone
    renders every turn exactly as recorded in `messages`, and the views hold their grain."""
    from shopsim_wh.core.config import load_config
    from shopsim_wh.rollout import runner

    from .helpers import write_config

    cfg = load_config(write_config(tmp_path / "c.yaml", tasks={"sample_size": 6}, model={"extra_body": {
        "scripted_policy": {"failure_rates": {"no_tool_call": 0.15, "multiple_tool_calls": 0.1}}}}))
    runner.run(cfg, str(tmp_path / "wh"))
    con = connect(tmp_path / "wh")
    episodes = con.execute("SELECT run_id, episode_id FROM episodes").fetchall()
    assert len(episodes) == 6
    assert con.execute("SELECT count(*) FROM steps WHERE protocol_error IS NOT NULL").fetchone()[0] > 0
    for run, ep in episodes:
        rendered = con.execute("SELECT role, content, reasoning_content, tool_calls, tool_call_id FROM "
                               "ir_render(?, ?, 'main') ORDER BY from_step, sub", [run, ep]).fetchall()
        prefix = con.execute("SELECT min(prompt_msg_count) FROM steps WHERE run_id = ? AND episode_id = ?",
                             [run, ep]).fetchone()[0]
        assert [_norm(r) for r in rendered] == _messages(con, run, ep, "main")[prefix:]
    for view, key in (("ir_steps", "run_id, trace_id, agent_id, step_idx"), ("error_labels", "run_id, episode_id, agent_id, step_idx, code"),
                      ("episode_primary_failure", "run_id, episode_id"), ("run_metrics", "run_id")):
        assert _dups(con, view, key) == 0, view
