"""Every real third-party file in tests/fixtures/third_party ingests with the counts its SOURCES.md states."""

from __future__ import annotations

from pathlib import Path

import pytest

from shopsim_wh.engines.db import connect
from shopsim_wh.ingest import ingest

DATA = Path(__file__).resolve().parent / "fixtures" / "third_party"  # byte-exact copies; licences in SOURCES.md
CC_SESSION = "0ccf1a04-1b4c-43b6-8aa5-79e41db43a68"
CC_INLINE = "f48d4407-3211-4227-9787-2fba4bc7c9bb"


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    root = tmp_path_factory.mktemp("wh_real")
    summary = ingest([DATA], root)
    return root, summary


@pytest.fixture(scope="module")
def con(wh):
    c = connect(wh[0])
    yield c
    c.close()


def q(con, sql, *params):
    return con.execute(sql, list(params)).fetchall()


def test_every_trace_file_lands(wh):
    root, s = wh
    by_name = {Path(f.path).name: f for f in s.files}
    assert by_name[f"{CC_SESSION}.jsonl"].status == "landed"
    assert by_name["example.jsonl"].status == "landed"
    assert by_name["gpt-4o-airline.json"].status == "landed"
    assert by_name["trajectory.json"].status == "landed"
    assert {by_name[f"agent-{a}.jsonl"].status for a in ("a5bdbc1", "a9cad17", "aa5ef13", "ac27727", "afbbf75")} == {"attached"}
    # a ShopSimulator task file is not a trace: reported, not guessed
    assert by_name["dev_first3.jsonl"].status == "unrecognised"
    assert s.units_read == 4 and s.records_rejected == 0
    assert s.episodes_landed == 1 + 1 + 200 + 1


def test_agent_roles_show_main_and_subagents(con):
    roles = dict(q(con, "select agent_role, count(*) from agents group by 1"))
    assert roles["main"] == 203
    assert roles["general-purpose"] == 6  # 5 subagent files + 1 inline sidechain
    assert roles["abandoned_branch"] == 1


def test_claude_code_session_share_counts(con):
    # 86 lines: user 24, assistant 25, system 11, queue-operation 14, file-history-snapshot 10, progress 1, summary 1
    fid = q(con, "select records_total, converted, kept_raw, dropped from import_fidelity where unit = ?", CC_SESSION)
    assert fid == [(86, 50, 36, 0)]
    # 25 assistant records sharing 11 message ids -> 11 main steps
    assert q(con, "select count(*) from steps where episode_id = ? and agent_id = 'main'", CC_SESSION) == [(11,)]
    assert q(con, "select count(*) from steps where episode_id = ? and agent_id = 'main' and reasoning is not null",
             CC_SESSION) == [(7,)]
    calls = q(con, "select tool_name, count(*) from actions where episode_id = ? and agent_id = 'main' "
                   "and call_id is not null group by 1 order by 1", CC_SESSION)
    assert calls == [("Bash", 1), ("Task", 5), ("TaskOutput", 1)]
    obs = q(con, "select count(*), count(*) filter (where is_error), count(*) filter (where observation_type = 'subagent_summary') "
                 "from observations where episode_id = ? and agent_id = 'main' and call_id is not null", CC_SESSION)
    assert obs == [(7, 1, 5)]
    # every call is matched to its result
    unmatched = q(con, "select count(*) from actions a where episode_id = ? and call_id is not null and not exists "
                       "(select 1 from observations o where o.episode_id = a.episode_id and o.call_id = a.call_id)", CC_SESSION)
    assert unmatched == [(0,)]
    # two models, and the main agent's steps are split between them
    models = q(con, "select distinct model from steps where episode_id = ? and agent_id = 'main' order by 1", CC_SESSION)
    assert models == [("claude-haiku-4-5-20251001",), ("claude-opus-4-5-20251101",)]


def test_claude_code_subagents_linked(con):
    rows = q(con, "select g.agent_id, g.parent_agent_id, g.depth, a.tool_name from agents g join actions a "
                  "on a.episode_id = g.episode_id and a.call_id = g.spawned_by_call_id where g.episode_id = ? "
                  "and g.agent_id != 'main' and g.agent_role != 'abandoned_branch' order by 1", CC_SESSION)
    assert [r[0] for r in rows] == ["a5bdbc1", "a9cad17", "aa5ef13", "ac27727", "afbbf75"]
    assert {(r[1], r[2], r[3]) for r in rows} == {("main", 1, "Task")}
    web = q(con, "select agent_id, count(*) from actions where episode_id = ? and tool_name = 'WebSearch' group by 1", CC_SESSION)
    assert sorted(n for _, n in web) == [1] * 5
    sub_fid = q(con, "select count(*) from import_fidelity where unit like ? and converted + kept_raw + dropped = records_total",
                f"{CC_SESSION}/%")
    assert sub_fid == [(5,)]


