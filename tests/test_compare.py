"""`compare` reproduces ShopSimRL's published paired comparisons digit for digit, from runs in the warehouse."""

from __future__ import annotations

import csv
import hashlib
import json
import random
import subprocess
import sys

import pytest

from shopsim_wh.analytics.compare import (
    CompareOptions,
    ComparisonError,
    bootstrap_means,
    compare,
    metric_seed,
    to_table,
)
from shopsim_wh.engines.db import connect

from .shopsimrl_runs import FIXTURES, write_run

EXPECTED = json.loads((FIXTURES / "expected_comparisons.json").read_text())
ROWS = list(csv.DictReader((FIXTURES / "test_task_outcomes.csv").open()))


def _jobs(arm: str, skills: list[str]) -> list[dict]:
    out = []
    for r in ROWS:
        reward, success = float(r[f"{arm}_reward"]), float(r[f"{arm}_success"])
        out.append({"split": r["split"], "task_id": int(r["task_id"]), "sample_id": int(r["sample_id"]),
                    "reward": reward, "r_strict": reward, "r_success": success, "skills": skills})
    return out


BANK = ["chunk-27a7e5bb9344", "chunk-a9e98e128a35"]


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    root = tmp_path_factory.mktemp("cmp") / "wh"
    for name, e in EXPECTED.items():
        write_run(root, f"{name}-bare", _jobs(e["bare_arm"], []))
        write_run(root, f"{name}-equipped", _jobs(e["equipped_arm"], BANK), skill_bank="bank-sha")
    return root


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_reproduces_the_published_comparison(wh, name):
    res = compare(connect(wh), f"{name}-bare", f"{name}-equipped")
    want = EXPECTED[name]
    assert res["paired"]["pairs"] == want["pairs"] == 400
    assert {k: res["paired"]["bootstrap"][k] for k in want["bootstrap"]} == want["bootstrap"]
    for metric, exp in want["metrics"].items():
        got = res["paired"]["metrics"][metric]
        assert {k: got[k] for k in exp} == exp, metric  # exact floats, as published
    assert res["schema_version"] == "shopsimrl-paired-run-comparison-v1"
    assert res["paired"]["difference_direction"] == "equipped_minus_bare"
    assert res["alignment"]["traces"]["equipped_chunk_ids"] == BANK
    assert "model_name" in res["alignment"]["plan"]["checked_fields"]
    assert not any(f.startswith("skill") for f in res["alignment"]["plan"]["checked_fields"])


def test_cli_json_and_table(wh):
    cli = [sys.executable, "-m", "shopsim_wh.cli.main", "compare", "qwen35-4b-test-base-s0-bare",
           "qwen35-4b-test-base-s0-equipped", "-w", str(wh), "--samples", "2000"]
    out = subprocess.run([*cli, "--format", "json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["paired"]["bootstrap"]["samples"] == 2000 and "reward" in doc["paired"]["metrics"]
    table = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert table.returncode == 0 and table.stdout.splitlines()[3].startswith("reward ")
    assert to_table(doc).splitlines()[3].split()[:2] == ["reward", f"{doc['paired']['metrics']['reward']['bare_mean']:.6f}"]


def _reference_means(diff, samples, seed, compensated):
    """The per-resample loop written out with Python's own random.Random."""
    rng, n, out = random.Random(seed), len(diff), []
    for _ in range(samples):
        total, comp = 0.0, 0.0
        for _ in range(n):
            x = diff[rng.randrange(n)]
            t = total + x
            if compensated:
                comp += (total - t) + x if abs(total) >= abs(x) else (x - t) + total
            total = t
        if compensated and comp:
            total += comp
        out.append(total / n)
    return out


@pytest.mark.parametrize("n", [1, 7, 400, 513])
def test_bulk_draws_equal_the_python_loop(n):
    rng = random.Random(n)
    diff = [rng.choice([-1.0, 0.0, 1.0, 0.1, -0.3333333333333333]) for _ in range(n)]
    seed = metric_seed(20260901, f"m{n}")
    for summation, compensated in (("sequential", False), ("neumaier", True)):
        assert list(bootstrap_means(diff, 300, seed, summation)) == _reference_means(diff, 300, seed, compensated)


def test_metric_seed_is_the_hash_of_seed_and_name():
    assert metric_seed(20260901, "reward") == int.from_bytes(hashlib.sha256(b"20260901:reward").digest()[:8], "big")


def test_refuses_misaligned_runs(tmp_path):
    root = tmp_path / "wh"
    jobs = _jobs("base_free", [])[:20]
    write_run(root, "bare", jobs)
    write_run(root, "eq", _jobs("base_s0", BANK)[:19], skill_bank="b")
    write_run(root, "eq-mixed", [dict(j, skills=BANK[: 1 + i % 2]) for i, j in enumerate(_jobs("base_s0", BANK)[:20])],
              skill_bank="b")
    write_run(root, "eq-none", _jobs("base_s0", [])[:20], skill_bank="b")
    write_run(root, "other-model", _jobs("base_s0", BANK)[:20], skill_bank="b", model_name="another")
    con = connect(root)
    with pytest.raises(ComparisonError, match="do not align"):
        compare(con, "bare", "eq", CompareOptions(samples=10))
    with pytest.raises(ComparisonError, match="frozen"):
        compare(con, "bare", "eq-mixed", CompareOptions(samples=10))
    with pytest.raises(ComparisonError, match="injected no skills"):
        compare(con, "bare", "eq-none", CompareOptions(samples=10))
    with pytest.raises(ComparisonError, match="model_name"):
        compare(con, "bare", "other-model", CompareOptions(samples=10))
    with pytest.raises(ComparisonError, match="samples"):
        compare(con, "bare", "eq", CompareOptions(samples=0))
