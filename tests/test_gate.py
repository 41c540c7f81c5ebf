"""The paired gate against an independent numpy implementation, its decision, refusals and clear errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from shopsim_wh.analytics.gate import GateDataError, GateError, GateOptions, GateRefused, gate
from shopsim_wh.engines.db import connect, sql_dir

from .test_analytics_support import final_rows, read_table, synth_connection, synth_warehouse
from .test_gate_stats import t_abs_below

BARE, SKILL, PLACEBO_BARE, PLACEBO = "synth-ckpt-a-bare", "synth-ckpt-a-skill", "synth-ckpt-b-bare", "synth-ckpt-b-placebo"


@pytest.fixture(scope="module")
def con():
    return synth_connection()


@pytest.fixture(scope="module")
def root() -> Path:
    return synth_warehouse()[0]


def independent_pairs(root: Path, bare: str, treatment: str):
    """(x, y, names) built from the Parquet rows in plain Python, pairs in (task_id, sample_id) order."""
    eps = final_rows(root, "episodes")

    def completed(run):
        return {(e["task_id"], e["sample_id"]): e for e in eps
                if e["run_id"] == run and e["status"] == "completed" and e["reward"] is not None}

    b, t = completed(bare), completed(treatment)
    keys = sorted(set(b) & set(t))
    skills: dict[str, set[str]] = {}
    for s in final_rows(root, "skills_selected"):
        if s["run_id"] == treatment:
            skills.setdefault(s["episode_id"], set()).add(s["skill_id"])
    chosen = [skills.get(t[k]["episode_id"], set()) for k in keys]
    names = sorted(set().union(*chosen))
    x = np.array([[1.0 if n in c else 0.0 for n in names] for c in chosen])
    y = np.array([t[k]["reward"] - b[k]["reward"] for k in keys])
    return x, y, names, keys


def independent_fit(x, y, bootstrap, seed, alpha, pairs_per_pattern=500):
    n, k = x.shape
    beta = np.linalg.lstsq(x, y, rcond=None)[0]
    resid = y - x @ beta
    df = n - k
    sigma2 = float(resid @ resid) / df
    se = np.sqrt(sigma2 * np.diag(np.linalg.inv(x.T @ x)))
    t = beta / se
    p = [1 - t_abs_below(float(v), df) for v in t]
    boots = []
    patterns, inverse = np.unique(x, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    members = [np.nonzero(inverse == p)[0] for p in range(len(patterns))]
    for b in range(bootstrap):  # the documented sampler, written out pair by pair
        rng = np.random.default_rng([seed, b])
        if len(patterns) <= 64 and n >= pairs_per_pattern * len(patterns):
            m = rng.multinomial(n, [len(v) / n for v in members])
            idx = np.concatenate([members[p][rng.integers(0, len(members[p]), m[p])] if m[p] else
                                  np.zeros(0, dtype=int) for p in range(len(patterns))])
        else:
            idx = rng.integers(0, n, n)
        boots.append(np.linalg.lstsq(x[idx], y[idx], rcond=None)[0])
    lo, hi = np.quantile(np.array(boots), [alpha / 2, 1 - alpha / 2], axis=0)
    return beta, se, t, p, lo, hi


@pytest.mark.parametrize("treatment_pair", [(BARE, SKILL), (PLACEBO_BARE, PLACEBO)])
def test_every_statistic_matches_independent_numpy(con, root, treatment_pair):
    bare, treatment = treatment_pair
    res = gate(con, bare, treatment, GateOptions(bootstrap=200, seed=5, alpha=0.1))
    x, y, names, _ = independent_pairs(root, bare, treatment)
    beta, se, t, p, lo, hi = independent_fit(x, y, 200, 5, 0.1)
    assert res.n_pairs == len(y) and [c.name for c in res.coefficients] == names
    assert res.df == len(y) - len(names)
    for j, c in enumerate(res.coefficients):
        assert c.beta == pytest.approx(beta[j], abs=1e-9)
        assert c.se == pytest.approx(se[j], abs=1e-9)
        assert c.t == pytest.approx(t[j], abs=1e-9)
        assert c.p == pytest.approx(p[j], abs=1e-9)
        assert c.ci_low == pytest.approx(lo[j], abs=1e-9)
        assert c.ci_high == pytest.approx(hi[j], abs=1e-9)
    planned = {r["run_id"]: r["planned_episodes"] for r in read_table(root, "runs")}
    assert res.coverage == pytest.approx(len(y) / planned[treatment], abs=1e-12)


@pytest.mark.parametrize("treatment_pair", [(BARE, SKILL), (PLACEBO_BARE, PLACEBO)])
def test_the_pattern_sampler_matches_too(con, root, monkeypatch, treatment_pair):
    """The per-pattern bootstrap sampler (used from 500 pairs per covariate pattern) on these smaller runs."""
    import shopsim_wh.analytics.gate as gate_module

    monkeypatch.setattr(gate_module, "PAIRS_PER_PATTERN", 40)
    bare, treatment = treatment_pair
    res = gate(con, bare, treatment, GateOptions(bootstrap=120, seed=9))
    x, y, _, _ = independent_pairs(root, bare, treatment)
    assert len(y) >= 40 * len(np.unique(x, axis=0))
    beta, se, t, p, lo, hi = independent_fit(x, y, 120, 9, 0.05, pairs_per_pattern=40)
    got = np.array([[c.beta, c.se, c.t, c.p, c.ci_low, c.ci_high] for c in res.coefficients])
    assert np.allclose(got, np.column_stack([beta, se, t, p, lo, hi]), atol=1e-9, rtol=0)


def test_continuous_covariates_use_the_pair_sampler_and_match(con, root):
    res = gate(con, BARE, SKILL,
               GateOptions(covariates={"one": "1", "mod": "p.task_id % 97"}, bootstrap=60, seed=2))
    _, y, _, keys = independent_pairs(root, BARE, SKILL)
    x = np.array([[1.0, float(t % 97)] for t, _ in keys])
    assert len(np.unique(x, axis=0)) > 64
    beta, se, t, p, lo, hi = independent_fit(x, y, 60, 2, 0.05)
    got = np.array([[c.beta, c.se, c.t, c.p, c.ci_low, c.ci_high] for c in res.coefficients])
    assert np.allclose(got, np.column_stack([beta, se, t, p, lo, hi]), atol=1e-9, rtol=0)


def test_planted_skill_passes_and_placebo_fails(con):
    res = gate(con, BARE, SKILL, GateOptions(bootstrap=300))
    assert res.passed and res.decision == "pass"
    top = max(res.coefficients, key=lambda c: c.t)
    assert top.name == "skill-read-options" and top.beta > 0.04 and top.p < 1e-3 and top.ci_low > 0
    placebo = gate(con, PLACEBO_BARE, PLACEBO, GateOptions(bootstrap=300))
    assert not placebo.passed and placebo.decision == "fail"
    assert all(c.p > 0.05 for c in placebo.coefficients)


def test_json_shape_and_table(con):
    res = gate(con, BARE, SKILL, GateOptions(bootstrap=50))
    doc = json.loads(res.to_json())
    assert list(doc) == ["n_pairs", "coverage", "coefficients", "decision"]
    assert doc["decision"] in ("pass", "fail") and doc["n_pairs"] == res.n_pairs
    assert all(list(c) == ["name", "beta", "se", "t", "p", "ci_low", "ci_high"] for c in doc["coefficients"])
    full = json.loads(res.to_json(full=True))
    assert full["bare_run"] == BARE and "reward_mean" in full["bare_score"]
    text = res.to_table()
    assert "skill-read-options" in text and "decision: " in text and "skill-free" in text


def test_bare_score_is_the_bare_runs_own_metrics(con):
    res = gate(con, BARE, SKILL, GateOptions(bootstrap=0))
    row = con.execute("SELECT completed, reward_mean, reward_sem, r_success_mean FROM run_metrics WHERE run_id = ?",
                      [BARE]).fetchone()
    b = res.bare_score
    assert (b["completed"], b["reward_mean"], b["reward_sem"], b["r_success_mean"]) == pytest.approx(row, abs=1e-12)
    assert all(c.ci_low is None and c.ci_high is None for c in res.coefficients)


def test_custom_covariates_constant_is_the_mean_delta(con, root):
    res = gate(con, BARE, SKILL, GateOptions(covariates={"all": "1"}, bootstrap=0))
    _, y, _, _ = independent_pairs(root, BARE, SKILL)
    (c,) = res.coefficients
    assert c.name == "all" and c.beta == pytest.approx(y.mean(), abs=1e-12)
    assert c.se == pytest.approx(y.std(ddof=1) / math.sqrt(len(y)), abs=1e-12)
    two = gate(con, BARE, SKILL,
               GateOptions(covariates=["skill:skill-read-options", "p.task_id % 2"], bootstrap=0))
    assert [c.name for c in two.coefficients] == ["skill-read-options", "p.task_id % 2"]


def test_refuses_runs_that_differ_in_more_than_skills(con):
    with pytest.raises(GateRefused, match="sampling") as exc:
        gate(con, BARE, "synth-ckpt-a-hot")
    assert set(exc.value.diff) == {"sampling"}
    with pytest.raises(GateRefused, match="job_list_hash"):
        gate(con, BARE, "synth-ckpt-a-other")
    with pytest.raises(GateRefused, match="checkpoint_id"):
        gate(con, BARE, PLACEBO)


def test_checkpoint_required_unless_allowed(con):
    with pytest.raises(GateRefused, match="checkpoint_id"):
        gate(con, "synth-nockpt-bare", "synth-nockpt-skill")
    res = gate(con, "synth-nockpt-bare", "synth-nockpt-skill",
               GateOptions(allow_missing_checkpoint=True, bootstrap=20))
    assert res.n_pairs > 800


def test_refuses_a_bare_run_with_skills_same_run_and_unknown_runs(con):
    with pytest.raises(GateRefused, match="not skill-free"):
        gate(con, SKILL, BARE)
    with pytest.raises(GateRefused, match="same run"):
        gate(con, BARE, BARE)
    with pytest.raises(GateError, match="not in the warehouse"):
        gate(con, BARE, "no-such-run")


def test_collinear_and_empty_covariates_are_clear_errors(con):
    with pytest.raises(GateDataError, match="proportional"):
        gate(con, BARE, SKILL,
             GateOptions(covariates={"a": "skill:skill-read-options", "b": "skill:skill-read-options"}))
    with pytest.raises(GateDataError, match="zero on every pair"):
        gate(con, BARE, SKILL, GateOptions(covariates=["skill:no-such-skill"]))
    with pytest.raises(GateDataError, match="linearly dependent"):
        gate(con, BARE, SKILL, GateOptions(covariates={
            "one": "1", "opt": "skill:skill-read-options",
            "not_opt": "CASE WHEN list_contains(p.skills, 'skill-read-options') THEN 0 ELSE 1 END"}))
    with pytest.raises(GateDataError, match="no covariates"):
        gate(con, BARE, SKILL, GateOptions(covariates=[]))
    with pytest.raises(GateDataError, match="NULL"):
        gate(con, BARE, SKILL, GateOptions(covariates=["CASE WHEN p.task_id % 2 = 0 THEN 1 END"]))


def _patched_connection(root: Path, old: str, new: str):
    """A fresh connection whose paired_deltas macro has one piece of SQL replaced."""
    con = connect(root)
    text = (sql_dir() / "analytics" / "paired_deltas.sql").read_text()
    assert old in text
    con.execute(text.replace(old, new))
    return con


def test_zero_pairs_and_equal_deltas_are_clear_errors(root):
    con = _patched_connection(root, "SELECT * FROM final;", "SELECT * FROM final WHERE false;")
    with pytest.raises(GateDataError, match="zero pairs"):
        gate(con, BARE, SKILL)
    con = _patched_connection(root, "t.reward - b.reward AS delta", "0.25 AS delta")
    with pytest.raises(GateDataError, match="all .* paired deltas equal 0.25"):
        gate(con, BARE, SKILL)


def test_bad_arguments(con):
    with pytest.raises(GateError, match="alpha"):
        gate(con, BARE, SKILL, GateOptions(alpha=1.5))
    with pytest.raises(GateError, match="bootstrap"):
        gate(con, BARE, SKILL, GateOptions(bootstrap=-1))


def test_accepts_a_warehouse_path(root):
    res = gate(root, BARE, SKILL, GateOptions(bootstrap=10))
    assert res.n_pairs > 800


@pytest.mark.parametrize("covariates, extra", [
    (None, set()),
    (["skill:skill-read-options", "p.task_id % 2"], set()),
    ({"b": "CASE WHEN p.B_r_success > 0 THEN 1 ELSE 0 END", "s": "skill:skill-check-budget"}, {"B_r_success"}),
    (["skill:skill-read-options", "p.R_i * 0 + 1"], "all"),  # '*' may be a star: every column
    (["skill:skill-read-options", "CASE WHEN len(to_json(p)) > 0 THEN 1 ELSE 0 END"], "all"),  # the whole row
])
def test_pairs_table_holds_only_the_columns_the_fit_reads(con, monkeypatch, covariates, extra):
    """Issue 13: the pairs table holds every pair (480,268 at 1M episodes): only the four columns the fit reads
    plus those the covariates name, not all 24 of paired_deltas. Same result as with every column."""
    from shopsim_wh.analytics import gate as gate_mod

    seen = []
    fit = gate_mod._fit

    def spy(con_, table, *a, **k):
        seen.append({r[0] for r in con_.execute(f"DESCRIBE {table}").fetchall()})
        return fit(con_, table, *a, **k)

    monkeypatch.setattr(gate_mod, "_fit", spy)
    narrow = gate(con, BARE, SKILL, GateOptions(covariates=covariates, bootstrap=50, seed=3))
    every = {d[0] for d in con.execute("SELECT * FROM paired_deltas(?, ?) LIMIT 0", [BARE, SKILL]).description}
    assert seen[0] == (every if extra == "all" else {"task_id", "sample_id", "delta", "skills"} | extra)
    monkeypatch.setattr(gate_mod, "_pair_columns", lambda *a: "*")
    wide = gate(con, BARE, SKILL, GateOptions(covariates=covariates, bootstrap=50, seed=3))
    assert seen[1] == every and len(every) > 20
    a, b = narrow.to_dict(full=True), wide.to_dict(full=True)  # DuckDB's parallel sums: the last bits may differ
    ca, cb = a.pop("coefficients"), b.pop("coefficients")
    assert a.pop("residual_se") == pytest.approx(b.pop("residual_se"), rel=1e-9)
    assert a == b
    assert [c.pop("name") for c in ca] == [c.pop("name") for c in cb]
    assert ca == [pytest.approx(c, rel=1e-9) for c in cb]


def test_a_run_is_named_by_its_id_or_by_an_experiment_that_holds_one_run():
    import duckdb

    from shopsim_wh.analytics.gate import GateError, resolve_run

    con = duckdb.connect()
    con.execute("CREATE TABLE runs AS SELECT * FROM (VALUES ('shopsimrl-v4.aaa', 'base-free'), "
                "('shopsimrl-v4.bbb', 'twice'), ('shopsimrl-v4.ccc', 'twice')) t(run_id, experiment)")
    assert resolve_run(con, "shopsimrl-v4.bbb") == "shopsimrl-v4.bbb"
    assert resolve_run(con, "base-free") == "shopsimrl-v4.aaa"
    assert resolve_run(con, "nowhere") == "nowhere"  # left to the caller, which lists the known runs
    with pytest.raises(GateError, match=r"2 runs \(shopsimrl-v4.bbb, shopsimrl-v4.ccc\)"):
        resolve_run(con, "twice")
