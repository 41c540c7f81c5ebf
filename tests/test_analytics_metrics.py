"""run_metrics, task_metrics, pass@k, checkpoint_compare against plain Python over the Parquet rows."""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict

import pytest

from shopsim_wh.engines.db import connect

from .test_analytics_support import final_rows, read_table, synth_connection, synth_warehouse

SHOP_RUNS = ["synth-ckpt-a-bare", "synth-ckpt-a-skill", "synth-ckpt-b-bare", "synth-ckpt-b-placebo", "synth-ckpt-a-hot"]
PRICES = {"synth-qwen-4b": (0.10, 0.40), "synth-coder-large": (3.00, 15.00)}


@pytest.fixture(scope="module")
def con():
    return synth_connection()


@pytest.fixture(scope="module")
def metrics(con):
    cur = con.execute("SELECT * FROM run_metrics")
    cols = [d[0] for d in cur.description]
    return {r[0]: dict(zip(cols, r, strict=True)) for r in cur.fetchall()}


def pass_at_k(n: int, c: int, k: int) -> float:
    if c == 0:
        return 0.0
    if n < k or n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def expected_run(root, run_id):
    eps = [e for e in final_rows(root, "episodes") if e["run_id"] == run_id]
    done = [e for e in eps if e["status"] == "completed"]
    rewards = [e["reward"] for e in done]
    hard = [e["r_type"] * e["r_att"] * (1.0 if e["r_option"] is None else e["r_option"]) * e["r_price"] for e in done]
    success = [1.0 if h == 1 else 0.0 for h in hard]
    per_task = defaultdict(lambda: [0, 0])
    for e, s in zip(done, success, strict=True):
        per_task[e["task_id"]][0] += 1
        per_task[e["task_id"]][1] += int(s)
    repeats = max(n for n, _ in per_task.values())
    attempts = [e for e in read_table(root, "episodes") if e["run_id"] == run_id]
    price_in, price_out = PRICES["synth-qwen-4b"]
    n = len(eps)
    reasons = defaultdict(int)
    for e in eps:
        reasons["error" if e["status"] == "failed" else e["termination_reason"]] += 1
    return {
        "episodes": n, "completed": len(done), "failed": n - len(done),
        "reward_mean": mean(rewards), "reward_sem": statistics.stdev(rewards) / math.sqrt(len(rewards)),
        "r_strict_mean": mean(hard), "r_success_mean": mean(success),
        "right_product_rate": mean([1.0 if e["right_product"] else 0.0 for e in done]),
        "r_type_mean": mean([e["r_type"] for e in done]), "r_att_mean": mean([e["r_att"] for e in done]),
        "r_option_mean": mean([e["r_option"] for e in done]), "r_price_mean": mean([e["r_price"] for e in done]),
        "repeats": repeats, "tasks": len(per_task),
        "pass_at_1": mean([c / m for m, c in per_task.values()]),
        "pass_at_k": mean([pass_at_k(m, c, repeats) for m, c in per_task.values()]),
        "pass_hat_k": mean([math.comb(c, repeats) / math.comb(m, repeats) for m, c in per_task.values() if m >= repeats]),
        "mean_steps": mean([e["total_actions"] for e in done]),
        "mean_model_steps": mean([e["model_steps"] for e in done]),
        # ShopSimRL's summary.json rule: behaviour rates over completed episodes only
        "protocol_error_rate": sum(e["protocol_errors"] for e in done) / sum(e["model_steps"] for e in done),
        "invalid_action_rate": sum(e["invalid_actions"] for e in done) / sum(e["total_actions"] for e in done),
        "model_steps_total": sum(e["model_steps"] for e in done),
        "protocol_errors_total": sum(e["protocol_errors"] for e in done),
        "total_actions_total": sum(e["total_actions"] for e in done),
        "invalid_actions_total": sum(e["invalid_actions"] for e in done),
        "scored": sum(1 for e in done if e["reward"] is not None),
        # no source of the synthetic warehouse reported r_success: the original's success_rate is None
        "success_rate": mean([e["r_success"] for e in done if not e.get("reward_derived")]),
        "share_purchase": reasons["purchase"] / n, "share_action_limit": reasons["action_limit"] / n,
        "share_generation_length": reasons["generation_length"] / n,
        "share_protocol_budget": reasons["protocol_budget"] / n, "share_error": reasons["error"] / n,
        "tokens_in_mean": mean([e["tokens_in"] for e in done]), "tokens_out_mean": mean([e["tokens_out"] for e in done]),
        "wall_time_mean_s": mean([e["duration_s"] for e in done]),
        "attempts": len(attempts), "tokens_in_total": sum(e["tokens_in"] for e in attempts),
        "cost_per_episode": (mean([e["tokens_in"] for e in done]) * price_in
                             + mean([e["tokens_out"] for e in done]) * price_out) / 1e6,
        "cost_total": (sum(e["tokens_in"] for e in attempts) * price_in
                       + sum(e["tokens_out"] for e in attempts) * price_out) / 1e6,
    }


