"""Journey: two shop runs of one checkpoint made by `shopsim-wh run`, plus third-party traces (Claude Code,
tau-bench, ATIF) landed by `shopsim-wh ingest` -> `shopsim-wh report` -> the HTML a user opens: one section per
domain, every run its own bar, the coding sessions nowhere near the shop's reward axes, and `--group-by
checkpoint` pooling the checkpoint's runs into one bar. (The page in a browser: tests/test_report.py.)"""

from __future__ import annotations

import json
import re

import pytest

from .conftest import REPO
from .helpers import write_config
from .journeys import ok, shopsim

THIRD_PARTY = REPO / "tests" / "fixtures" / "third_party"


def _sql(wh, query: str) -> list[dict]:
    return json.loads(ok(shopsim("sql", "-w", wh, query, "--format", "json")).stdout)


def _page(text: str) -> tuple[dict[str, str], dict[str, dict]]:
    """(section id -> its HTML, chart key -> its Vega-Lite spec) of a report."""
    sections = dict(re.findall(r'<section id="([a-z_]+)">(.*?)</section>', text, re.S))
    specs = {k: json.loads(v) for k, v in
             re.findall(r'<script type="application/json" data-chart="chart-([a-z_]+)">(.*?)</script>', text, re.S)}
    return sections, specs


def _bars(spec: dict) -> dict[tuple[str, str], dict]:
    """A reward chart's bars: (series, metric) -> its row."""
    return {(r["grp"], r["metric"]): r for r in spec["data"]["values"]}


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("journey_report")
    wh = tmp / "wh"
    for name, seed in (("shop-a", 3), ("shop-b", 4)):  # one checkpoint (ck1), two runs
        cfg = write_config(tmp / f"{name}.yaml", experiment={"name": name, "seed": seed},
                           tasks={"sample_size": 4, "repeats": 1})
        ok(shopsim("run", cfg, "-w", wh, "-q", cwd=tmp))
    ok(shopsim("ingest", "-w", wh, "-q", THIRD_PARTY / "claude_code_session-share", THIRD_PARTY / "claude_code_cclogviewer",
               THIRD_PARTY / "tau_bench", THIRD_PARTY / "atif_login-trace", cwd=tmp))
    runs = {r["run_id"]: r for r in _sql(wh, "SELECT r.run_id, r.source_format, m.reward_mean, m.r_success_mean "
                                             "FROM runs AS r JOIN run_metrics AS m USING (run_id)")}
    return tmp, wh, runs


def test_report_has_a_section_per_domain_and_a_bar_per_run(warehouse):
    tmp, wh, runs = warehouse
    by_source = {s: sorted(r for r in runs if runs[r]["source_format"] == s) for s in
                 ("shopsim-wh-runner", "claude-code", "openai-messages", "atif")}
    assert len(by_source["shopsim-wh-runner"]) == 2 and len(by_source["claude-code"]) == 2
    (tau,), (atif,) = by_source["openai-messages"], by_source["atif"]
    summary = json.loads(ok(shopsim("report", "-w", wh, "-o", tmp / "r.html", "--format", "json", "-q")).stdout)
    sections, specs = _page((tmp / "r.html").read_text())

    assert list(sections) == ["shop", "coding", "other"] == summary["sections"]
    assert summary["group_by"] == "run"
    assert {d: sorted(r) for d, r in summary["domains"].items()} == {
        "shop": ["shop-a", "shop-b"], "coding": by_source["claude-code"], "other": sorted([tau, atif])}
    # every run in its own domain's run table (full id in the cell's title), in no other
    for domain, ids in summary["domains"].items():
        for other_domain, html in sections.items():
            assert all((f'title="{r}"' in html) == (other_domain == domain) for r in ids), (domain, other_domain)

    # shop: one bar per run, each the run's own mean; nothing but shop runs on any shop axis
    shop = _bars(specs["shop_reward"])
    assert sorted({g for g, _ in shop}) == ["shop-a", "shop-b"]
    for run_id in ("shop-a", "shop-b"):
        assert shop[run_id, "reward"]["mean"] == pytest.approx(runs[run_id]["reward_mean"])
        assert shop[run_id, "success"]["mean"] == pytest.approx(runs[run_id]["r_success_mean"])
        assert shop[run_id, "reward"]["runs"] == 1
    shop_series = {r.get("grp") for k, s in specs.items() if k.startswith("shop_") for r in s["data"]["values"]}
    assert shop_series - {None} == {"shop-a", "shop-b"}

    # coding sessions: no reward drawn at all, their tools drawn in their own section
    assert not [k for k in specs if k.startswith("coding_") and ("reward" in k or "pass_at_k" in k)]
    assert "Reward and success" not in sections["coding"]
    assert {r["grp"] for r in specs["coding_tools"]["data"]["values"]} == set(by_source["claude-code"])

    # other traces: tau-bench's own reward on its own axes; ATIF has none, so no bar
    other = _bars(specs["other_reward"])
    assert {g for g, _ in other} == {tau}
    assert other[tau, "reward"]["mean"] == pytest.approx(runs[tau]["reward_mean"])
    assert "task_reward" in sections["other"] and 'data-chart="chart-shop_' not in sections["other"]


def test_group_by_checkpoint_pools_the_checkpoints_runs(warehouse):
    tmp, wh, _ = warehouse
    ok(shopsim("report", "-w", wh, "-o", tmp / "c.html", "--group-by", "checkpoint", "-q"))
    sections, specs = _page((tmp / "c.html").read_text())
    pooled = _sql(wh, "SELECT avg(reward) AS reward, avg(r_success) AS success, count(*) AS n FROM episodes "
                      "WHERE run_id IN ('shop-a', 'shop-b') AND status = 'completed'")[0]
    shop = _bars(specs["shop_reward"])
    assert sorted(shop) == [("ck1", "reward"), ("ck1", "success")]
    assert shop["ck1", "reward"]["runs"] == 2 and shop["ck1", "reward"]["n"] == pooled["n"] == 8
    assert shop["ck1", "reward"]["mean"] == pytest.approx(pooled["reward"])
    assert shop["ck1", "success"]["mean"] == pytest.approx(pooled["success"])
    assert "ck1: 2 runs" in sections["shop"]
    # runs without a checkpoint are never pooled together: every coding session stays its own series
    assert len({r["grp"] for r in specs["coding_tools"]["data"]["values"]}) == 2
    # the run table still lists every run
    assert 'title="shop-a"' in sections["shop"] and 'title="shop-b"' in sections["shop"]

    bad = shopsim("report", "-w", wh, "-o", tmp / "x.html", "--group-by", "model")
    assert bad.returncode == 2 and "--group-by takes run or checkpoint" in bad.stderr
    assert not (tmp / "x.html").exists()
