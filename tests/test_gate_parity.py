"""ShopSimRL parity of the gate: the round-000 online gate's published coefficients, refitted from runs written
into the warehouse (masks re-derived from ShopSimRL's mask rule), the strictly-positive-top-k rule, the exact
solver's errors and the mask rules themselves."""

from __future__ import annotations

import csv
import hashlib
import json
import subprocess
import sys

import pytest

from shopsim_wh.analytics.contributions import ContributionOptions, contributions, fit_paired_delta_ols
from shopsim_wh.analytics.gate import GateDataError, GateRefused
from shopsim_wh.analytics.stats import RankDeficient, solve_exact
from shopsim_wh.core.config import Skills
from shopsim_wh.core.errors import ConfigError
from shopsim_wh.engines.db import connect
from shopsim_wh.rollout.skills import SkillBank, assign_mask, mask_bit, slot_choice

from .shopsimrl_runs import FIXTURES, write_run

EXP = json.loads((FIXTURES / "round000_expected.json").read_text())
ROWS = list(csv.DictReader((FIXTURES / "round000_pairs.csv").open()))
COLUMNS = EXP["columns"]
REWRITES = {s["version"]: s["slot_id"] for s in EXP["slots"] if s["version"] != s["slot_id"]}
METRICS = ("reward", "r_att", "r_loose", "r_option", "r_price", "r_strict", "r_success", "r_type")


def _masks():
    out = {}
    for r in ROWS:
        job = {"split": r["split"], "task_id": int(r["task_id"]), "sample_id": int(r["sample_id"])}
        out[job["task_id"]] = assign_mask(COLUMNS, job, EXP["mask_seed"], "online", REWRITES)
    return out


def _jobs(side: str, masks=None):
    jobs = []
    for r in ROWS:
        j = {"split": r["split"], "task_id": int(r["task_id"]), "sample_id": int(r["sample_id"]),
             **{m: float(r[f"{side}_{m}"]) for m in METRICS}}
        if masks is not None:
            j["skills"] = masks[j["task_id"]]
        jobs.append(j)
    return jobs


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    root = tmp_path_factory.mktemp("round000") / "wh"
    write_run(root, "round-000-bare-val", _jobs("bare"))
    write_run(root, "round-000-gate", _jobs("masked", _masks()), skill_bank="pool-692abcce", skills_mask_seed=20260901)
    return root


def test_refits_the_published_round_000_gate_digit_for_digit(wh):
    res = contributions(connect(wh), "round-000-bare-val", "round-000-gate",
                        ContributionOptions(budget=EXP["active_skill_budget"], columns=COLUMNS))
    assert res.n_pairs == 400
    for metric in METRICS:
        got, want = res.estimates[metric], EXP["estimates"][metric]
        assert got["coefficients"] == want["coefficients"], metric  # exact floats, as published
        assert (got["masked_mean"], got["bare_mean"], got["delta_mean"]) == (
            want["masked_mean"], want["bare_mean"], want["delta_mean"]), metric
    assert res.selected == EXP["selected_intervention_ids"]
    assert res.decision == "pass"
    ranks = {row["chunk_id"]: row["rank"] for row in res.contributions}
    assert ranks["online-bbef274e1764d953"] == 1 and ranks["chunk-a71a5634ee99"] == 16


def test_budget_and_ties_by_id(tmp_path):
    root = tmp_path / "wh"
    sets = [["zeta"], ["alpha"], ["zeta", "alpha"], []] * 3
    bare = [{"split": "val", "task_id": t, "sample_id": 0, "reward": 0.0} for t in range(len(sets))]
    treated = [dict(j, reward=float(len(sets[t])), skills=sets[t]) for t, j in enumerate(bare)]
    write_run(root, "bare", bare)
    write_run(root, "treat", treated, skill_bank="bank")
    res = contributions(connect(root), "bare", "treat",
                        ContributionOptions(budget=1, columns=["zeta", "alpha"]))
    assert res.estimates["reward"]["coefficients"] == {"zeta": 1.0, "alpha": 1.0}
    assert res.selected == ["alpha"]  # equal coefficients: the smaller id ranks first
    assert [(r["chunk_id"], r["rank"], r["status"]) for r in res.contributions] == [
        ("zeta", 2, "budget_excluded"), ("alpha", 1, "selected")]
    assert "r_att" not in res.estimates and any("r_att" in n for n in res.notes)


