"""agent_multi_turn (fixtures from seed 001 part 2) and Claude Code hooks / branches (synthetic fixture)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shopsim_wh.engines.db import connect
from shopsim_wh.ingest import detect, dump_episode, ingest

FIX = Path(__file__).resolve().parent / "fixtures" / "ingest"


@pytest.fixture(scope="module")
def whdir(tmp_path_factory):
    wh = tmp_path_factory.mktemp("coding")
    s = ingest([FIX / "agent_multi_turn", FIX / "claude_code"], wh)
    assert {f.status for f in s.files} == {"landed"}, s.files
    return wh


@pytest.fixture(scope="module")
def con(whdir):
    c = connect(whdir)
    yield c
    c.close()


def q(con, sql, *p):
    return con.execute(sql, list(p)).fetchall()


def test_detection():
    head = (FIX / "agent_multi_turn" / "sporehub.json").read_bytes()[:4096]
    assert detect(head, Path("x.json")) == "agent-multi-turn"
    assert detect((FIX / "claude_code" / "5e55a0b0-hook-fixture.jsonl").read_bytes()[:4096], Path("x")) == "claude-code"


def test_seed_example_agents_and_dedup(con):
    e = "agent_trace_000123"
    assert q(con, "select agent_id, agent_role, agent_type, parent_agent_id, spawned_by_call_id, depth from agents "
                  "where episode_id = ? order by depth", e) == [
        ("main", "main", None, None, None, 0),
        ("segment_1", "explore_agent", "Explore", "main", "toolu_002", 1)]
    # main: segment_0 and the overlapping segment_2 merge into one chain; nothing double-counted
    steps = q(con, "select step_idx, reasoning is not null, content from steps where episode_id = ? and agent_id = 'main' "
                   "order by step_idx", e)
    assert [s[0] for s in steps] == [0, 1, 2] and steps[2][2] == "最终架构分析与框架图说明..."
    assert q(con, "select role, tool_call_id from messages where episode_id = ? and agent_id = 'main' order by msg_idx", e) == [
        ("user", None), ("assistant", None), ("tool", "toolu_001"), ("assistant", None), ("tool", "toolu_002"),
        ("assistant", None)]
    # the first (complete) delegate call wins over the abridged repeat
    args = json.loads(q(con, "select arguments from actions where episode_id = ? and call_id = 'toolu_002'", e)[0][0])
    assert args == {"agent_type": "Explore", "query": "分析仓库结构并总结系统架构"}
    assert q(con, "select observation_type, content from observations where episode_id = ? and call_id = 'toolu_002'", e) == [
        ("subagent_summary", "Explore Summary: 仓库采用 monorepo 结构...")]
    assert q(con, "select tool_name, tool_type, action_type from actions where episode_id = ? and agent_id = 'main' "
                  "order by step_idx", e) == [("list_dir", "execution", "tool_use"), ("delegate_subtask", "agent", "delegate"),
                                              (None, None, "answer")]
    assert q(con, "select count(*) from steps where episode_id = ? and agent_id = 'segment_1'", e) == [(3,)]
    assert q(con, "select name, tool_type from tools where episode_id = ? and agent_id = 'main' order by name", e) == [
        ("delegate_subtask", "agent"), ("list_dir", "execution"), ("read_file", "execution")]
    prov = json.loads(q(con, "select provenance from runs where source_file like '%sporehub.json'")[0][0])
    assert prov["agent_multi_turn"][e]["environment"] == {"repo": "sporehub", "branch": "main", "commit_id": "abc123"}
    assert prov["agent_multi_turn"][e]["dedup_conflicts"] == 1
    assert q(con, "select records_total, converted, kept_raw, dropped from import_fidelity where unit = ?", e) == [(14, 14, 0, 0)]


def test_quirks_parallel_delegation_and_extra_roles(con):
    e = "trace-quirks-1"
    # linked by the delegated query, not by segment order
    assert q(con, "select agent_id, spawned_by_call_id from agents where episode_id = ? and depth = 1 order by 1", e) == [
        ("s1", "c3"), ("s2", "c2")]
    assert q(con, "select call_idx, call_id from actions where episode_id = ? and agent_id = 'main' and step_idx = 1 "
                  "order by call_idx", e) == [(0, "c2"), (1, "c3")]
    assert q(con, "select tool_type from actions where episode_id = ? and call_id = 'c1'", e) == [("planning",)]
    roles = q(con, "select role, count(*) from messages where episode_id = ? group by 1 order by 1", e)
    assert ("developer", 1) in roles and ("observation", 1) in roles
    # prefix repeated in s3 is not duplicated; the later user turn after the prefix is kept
    assert q(con, "select count(*) from messages where episode_id = ? and agent_id = 'main' and role = 'user'", e) == [(2,)]
    assert q(con, "select records_total, converted, kept_raw, dropped from import_fidelity where unit = ?", e) == [(25, 23, 2, 0)]
    assert q(con, "select count(*) from episodes where episode_id = 'trace-quirks-2'") == [(1,)]


def test_claude_code_hooks_and_branch(con):
    e = "5e55a0b0-hook-fixture"
    ctx = q(con, "select step_idx, content from observations where episode_id = ? and observation_type = 'hook_context' "
                 "order by content", e)
    assert ctx == [(0, "Project rule: run pytest -q before finishing."), (0, "The user's todo list is empty.")]
    interv = q(con, "select step_idx, intervention from steps where episode_id = ? and agent_id = 'main' and intervention is not null", e)
    assert len(interv) == 1 and interv[0][0] == 0
    assert json.loads(interv[0][1])[0]["kind"] == "hook_blocking_error"
    assert q(con, "select call_id, is_error from observations where episode_id = ? and observation_type = 'tool_result' order by 1", e) == [
        ("toolu_b1", True), ("toolu_b2", False)]
    assert q(con, "select action_valid from actions where episode_id = ? and call_id = 'toolu_b1'", e) == [(False,)]
    prov = json.loads(q(con, "select provenance from runs where source_file like '%hook-fixture.jsonl'")[0][0])["claude_code"]
    metas = [json.loads(m[0]) for m in q(con, "select metadata from steps where episode_id = ? and metadata is not null", e)]
    assert [h["kind"] for m in metas for h in m.get("hook_log", [])] + [h["kind"] for h in prov["hook_log"]] == ["hook_success"]
    assert "step_meta" not in prov and all(m["request_id"] for m in metas if m["version"])
    assert [r["record"]["type"] for r in prov["raw_records"]] == ["mystery-record"]
    assert q(con, "select agent_id, agent_role from agents where episode_id = ? order by 1", e) == [
        ("branch-u4a", "abandoned_branch"), ("main", "main")]
    assert q(con, "select step_idx, model, tokens_in, tokens_out from steps where episode_id = ? and agent_id = 'main' order by 1", e) == [
        (0, "claude-sonnet-4-5", 110, 5), (1, "claude-sonnet-4-5", 110, 5), (2, "claude-opus-4-5", 110, 9)]
    # 15 records: 13 converted (user/assistant/attachments/summary), the unknown type kept raw
    assert q(con, "select records_total, converted, kept_raw, dropped from import_fidelity where unit = ?", e) == [(15, 14, 1, 0)]


def test_multi_turn_atif_round_trip(con, whdir, tmp_path):
    e = "agent_trace_000123"
    (tmp_path / "t.json").write_text(dump_episode(whdir, e, "atif"))
    ingest([tmp_path / "t.json"], tmp_path / "wh")
    c2 = connect(tmp_path / "wh")
    qs = "select agent_id, step_idx, reasoning, content from steps where episode_id = ? order by 1, 2"
    assert q(con, qs, e) == q(c2, qs, e)
    qa = "select agent_id, parent_agent_id, spawned_by_call_id, depth from agents where episode_id = ? order by 1"
    assert q(con, qa, e) == q(c2, qa, e)
