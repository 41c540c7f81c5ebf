"""Error taxonomy: codes, label grain, rules re-derived in plain Python, the primary failure per episode."""

from __future__ import annotations

from collections import defaultdict

import pytest

from shopsim_wh.engines.db import connect

from .test_analytics_support import final_rows, synth_connection, synth_warehouse

ISSUE_CODES = {
    "protocol_no_tool_call", "protocol_multiple_tool_calls", "protocol_invalid_arguments", "protocol_unknown_tool",
    "invalid_action", "generation_length", "action_limit", "infra_failure_reset", "infra_failure_model",
    "infra_failure_step", "infra_failure_terminate", "infra_failure_runtime", "no_purchase", "wrong_product",
    "attribute_miss", "option_miss", "over_budget", "type_miss", "repeated_action_loop", "search_churn",
    "tool_error", "edit_without_read", "repeated_identical_call", "subagent_failure",
}
PROTOCOL = {"no_tool_call", "multiple_tool_calls", "invalid_arguments", "unknown_tool"}


@pytest.fixture(scope="module")
def con():
    return synth_connection()


@pytest.fixture(scope="module")
def labels(con):
    rows = con.execute("SELECT run_id, episode_id, agent_id, step_idx, code, detail, evidence FROM error_labels").fetchall()
    out = defaultdict(set)
    for run, ep, agent, step, code, _, _ in rows:
        out[code].add((run, ep, agent, step))
    return rows, out


def test_taxonomy_lists_every_code_once(con):
    rows = con.execute("SELECT code, scope, precedence, definition FROM taxonomy").fetchall()
    codes = [r[0] for r in rows]
    assert len(codes) == len(set(codes)) and ISSUE_CODES <= set(codes)
    assert len({r[2] for r in rows}) == len(rows)  # precedence is a total order
    assert all(r[1] in ("step", "episode") and r[3] for r in rows)


def test_label_grain_and_codes(con, labels):
    rows, by_code = labels
    keys = [(r[0], r[1], r[2], r[3], r[4]) for r in rows]
    assert len(keys) == len(set(keys))
    known = {r[0] for r in con.execute("SELECT code FROM taxonomy").fetchall()}
    assert set(by_code) <= known
    planted = ISSUE_CODES - {"infra_failure_terminate"}  # the generator never fails at terminate
    assert planted <= set(by_code), planted - set(by_code)
    assert all(r[6] for r in rows)  # every label carries evidence


def test_step_rules_match_plain_python(labels):
    _, by_code = labels
    root, _ = synth_warehouse()
    steps = final_rows(root, "steps")
    actions = final_rows(root, "actions")
    proto = {(s["run_id"], s["episode_id"], s["agent_id"], s["step_idx"]) for s in steps if s["protocol_error"]}
    assert by_code["protocol_no_tool_call"] | by_code["protocol_multiple_tool_calls"] | by_code[
        "protocol_invalid_arguments"] | by_code["protocol_unknown_tool"] == proto
    invalid = {(a["run_id"], a["episode_id"], a["agent_id"], a["step_idx"]) for a in actions
               if a["action_valid"] is False and a["action_type"] == "tool_use" and a["feedback_code"]
               and a["feedback_code"] not in PROTOCOL}
    assert by_code["invalid_action"] == invalid
    # repeated action loop: the third of three or more identical canonical actions in a row
    seqs = defaultdict(list)
    for a in sorted(actions, key=lambda a: (a["step_idx"], a["call_idx"])):
        if a["action"] is not None and a["action_type"] == "tool_use":
            seqs[(a["run_id"], a["episode_id"], a["agent_id"])].append((a["step_idx"], a["action"]))
    loops = set()
    for key, seq in seqs.items():
        run = 0
        for i, (step, action) in enumerate(seq):
            run = run + 1 if i and seq[i - 1][1] == action else 1
            if run == 3:
                loops.add((*key, step))
    assert by_code["repeated_action_loop"] == loops and loops
    # search churn: a third valid search since the agent last stood on an item page
    searched = {(a["run_id"], a["episode_id"], a["agent_id"], a["step_idx"]) for a in actions
                if (a["action"] or "").startswith("search[") and a["action_valid"]}
    churn = set()
    per_agent = defaultdict(list)
    for s in steps:
        per_agent[(s["run_id"], s["episode_id"], s["agent_id"])].append(s)
    for key, ss in per_agent.items():
        count = 0
        for s in sorted(ss, key=lambda s: s["step_idx"]):
            if s["page"] in ("item", "description", "features", "reviews"):
                count = 0
            if (*key, s["step_idx"]) in searched:
                count += 1
                if count == 3:
                    churn.add((*key, s["step_idx"]))
    assert by_code["search_churn"] == churn and churn


