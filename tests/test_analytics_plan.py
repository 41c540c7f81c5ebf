"""run_metrics reads the episodes once and stays cheap to plan (sql/analytics/run_metrics.sql).

run_metrics computes its per-run figures, the attempt totals and the per-task success counts from one pass
over the episode attempts instead of reading the `episodes`, `episode_attempts` and `task_success_counts`
views (each of which would scan the episode files again). These tests hold it to those views' definitions,
and check the plan: the episode files are scanned at most twice (the attempts and the retried_episodes
lookup), and a run_id filter (the gate's bare score) still prunes every scan to that run's files.
The plan tests read everything from Parquet (small_table_bytes=0); the last tests check that the in-memory
copies of small tables (db.connect's default) give the same answers and really replace the scans.
"""

from __future__ import annotations

import json
import statistics

import pytest

from shopsim_wh.engines.db import connect

from .test_analytics_support import synth_connection, synth_warehouse

PER_RUN = """
SELECT
    run_id,
    count(*) AS episodes,
    count(*) FILTER (WHERE episode_completed(status, done)) AS completed,
    count(*) FILTER (WHERE NOT episode_completed(status, done)) AS failed,
    avg(reward) FILTER (WHERE episode_completed(status, done)) AS reward_mean,
    avg(r_strict) FILTER (WHERE episode_completed(status, done)) AS r_strict_mean,
    avg(r_success) FILTER (WHERE episode_completed(status, done)) AS r_success_mean,
    avg(total_actions) FILTER (WHERE episode_completed(status, done)) AS mean_steps,
    CAST(sum(protocol_errors) FILTER (WHERE episode_completed(status, done)) AS DOUBLE)
        / nullif(sum(model_steps) FILTER (WHERE episode_completed(status, done)), 0) AS protocol_error_rate,
    CAST(count(*) FILTER (WHERE episode_completed(status, done) AND termination_reason = 'purchase') AS DOUBLE)
        / count(*) AS share_purchase,
    CAST(count(*) FILTER (WHERE NOT episode_completed(status, done)) AS DOUBLE) / count(*) AS share_error
FROM episodes
GROUP BY run_id
"""
ATTEMPTS = """
SELECT run_id, count(*) AS attempts, sum(tokens_in) AS tokens_in_total, sum(duration_s) AS wall_time_total_s
FROM episode_attempts
GROUP BY run_id
"""


@pytest.fixture(scope="module")
def con():
    return synth_connection()


@pytest.fixture(scope="module")
def parquet_con():
    """Every table read from its Parquet files, whatever its size."""
    return connect(synth_warehouse()[0], small_table_bytes=0)


@pytest.fixture(scope="module")
def memory_con():
    """Every table copied into memory at connect."""
    return connect(synth_warehouse()[0], small_table_bytes=1 << 40)


def rows(con, sql: str) -> dict[str, dict]:
    cur = con.execute(sql)
    cols = [d[0] for d in cur.description]
    return {r[0]: dict(zip(cols, r, strict=True)) for r in cur.fetchall()}


def same(a, b) -> bool:
    return a == b or (a is not None and b is not None and a == pytest.approx(b, rel=1e-12, abs=1e-12))


def test_per_run_figures_match_the_episodes_view(con):
    metrics = rows(con, "SELECT * FROM run_metrics")
    expected = rows(con, PER_RUN)
    for run_id, attempts in rows(con, ATTEMPTS).items():
        expected[run_id] |= attempts  # every run with attempts has final attempts
    assert expected and set(expected) <= set(metrics)
    for run_id, want in expected.items():
        for key, value in want.items():
            assert same(metrics[run_id][key], value), (run_id, key, metrics[run_id][key], value)


def test_pass_at_k_matches_task_success_counts(con):
    metrics = rows(con, "SELECT * FROM run_metrics")
    per_task: dict[str, list[tuple[int, int]]] = {}
    for run_id, n, c in con.execute("SELECT run_id, n, c FROM task_success_counts").fetchall():
        per_task.setdefault(run_id, []).append((n, c))
    for run_id, m in metrics.items():
        tasks = per_task.get(run_id)
        if not tasks:
            assert m["tasks"] is None and m["pass_at_1"] is None, run_id
            continue
        k = max(n for n, _ in tasks)
        assert (m["repeats"], m["tasks"]) == (k, len(tasks)), run_id
        assert same(m["pass_at_1"], statistics.fmean(c / n for n, c in tasks)), run_id
        want = con.execute("SELECT avg(pass_at_k_estimate(n, c, ?)) FROM task_success_counts WHERE run_id = ?",
                           [k, run_id]).fetchone()[0] if k > 1 else None
        assert same(m["pass_at_k"], want), run_id
        want = con.execute("SELECT avg(pass_hat_k_estimate(n, c, ?)) FROM task_success_counts WHERE run_id = ?",
                           [k, run_id]).fetchone()[0] if k > 1 else None
        assert same(m["pass_hat_k"], want), run_id


def parquet_scans(con, sql: str, params=()) -> list[dict]:
    plan = json.loads(con.execute(f"EXPLAIN (FORMAT json) {sql}", list(params)).fetchall()[0][1])
    out, todo = [], list(plan)
    while todo:
        node = todo.pop()
        todo += node.get("children", [])
        if node.get("name") == "READ_PARQUET":
            out.append(node.get("extra_info", {}))
    return out


def test_run_metrics_scans_the_episode_files_at_most_twice(parquet_con):
    scans = parquet_scans(parquet_con, "SELECT * FROM run_metrics")
    episode_scans = [s for s in scans if "episode_id" in s.get("Projections", [])]
    assert len(episode_scans) <= 2, scans  # the attempts and the retried_episodes lookup
    assert len(scans) <= 3, scans  # ... and runs


def test_a_run_id_filter_prunes_every_scan(parquet_con):
    scans = parquet_scans(parquet_con, "SELECT completed, reward_mean FROM run_metrics WHERE run_id = ?",
                          ["synth-ckpt-a-bare"])
    assert scans and all(s.get("Scanning Files", "").startswith("1/") for s in scans), scans


def test_tables_copied_into_memory_replace_the_scans(memory_con, parquet_con):
    assert parquet_scans(parquet_con, "SELECT * FROM run_metrics")
    assert parquet_scans(memory_con, "SELECT * FROM run_metrics") == []
    copies = {r[0] for r in memory_con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()}
    assert {"stg_episodes", "stg_runs", "stg_steps"} <= copies


@pytest.mark.parametrize("sql", [
    "SELECT * FROM run_metrics",
    "SELECT * FROM episodes",
    "SELECT * FROM task_metrics",
    "SELECT * FROM error_labels",
    "SELECT run_id, count(*), sum(step_idx), count(DISTINCT agent_id) FROM ir_steps GROUP BY run_id",
])
def test_memory_copies_answer_like_the_parquet_files(memory_con, parquet_con, sql):
    ordered = f"SELECT * FROM ({sql}) ORDER BY ALL"
    want = parquet_con.execute(ordered).fetchall()
    assert want
    assert memory_con.execute(ordered).fetchall() == want
