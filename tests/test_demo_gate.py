"""Issue 4's done-when on the shipped demo configs: the gate finds the scripted skill's real effect, and no
effect for the placebo bank of the same size."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import REPO

CLI = [sys.executable, "-m", "shopsim_wh.cli.main"]


@pytest.fixture(scope="module")
def demo_wh(tmp_path_factory):
    wh = tmp_path_factory.mktemp("demo") / "wh"
    for cfg in ("demo", "demo_skill", "demo_placebo"):
        out = subprocess.run([*CLI, "run", str(REPO / "configs" / f"{cfg}.yaml"), "-w", str(wh)],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
    return wh


def _gate(wh, treatment):
    out = subprocess.run([*CLI, "gate", "--bare", "demo", "--treatment", treatment, "-w", str(wh), "--format", "json"],
                         capture_output=True, text=True, timeout=120)
    return out.returncode, json.loads(out.stdout)


def test_gate_finds_the_skill_effect(demo_wh):
    code, res = _gate(demo_wh, "demo-skill")
    assert code == 0 and res["decision"] == "pass"
    assert res["n_pairs"] == 80 and res["coverage"] == 1.0
    (coef,) = res["coefficients"]
    assert coef["name"] == "options-before-buy" and coef["beta"] > 0.03 and coef["ci_low"] > 0 and coef["p"] < 0.05


def test_gate_finds_no_effect_for_the_placebo(demo_wh):
    code, res = _gate(demo_wh, "demo-placebo")
    assert code == 1 and res["decision"] == "fail"
    (coef,) = res["coefficients"]
    assert coef["ci_low"] < 0 < coef["ci_high"]


def test_skill_raises_r_option_not_the_placebo(demo_wh):
    out = subprocess.run([*CLI, "sql", "select run_id, avg(r_option) r from episodes group by 1 order by 1", "-w", str(demo_wh),
                          "--format", "json"], capture_output=True, text=True, timeout=60)
    r = {row["run_id"]: row["r"] for row in json.loads(out.stdout)}
    assert r["demo-skill"] > r["demo"] + 0.15
    assert abs(r["demo-placebo"] - r["demo"]) < 0.1
