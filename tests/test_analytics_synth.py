"""The synthetic warehouse generator: layout, determinism and internal consistency of what it writes."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pyarrow.parquet as pq
import pytest

from shopsim_wh.demo.shop import RunSpec, WarehouseSpec, generate
from shopsim_wh.engines.db import connect
from shopsim_wh.store.warehouse import Warehouse

from .test_analytics_support import final_rows, read_table, synth_connection, synth_warehouse


@pytest.fixture(scope="module")
def con():
    return synth_connection()


def test_chunked_generation_is_compacted_sorted_and_deterministic(tmp_path):
    runs = [RunSpec("r-bare"), RunSpec("r-skill", skill_bank="effective")]
    info = generate(tmp_path / "a", 400, WarehouseSpec(runs=runs, chunk_episodes=50, coding_episodes=2, seed=3))
    assert info.tasks == 100 and info.episodes_per_run == 200
    wh = Warehouse(tmp_path / "a")
    snap = wh.snapshot()
    for table in ("episodes", "steps", "actions", "observations", "messages"):
        for run in ("r-bare", "r-skill"):
            files = snap.files(table, run)
            assert len(files) == 1, (table, run)  # 4 chunk commits compacted into one file
            ids = pq.read_table(wh.abspath(files[0]), columns=["episode_id"]).column(0).to_pylist()
            assert ids == sorted(ids)  # sorted: row-group statistics prune single-episode lookups
    generate(tmp_path / "b", 400, WarehouseSpec(runs=runs, chunk_episodes=50, coding_episodes=2, seed=3))
    for table in ("episodes", "actions", "messages"):
        a = connect(tmp_path / "a").execute(f"SELECT * EXCLUDE (load_id) FROM {table} ORDER BY ALL").fetchall()
        b = connect(tmp_path / "b").execute(f"SELECT * EXCLUDE (load_id) FROM {table} ORDER BY ALL").fetchall()
        assert a == b
    again = generate(tmp_path / "a", 200, WarehouseSpec(runs=runs[:1], chunk_episodes=70, coding_episodes=0, seed=3))
    assert again.runs == runs[:1]  # re-generating a run replaces it
    assert connect(tmp_path / "a").execute("SELECT count(*) FROM episodes WHERE run_id = 'r-bare'").fetchone()[0] == 200


def test_episode_counters_agree_with_the_steps():
    root, _ = synth_warehouse()
    eps = final_rows(root, "episodes")
    steps = final_rows(root, "steps")
    actions = final_rows(root, "actions")
    per = defaultdict(lambda: Counter())
    for s in steps:
        if s["agent_id"] == "main":
            c = per[(s["run_id"], s["episode_id"])]
            c["model_steps"] += 1
            c["protocol_errors"] += s["protocol_error"] is not None
            c["tokens_in"] += s["tokens_in"]
    for a in actions:
        if a["agent_id"] == "main" and a["action_type"] == "tool_use" and a["feedback_code"] not in (
                "no_tool_call", "multiple_tool_calls", "invalid_arguments", "unknown_tool"):
            c = per[(a["run_id"], a["episode_id"])]
            c["total_actions"] += 1
            c["invalid_actions"] += a["action_valid"] is False
    for e in eps:
        if e["run_id"] == "synth-coding":
            continue
        c = per[(e["run_id"], e["episode_id"])]
        for key in ("model_steps", "protocol_errors", "total_actions", "invalid_actions", "tokens_in"):
            assert e[key] == c[key], (e["episode_id"], key)
        assert e["model_steps"] >= e["total_actions"]


def test_messages_are_what_each_step_was_sent(con):
    bad = con.execute("""
        SELECT count(*) FROM steps AS s
        LEFT JOIN messages AS m
            ON m.run_id = s.run_id AND m.episode_id = s.episode_id AND m.agent_id = s.agent_id
            AND m.msg_idx = s.prompt_msg_count
        WHERE CASE WHEN s.policy_failure IS NULL THEN m.role IS DISTINCT FROM 'assistant' ELSE m.role IS NOT NULL END
        """).fetchone()[0]
    # the message right after a step's prompt is that step's own response; a policy failure
    # (generation_length) ends the episode and adds nothing to the conversation (ShopSimRL's protocol)
    assert bad == 0
    orphan = con.execute("""
        SELECT count(*) FROM messages AS m
        LEFT JOIN actions AS a
            ON a.run_id = m.run_id AND a.episode_id = m.episode_id AND a.agent_id = m.agent_id AND a.call_id = m.tool_call_id
        WHERE m.role = 'tool' AND a.call_id IS NULL""").fetchone()[0]
    assert orphan == 0  # every tool message answers a recorded call
    gaps = con.execute("""
        SELECT count(*) FROM (SELECT run_id, episode_id, agent_id, count(*) AS n, max(msg_idx) AS hi FROM messages
                              GROUP BY 1, 2, 3) WHERE n <> hi + 1""").fetchone()[0]
    assert gaps == 0


def test_skills_runs_and_failures_are_recorded():
    root, info = synth_warehouse()
    eps = {(e["run_id"], e["episode_id"]): e for e in final_rows(root, "episodes")}
    chosen = defaultdict(set)
    for s in final_rows(root, "skills_selected"):
        chosen[(s["run_id"], s["episode_id"])].add(s["skill_id"])
    for key, e in eps.items():
        if key[0] == "synth-coding":
            continue
        assert set(json.loads(e["skill_ids"])) == chosen.get(key, set())
    assert not any(k[0].endswith("-bare") for k in chosen)
    runs = {r["run_id"]: r for r in read_table(root, "runs")}
    fields = json.loads(runs["synth-ckpt-a-skill"]["fingerprint_fields"])
    assert fields["skills_mask_rate"] == 0.5 and fields["skill_bank_hash"] and fields["checkpoint_id"] == "ckpt-a"
    assert json.loads(runs["synth-ckpt-a-bare"]["fingerprint_fields"])["skill_bank_hash"] is None
    attempts = Counter((e["run_id"], e["episode_id"]) for e in read_table(root, "episodes"))
    failures = {(f["run_id"], f["episode_id"], f["attempt"]) for f in read_table(root, "failures")}
    retried = [k for k, n in attempts.items() if n > 1]
    assert retried and all((*k, 1) in failures for k in retried)
    assert all((*k, e["attempt"]) in failures for k, e in eps.items() if e["status"] == "failed")
    assert {e["sample_id"] for e in eps.values() if e["task_id"] is not None} == {0, 1}
    assert info.repeats == 2