def test_cli_rule_strictly_positive_top_k(wh):
    cmd = [sys.executable, "-m", "shopsim_wh.cli.main", "gate", "--bare", "round-000-bare-val", "--treatment",
           "round-000-gate", "--rule", "strictly-positive-top-k", "--budget", "3", "--columns", ",".join(COLUMNS),
           "-w", str(wh)]
    out = subprocess.run([*cmd, "--format", "json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["estimator"]["name"] == "paired_delta_ols_main_effects_no_intercept"
    assert doc["estimates"]["reward"]["coefficients"] == EXP["estimates"]["reward"]["coefficients"]
    # best three strictly positive reward coefficients, reported in column order
    assert doc["selected_chunk_ids"] == ["chunk-bbe6cb9408eb", "chunk-1f8d27322e9f", "online-bbef274e1764d953"]
    assert {r["chunk_id"]: r["status"] for r in doc["contributions"]}["chunk-27a7e5bb9344"] == "budget_excluded"
    table = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert table.returncode == 0 and "decision: PASS" in table.stdout


def test_no_positive_coefficient_fails(tmp_path):
    root = tmp_path / "wh"
    jobs = [{"split": "val", "task_id": t, "sample_id": 0, "reward": 1.0, "r_strict": 1.0, "r_success": 1.0}
            for t in range(12)]
    sets = [["a"] if t % 2 else ["b"] if t % 3 else ["a", "b"] for t in range(12)]
    treated = [dict(j, reward=0.0 if "a" in sets[t] else 1.0, skills=sets[t]) for t, j in enumerate(jobs)]
    write_run(root, "bare", jobs)
    write_run(root, "treat", treated, skill_bank="bank")
    res = contributions(connect(root), "bare", "treat")
    assert res.estimates["reward"]["coefficients"] == {"a": -1.0, "b": 0.0}  # b's zero is not strictly positive
    assert res.decision == "fail" and res.selected == []
    assert all(row["status"] == "non_positive" for row in res.contributions)


def test_fit_errors_are_clear():
    with pytest.raises(GateDataError, match="rank deficient"):
        fit_paired_delta_ols([[1, 1], [1, 1], [0, 0]], [1.0, 0.0, 0.0])
    with pytest.raises(GateDataError, match="more pairs than columns"):
        fit_paired_delta_ols([[1, 0], [0, 1]], [1.0, 0.0])
    with pytest.raises(GateDataError, match="0 or 1"):
        fit_paired_delta_ols([[2, 0], [0, 1], [1, 1]], [1.0, 0.0, 1.0])
    with pytest.raises(RankDeficient):
        solve_exact([[1.0, 2.0], [2.0, 4.0]], [1.0, 2.0])


def test_pairing_refusals(tmp_path):
    root = tmp_path / "wh"
    jobs = [{"split": "val", "task_id": t, "sample_id": 0, "reward": float(t % 2), "skills": ["a"] if t % 2 else []}
            for t in range(6)]
    write_run(root, "bare", [dict(j, skills=[]) for j in jobs])
    write_run(root, "bare-with-skills", jobs, skill_bank="bank")
    write_run(root, "treat", jobs, skill_bank="bank-2")
    write_run(root, "other-checkpoint", jobs, skill_bank="bank", checkpoint_id="another")
    write_run(root, "no-checkpoint-bare", [dict(j, skills=[]) for j in jobs], checkpoint_id=None)
    write_run(root, "no-checkpoint", jobs, skill_bank="bank", checkpoint_id=None)
    con = connect(root)
    with pytest.raises(GateRefused, match="not skill-free"):
        contributions(con, "bare-with-skills", "treat")
    with pytest.raises(GateRefused, match="checkpoint_id"):
        contributions(con, "bare", "other-checkpoint")
    with pytest.raises(GateRefused, match="no model.checkpoint_id"):
        contributions(con, "no-checkpoint-bare", "no-checkpoint")


# ------------------------------------------------------------------------------------------ mask rules


def _draw(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def test_gate_a_rule_is_the_threshold_on_the_first_eight_bytes():
    for task in range(50):
        for chunk in ("chunk-a", "chunk-b"):
            expect = _draw(f"20260901:val:{task}:1:{chunk}") < 2 ** 63
            assert mask_bit(20260901, "val", task, 1, chunk) is expect
    present = sum(mask_bit(20260901, "val", t, 0, "c") for t in range(4000))
    assert 1850 < present < 2150


def test_online_rule_is_the_draw_modulo_versions_plus_one():
    assert slot_choice(20260901, "val", 58, 0, "chunk-a9e98e128a35", 2) == _draw(
        "20260901:val:58:0:chunk-a9e98e128a35") % 3
    masks = _masks()  # the published round-000 masks of tasks 58 and 104 (contributions.json observations_table)
    assert masks[58] == ["online-6f027bfd79ba53d1", "chunk-bbe6cb9408eb", "chunk-f58e352cdad0", "chunk-c83ed5ae8b70",
                         "online-43fef639d72271bd", "online-9f5ef47f8e1b2bee", "online-bbef274e1764d953",
                         "online-bf7be6b73666b096"]
    assert "online-6f027bfd79ba53d1" not in masks[104] and "chunk-a9e98e128a35" in masks[104]
    assert all(not ({"chunk-a9e98e128a35", "online-6f027bfd79ba53d1"} <= set(m)) for m in masks.values())


def _bank(tmp_path, rewrite=False):
    skills = [{"id": c, "content": f"text {c}"} for c in COLUMNS]
    if rewrite:
        for s in skills:
            if s["id"] in REWRITES:
                s["rewrites"] = REWRITES[s["id"]]
    path = tmp_path / "bank.json"
    path.write_text(json.dumps({"version": "pool", "skills": skills}))
    return path


def test_skill_bank_with_mask_seed_selects_the_published_masks(tmp_path):
    bank = SkillBank(str(_bank(tmp_path, rewrite=True)), mask_seed=20260901, mask_rule="online")
    masks = _masks()
    for task in (19, 58, 104, 4776):
        got = [s.id for s in bank.select({"task_id": task, "split": "val", "sample_id": 0}, seed=0)]
        assert got == masks[task]
    gate_a = SkillBank(str(_bank(tmp_path)), mask_seed=7)
    got = [s.id for s in gate_a.select({"task_id": 3, "split": "val", "sample_id": 2}, seed=0)]
    assert got == [c for c in COLUMNS if mask_bit(7, "val", 3, 2, c)]
    with pytest.raises(ConfigError, match="sample_id"):
        gate_a.select({"task_id": 3, "split": "val"}, seed=0)


def test_mask_modes_are_exclusive(tmp_path):
    with pytest.raises(ConfigError, match="only one"):
        SkillBank(str(_bank(tmp_path)), mask_rate=0.5, mask_seed=1)
    with pytest.raises(ValueError, match="only one"):
        Skills(path="x.json", mask_rate=0.5, mask_seed=20260901)
    assert Skills(path="x.json", mask_seed=20260901).mask_rule == "gate-a"