@pytest.mark.parametrize("run_id", SHOP_RUNS)
def test_run_metrics_match_plain_python(metrics, run_id):
    root, _ = synth_warehouse()
    got = metrics[run_id]
    for key, value in expected_run(root, run_id).items():
        assert got[key] == (None if value is None else pytest.approx(value, abs=1e-9)), key
    assert got["r_loose_mean"] is None or got["r_loose_mean"] <= 1
    assert got["planned"] == 1000 and got["coverage"] == pytest.approx(got["completed"] / 1000)
    assert got["missing"] == 0


def test_run_metrics_invariants(con, metrics):
    assert len(metrics) == con.execute("SELECT count(*) FROM runs").fetchone()[0]
    for m in metrics.values():
        shares = [m[k] for k in ("share_purchase", "share_action_limit", "share_generation_length",
                                 "share_protocol_budget", "share_error", "share_other")]
        assert sum(shares) == pytest.approx(1.0, abs=1e-12) and all(0 <= s <= 1 for s in shares)
        assert m["mean_model_steps"] >= m["mean_steps"]
        assert m["completed"] + m["failed"] + m["missing"] == m["planned"]
    assert con.execute("SELECT count(*) FROM episode_attempts WHERE model_steps < total_actions").fetchone()[0] == 0
    coding = metrics["synth-coding"]
    assert coding["reward_mean"] is None and coding["share_other"] == 1.0 and coding["pass_at_1"] is None
    assert coding["cost_per_episode"] == pytest.approx(
        (coding["tokens_in_mean"] * 3.0 + coding["tokens_out_mean"] * 15.0) / 1e6)


def test_unpriced_models_cost_null_and_prices_can_be_replaced():
    root, _ = synth_warehouse()
    con = connect(root)
    con.execute("CREATE OR REPLACE VIEW model_prices AS SELECT * FROM (VALUES ('synth-qwen-4b', 1.0, 2.0)) "
                "AS t (model_name, usd_per_mtok_in, usd_per_mtok_out)")
    rows = dict(con.execute("SELECT run_id, cost_per_episode / (tokens_in_mean * 1.0 + tokens_out_mean * 2.0) * 1e6 "
                            "FROM run_metrics").fetchall())
    assert rows["synth-coding"] is None
    assert rows["synth-ckpt-a-bare"] == pytest.approx(1.0)


def test_task_metrics_and_pass_at_k(con):
    root, _ = synth_warehouse()
    dups = con.execute("SELECT count(*) FROM (SELECT run_id, task_id FROM task_metrics GROUP BY 1, 2 HAVING count(*) > 1)")
    assert dups.fetchone()[0] == 0
    per = defaultdict(list)
    for e in final_rows(root, "episodes"):
        if e["run_id"] == "synth-ckpt-a-bare" and e["status"] == "completed":
            per[e["task_id"]].append(e)
    got = {r[0]: r[1:] for r in con.execute(
        "SELECT task_id, completed, successes, pass_at_1, pass_at_n, reward_varies, all_zero FROM task_metrics "
        "WHERE run_id = 'synth-ckpt-a-bare'").fetchall()}
    for task, es in per.items():
        c = sum(1 for e in es if e["r_type"] == e["r_att"] == e["r_price"] == 1 and e["r_option"] in (None, 1))
        rewards = [e["reward"] for e in es]
        assert got[task] == (len(es), c, pytest.approx(c / len(es)), float(c > 0), min(rewards) < max(rewards),
                             max(rewards) == 0)
    for k in (1, 2, 3):
        rows = con.execute("SELECT task_id, n, c, pass_at_k FROM pass_at_k(?) WHERE run_id = 'synth-ckpt-a-skill'",
                           [k]).fetchall()
        assert rows and all(p == pytest.approx(pass_at_k(n, c, k), abs=1e-12) for _, n, c, p in rows)
    run_level = con.execute("SELECT pass_at_k FROM run_pass_at_k(2) WHERE run_id = 'synth-ckpt-a-skill'").fetchone()[0]
    assert run_level == pytest.approx(con.execute(
        "SELECT pass_at_k FROM run_metrics WHERE run_id = 'synth-ckpt-a-skill'").fetchone()[0], abs=1e-12)
    est = con.execute("SELECT pass_at_k_estimate(100, 7, 10), pass_at_k_estimate(5, 0, 2), pass_at_k_estimate(3, 2, 2)")
    assert est.fetchone() == pytest.approx((1 - math.comb(93, 10) / math.comb(100, 10), 0.0, 1.0), abs=1e-12)
    for k in (1, 2, 3):  # pass^k (tau-bench): C(c, k) / C(n, k); tasks with n < k have none
        rows = con.execute("SELECT n, c, pass_hat_k FROM pass_at_k(?) WHERE run_id = 'synth-ckpt-a-skill'", [k]).fetchall()
        assert rows and all(p == (None if n < k else pytest.approx(math.comb(c, k) / math.comb(n, k), abs=1e-12))
                            for n, c, p in rows), k
    hat = con.execute("SELECT pass_hat_k_estimate(100, 60, 8), pass_hat_k_estimate(4, 1, 2), pass_hat_k_estimate(4, 4, 4), "
                      "pass_hat_k_estimate(3, 3, 4)").fetchone()
    assert hat == (pytest.approx(math.comb(60, 8) / math.comb(100, 8), abs=1e-12), 0.0, pytest.approx(1.0), None)