def test_claude_code_versions_branch_summary(con):
    import json
    prov = json.loads(q(con, "select provenance from runs where source_file like ?", f"%{CC_SESSION}.jsonl")[0][0])
    cc = prov["claude_code"]
    assert cc["versions"] == ["2.1.15", "2.1.16"]
    assert [s["summary"] for s in cc["summaries"]] == ["Spawn curry poem agents, write sushi"]
    branch = q(con, "select agent_id, parent_agent_id from agents where episode_id = ? and agent_role = 'abandoned_branch'",
               CC_SESSION)
    assert branch == [("branch-03a754e3", "main")]
    assert q(con, "select count(*) from messages where episode_id = ? and agent_id = 'branch-03a754e3'", CC_SESSION) == [(2,)]


def test_claude_code_inline_sidechain(con):
    rows = q(con, "select agent_id, model, spawned_by_call_id is not null from agents where episode_id = ? order by depth",
             CC_INLINE)
    assert rows[0][:2] == ("main", "claude-opus-4-20250514")
    assert rows[1][1] == "claude-sonnet-4-20250514" and rows[1][2]
    assert q(con, "select records_total, converted + kept_raw + dropped from import_fidelity where unit = ?", CC_INLINE) == [(21, 21)]
    # the user interrupt is kept as a user message
    assert q(con, "select count(*) from messages where episode_id = ? and content like '%interrupted by user%'", CC_INLINE)[0][0] >= 1


def test_tau_bench(con):
    assert q(con, "select count(*), sum(reward), count(reward) from episodes where source_format = 'openai-messages'") == [(200, 84.0, 200)]
    assert q(con, "select count(distinct run_id) from episodes where source_format = 'openai-messages'") == [(1,)]
    assert q(con, "select count(*) from episodes where episode_id = 'task-0__trial-0'") == [(1,)]
    # every tool call matched to its result (1,164 each; call ids repeat within a run, so join per step)
    n = q(con, "select count(*) from actions a join observations o using (run_id, episode_id, agent_id, step_idx, call_id) "
               "join runs r using (run_id) where a.action_type = 'tool_use' and r.source_format = 'openai-messages'")
    assert n == [(1164,)]
    assert q(con, "select count(*) from messages m join episodes e using (run_id, episode_id) "
                  "where e.source_format = 'openai-messages'") == [(5308,)]


def test_tau_bench_success_and_pass_hat_k(con):
    """tau-bench has a task reward and no ShopSimulator components: success is reward >= 1, so pass@1 is the
    success rate and pass^k (tau-bench's reliability metric) matches C(c, k) / C(n, k) per task."""
    from math import comb
    run_id, = q(con, "select distinct run_id from episodes where source_format = 'openai-messages'")[0]
    rewards: dict[int, list[float]] = {}
    for task_id, reward in q(con, "select task_id, reward from episodes where run_id = ?", run_id):
        rewards.setdefault(task_id, []).append(reward)
    assert q(con, "select r_success_mean, r_strict_mean, reward_mean, repeats, tasks from run_metrics where run_id = ?",
             run_id) == [(pytest.approx(84 / 200), pytest.approx(84 / 200), pytest.approx(84 / 200), 4, 50)]
    for k in (1, 2, 4):
        want = [comb(sum(r >= 1 for r in rs), k) / comb(len(rs), k) for rs in rewards.values()]
        got = q(con, "select pass_hat_k, tasks, tasks_short from run_pass_at_k(?) where run_id = ?", k, run_id)
        assert got == [(pytest.approx(sum(want) / len(want), abs=1e-12), 50, 0)], k
    assert q(con, "select pass_hat_k from pass_at_k(5) where run_id = ? limit 1", run_id) == [(None,)]  # n = 4 < 5
    # every unsolved trial has a primary failure (a process label, else the task_unsolved catch-all); no solved one
    assert q(con, "select e.reward >= 1, count(p.primary_failure), count(*) from episodes e "
                  "join episode_primary_failure p using (run_id, episode_id) where e.run_id = ? group by 1 order by 1",
             run_id) == [(False, 116, 116), (True, 0, 84)]


def test_atif(con):
    assert q(con, "select count(*), sum(case when reasoning is not null then 1 else 0 end) from steps "
                  "where episode_id = 'login-trace'") == [(6, 6)]
    joined = q(con, "select a.tool_name, o.content from actions a join observations o using (run_id, episode_id, agent_id, call_id) "
                    "where episode_id = 'login-trace' order by a.step_idx")
    assert len(joined) == 6 and joined[0] == ("navigate", "ok: navigate to /login")
    assert joined[-1] == ("done", "verification_class=test_passed")


def test_fidelity_accounts_for_every_record(con):
    assert q(con, "select count(*) from import_fidelity where converted + kept_raw + dropped != records_total") == [(0,)]


def test_reingest_is_a_noop(wh, tmp_path):
    root, _ = wh
    s = ingest([DATA], root)
    assert {f.status for f in s.files} <= {"skipped_same_hash", "attached", "unrecognised"}
    assert s.units_read == 0