def test_episode_rules_match_plain_python(labels):
    _, by_code = labels
    root, _ = synth_warehouse()
    eps = final_rows(root, "episodes")

    def episodes(pred):
        return {(e["run_id"], e["episode_id"]) for e in eps if pred(e)}

    def labelled(code):
        return {(r, e) for r, e, _, _ in by_code[code]}

    bought = [e for e in eps if e["status"] == "completed" and e["purchase_asin"]]
    assert labelled("attribute_miss") == {(e["run_id"], e["episode_id"]) for e in bought if e["r_att"] < 1}
    assert labelled("option_miss") == {(e["run_id"], e["episode_id"]) for e in bought
                                       if e["r_option"] is not None and e["r_option"] < 1}
    assert labelled("over_budget") == {(e["run_id"], e["episode_id"]) for e in bought if e["r_price"] < 1}
    assert labelled("type_miss") == {(e["run_id"], e["episode_id"]) for e in bought if e["r_type"] < 1}
    assert labelled("wrong_product") == {(e["run_id"], e["episode_id"]) for e in bought if e["right_product"] is False}
    assert labelled("no_purchase") == episodes(lambda e: e["status"] == "completed" and e["r_type"] is not None
                                               and not e["purchase_asin"])
    assert labelled("action_limit") == episodes(lambda e: e["termination_reason"] == "action_limit")
    assert labelled("task_unsolved") == episodes(
        lambda e: e["status"] == "completed" and e["reward"] is not None and e["reward"] < 1
        and all(e[c] is None for c in ("r_type", "r_att", "r_option", "r_price")))
    infra = set().union(*(labelled(c) for c in by_code if c.startswith("infra_failure_")))
    assert infra == episodes(lambda e: e["status"] == "failed")
    for e in eps:
        if e["status"] == "failed":
            assert (e["run_id"], e["episode_id"]) in labelled(f"infra_failure_{e['error_stage']}")


def test_coding_labels_where_they_were_planted(labels):
    _, by_code = labels

    def sessions(code):
        return {int(ep.split("-")[1]) for run, ep, _, _ in by_code[code] if run == "synth-coding"}

    assert sessions("edit_without_read") == {0, 2, 4}
    assert sessions("repeated_identical_call") == {0, 3}
    assert sessions("subagent_failure") == {1, 5}
    assert sessions("tool_error") == {0, 1, 3, 5}


def test_primary_failure_per_episode(con):
    con.execute("CREATE OR REPLACE TEMP TABLE pf_check AS SELECT * FROM episode_primary_failure")
    con.execute("CREATE OR REPLACE TEMP TABLE el_check AS SELECT run_id, episode_id, min(precedence) AS best "
                "FROM error_labels GROUP BY 1, 2")
    assert con.execute("SELECT count(*) FROM pf_check").fetchone() == con.execute("SELECT count(*) FROM episodes").fetchone()
    dups = con.execute("SELECT count(*) FROM (SELECT run_id, episode_id FROM pf_check "
                       "GROUP BY 1, 2 HAVING count(*) > 1)").fetchone()[0]
    assert dups == 0
    bad = con.execute("""
        SELECT count(*) FROM pf_check AS p
        JOIN episodes AS e USING (run_id, episode_id)
        WHERE (e.r_success = 1) <> (p.primary_failure IS NULL) AND e.r_type IS NOT NULL""").fetchone()[0]
    assert bad == 0  # every shop episode that is not a strict success has a primary failure, successes none
    wrong = con.execute("""
        SELECT count(*) FROM pf_check AS p JOIN el_check AS l USING (run_id, episode_id)
        WHERE p.primary_failure IS NOT NULL AND p.precedence <> l.best""").fetchone()[0]
    assert wrong == 0
    by_reason = dict(con.execute("""
        SELECT e.termination_reason, min(p.primary_failure) FROM pf_check AS p
        JOIN episodes AS e USING (run_id, episode_id)
        WHERE e.termination_reason IN ('action_limit', 'protocol_budget', 'generation_length')
        GROUP BY 1 HAVING count(DISTINCT p.primary_failure) = 1""").fetchall())
    assert by_reason == {"action_limit": "action_limit", "protocol_budget": "protocol_budget",
                         "generation_length": "generation_length"}
    con.execute("DROP TABLE pf_check")
    con.execute("DROP TABLE el_check")


def test_rules_survive_arguments_that_are_not_json():
    root, _ = synth_warehouse()
    con = connect(root)
    con.execute("""CREATE OR REPLACE VIEW actions AS
                   SELECT * REPLACE (CASE WHEN tool_name IN ('Edit', 'Task') THEN '{not json' ELSE arguments END AS arguments)
                   FROM stg_actions""")
    counts = dict(con.execute("SELECT code, count(*) FROM error_labels WHERE run_id = 'synth-coding' GROUP BY 1").fetchall())
    assert "edit_without_read" not in counts and counts["subagent_failure"] == 2