def test_checkpoint_compare_pairs_runs_with_equal_job_lists(con):
    root, _ = synth_warehouse()
    rows = con.execute("SELECT run_a, run_b, n_pairs, delta_mean, differing_fields, b_only_successes "
                       "FROM checkpoint_compare").fetchall()
    runs = {r[0] for r in rows} | {r[1] for r in rows}
    assert "synth-ckpt-a-other" not in runs and "synth-coding" not in runs
    assert len(rows) == 8 * 7 // 2 - 7  # 8 runs share the default job list
    row = [r for r in rows if {r[0], r[1]} == {"synth-ckpt-a-bare", "synth-ckpt-a-skill"}][0]
    assert row[4] == ["skill_bank_hash", "skills_mask_rate"]
    eps = {(e["run_id"], e["task_id"], e["sample_id"]): e for e in final_rows(root, "episodes")
           if e["status"] == "completed"}
    a, b = row[0], row[1]
    deltas = [eps[(b, t, s)]["reward"] - e["reward"] for (r, t, s), e in eps.items() if r == a and (b, t, s) in eps]
    assert row[2] == len(deltas) and row[3] == pytest.approx(sum(deltas) / len(deltas), abs=1e-12)
    hot = [r for r in rows if {r[0], r[1]} == {"synth-ckpt-a-bare", "synth-ckpt-a-hot"}][0]
    assert hot[4] == ["sampling", "skill_bank_hash", "skills_mask_rate"]


def test_termination_shares_and_fingerprints(con):
    sums = con.execute("SELECT run_id, sum(share) FROM termination_shares GROUP BY 1").fetchall()
    assert sums and all(s == pytest.approx(1.0, abs=1e-12) for _, s in sums)
    assert con.execute("SELECT count(*) FROM (SELECT run_id, termination FROM termination_shares GROUP BY 1, 2 "
                       "HAVING count(*) > 1)").fetchone()[0] == 0
    fields = {r[0] for r in con.execute("SELECT field FROM run_fingerprints WHERE run_id = 'synth-ckpt-a-skill'").fetchall()}
    assert fields == {"job_list_hash", "experiment_seed", "split_manifest_hash", "model_name", "checkpoint_id", "sampling",
                      "prompt_hash", "skill_bank_hash", "action_limit", "environment_mode", "skills_mask_rate"}
    value = con.execute("SELECT value FROM run_fingerprints WHERE run_id = 'synth-ckpt-a-skill' AND field = 'sampling'")
    assert json.loads(value.fetchone()[0])["temperature"] == 0.6


@pytest.mark.parametrize("relation, key", [
    ("run_metrics", "run_id"),
    ("task_metrics", "run_id, task_id"),
    ("checkpoint_compare", "run_a, run_b"),
    ("termination_shares", "run_id, termination"),
    ("run_fingerprints", "run_id, field"),
    ("model_prices", "model_name"),
    ("paired_deltas('synth-ckpt-a-bare', 'synth-ckpt-a-skill')", "task_id, sample_id"),
    ("pass_at_k(2)", "run_id, task_id"),
    ("run_pass_at_k(3)", "run_id"),
])
def test_grain_is_unique(con, relation, key):
    total, distinct = con.execute(f"SELECT count(*), count(DISTINCT ({key})) FROM {relation}").fetchone()
    assert total > 0 and total == distinct
