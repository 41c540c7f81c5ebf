"""`shopsim-wh report`: the HTML report over a small real warehouse (two demo runs of the embedded simulator,
bare and skill, plus the real Claude Code, tau-bench and ATIF traces of tests/fixtures/third_party), its figures
checked against the views, and the page rendered in headless Chromium over the DevTools protocol at 1,400 px."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from shopsim_wh.core.config import load_config
from shopsim_wh.engines import db
from shopsim_wh.engines.db import connect
from shopsim_wh.ingest import ingest
from shopsim_wh.report import ReportError, ReportOptions, build, write_report
from shopsim_wh.rollout.runner import run

from .browser import Browser, chromium_binary
from .conftest import REPO

CLI = [sys.executable, "-m", "shopsim_wh.cli.main"]
THIRD_PARTY = REPO / "tests" / "fixtures" / "third_party"
EXPECTED_CHARTS = {"shop_reward", "shop_components", "shop_termination", "shop_error_codes", "shop_error_steps",
                   "shop_step_hist", "shop_token_hist", "shop_cost", "shop_pass_at_k", "gate_estimates", "gate_deltas",
                   "coding_tools", "coding_tool_errors", "coding_agents", "coding_error_codes", "coding_error_steps",
                   "coding_step_hist", "coding_token_hist", "other_reward", "other_tools", "other_error_codes",
                   "other_error_steps", "other_step_hist", "other_pass_at_k"}
PRICE = {"scripted-strong": (0.1, 0.4)}


def _small(cfg_name: str, tmp: Path) -> Path:
    """configs/<cfg_name>.yaml with 8 tasks x 2 repeats (skill paths made absolute)."""
    raw = yaml.safe_load((REPO / "configs" / f"{cfg_name}.yaml").read_text())
    raw["tasks"]["sample_size"] = 8
    if raw["skills"].get("path"):
        raw["skills"]["path"] = str(REPO / "configs" / raw["skills"]["path"])
    path = tmp / f"{cfg_name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="module")
def wh(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("report")
    root = tmp / "wh"
    for name in ("demo", "demo_skill"):
        result = run(load_config(_small(name, tmp)), str(root))
        assert result.failed == 0
    ingest([THIRD_PARTY / "claude_code_session-share", THIRD_PARTY / "claude_code_cclogviewer",
            THIRD_PARTY / "tau_bench", THIRD_PARTY / "atif_login-trace"], root)
    return root


@pytest.fixture(scope="module")
def con(wh):
    """One connection for the tests that only read (each connect installs every view)."""
    return connect(wh)


@pytest.fixture(scope="module")
def page(wh, tmp_path_factory) -> tuple[Path, dict]:
    """The report of every run with the gate, written by the CLI in a real subprocess."""
    out = tmp_path_factory.mktemp("page") / "report.html"
    proc = subprocess.run([*CLI, "report", "-w", str(wh), "--gate", "demo:demo-skill", "--bootstrap", "200",
                           "--price", "scripted-strong=0.1,0.4", "-o", str(out), "--format", "json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return out, json.loads(proc.stdout)


def _specs(text: str) -> dict[str, dict]:
    found = re.findall(r'<script type="application/json" data-chart="chart-([a-z_]+)">(.*?)</script>', text, re.S)
    return {key: json.loads(body) for key, body in found}


def test_cli_summary_lists_every_section_and_chart(page, con):
    out, summary = page
    assert summary["out"] == str(out) and summary["bytes"] == out.stat().st_size
    assert summary["runs"] == [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY created_at, run_id").fetchall()]
    assert set(summary["charts"]) == EXPECTED_CHARTS
    assert summary["sections"] == ["shop", "coding", "other", "gate"] and summary["group_by"] == "run"
    assert summary["domains"] == {"shop": ["demo", "demo-skill"],
                                  "coding": [r for r in summary["runs"] if r.startswith("claude-code.")],
                                  "other": [r for r in summary["runs"] if r.startswith(("atif.", "openai-messages."))]}
    assert len(summary["domains"]["coding"]) == 2 and len(summary["domains"]["other"]) == 2
    from shopsim_wh.analytics.gate import GateOptions, gate

    direct = gate(con, "demo", "demo-skill", GateOptions(bootstrap=200))
    assert summary["gate"]["decision"] == direct.decision and summary["gate"]["n_pairs"] == direct.n_pairs == 16
    assert summary["gate"]["coefficients"] == [pytest.approx(c.to_dict()) for c in direct.coefficients]


def test_page_is_self_contained(page):
    text = page[0].read_text()
    assert "Content-Security-Policy" in text and "connect-src 'none'" in text
    markup = re.sub(r"(<script[^>]*>).*?</script>", r"\1</script>", text, flags=re.S)  # the tags, not the code
    assert markup.count("<script") == len(_specs(text)) + 2  # the vendored runtime, the specs, the renderer
    assert not re.search(r"<(script|img|link|iframe|object|embed)[^>]+(src|href|data)=", markup, re.I)
    assert "sourceMappingURL" not in text
    for name in ("vega.min.js", "vega-lite.min.js", "vega-embed.min.js"):
        assert f"/* {name}: see shopsim_wh/report/vendor/SOURCES.md" in text


def test_every_chart_has_titles_units_and_a_table(page):
    text = page[0].read_text()
    specs = _specs(text)
    assert set(specs) == EXPECTED_CHARTS
    for key, spec in specs.items():
        assert spec["title"], key
        encodings = [spec.get("encoding", {})] + [layer.get("encoding", {}) for layer in
                                                  spec.get("layer", spec.get("spec", {}).get("layer", []))]
        axes = [e[ch] for e in encodings for ch in ("x", "y") if ch in e and e[ch].get("title")]
        assert len({ch for e in encodings for ch in ("x", "y") if e.get(ch, {}).get("title")}) == 2, key
        assert all("(" in a["title"] for a in axes if a["type"] == "quantitative"), (key, axes)  # a unit
        rows = spec["data"]["values"]
        assert rows, key
        summary = f"Data: {html.escape(spec['title'])} ({len(rows)} rows)"
        assert summary in text, key


def test_figures_match_the_views(page, con):
    specs = _specs(page[0].read_text())
    metrics = {r[0]: r[1:] for r in con.execute(
        "SELECT run_id, reward_mean, reward_sem, r_success_mean, pass_at_k, r_option_mean, r_loose_mean "
        "FROM run_metrics").fetchall()}
    reward = {(r["grp"], r["metric"]): r for r in specs["shop_reward"]["data"]["values"]}
    for run_id in ("demo", "demo-skill"):
        mean, sem, success, pass_k, r_option, r_loose = metrics[run_id]
        assert reward[run_id, "reward"]["mean"] == pytest.approx(mean)
        assert reward[run_id, "reward"]["sem"] == pytest.approx(sem)
        assert reward[run_id, "reward"]["lo"] == pytest.approx(mean - sem)
        assert reward[run_id, "success"]["mean"] == pytest.approx(success)
        curve = {r["k"]: r for r in specs["shop_pass_at_k"]["data"]["values"] if r["grp"] == run_id}
        assert sorted(curve) == [1, 2] and curve[2]["pass_at_k"] == pytest.approx(pass_k)
        comp = {r["component"]: r["mean"] for r in specs["shop_components"]["data"]["values"] if r["grp"] == run_id}
        assert comp["r_option"] == pytest.approx(r_option) and comp["r_loose"] == pytest.approx(r_loose)
    assert {r["grp"] for r in specs["shop_reward"]["data"]["values"]} == {"demo", "demo-skill"}
    tau = next(r for r in metrics if r.startswith("openai-messages."))
    assert {r["grp"] for r in specs["other_reward"]["data"]["values"]} == {tau}  # ATIF has no reward: no bar
    assert {(r["grp"], r["metric"]): r["mean"] for r in specs["other_reward"]["data"]["values"]}[tau, "reward"] == \
        pytest.approx(metrics[tau][0])
    usd = con.execute("SELECT avg((tokens_in * 0.1 + tokens_out * 0.4) / 1e6) FROM episodes WHERE run_id = 'demo' "
                      "AND status = 'completed'").fetchone()[0]
    cost = {r["grp"]: r for r in specs["shop_cost"]["data"]["values"]}
    assert set(cost) == {"demo", "demo-skill"} and cost["demo"]["usd_mean"] == pytest.approx(usd)
    steps = sum(r["episodes"] for r in specs["shop_step_hist"]["data"]["values"] if r["grp"] == "demo")
    assert steps == 16
    pairs = con.execute("SELECT count(*), sum(delta) FROM paired_deltas('demo', 'demo-skill')").fetchone()
    per_task = specs["gate_deltas"]["data"]["values"]
    assert sum(r["pairs"] for r in per_task) == pairs[0]
    assert sum(r["delta"] * r["pairs"] for r in per_task) == pytest.approx(pairs[1])
    tools = {(r["grp"], r["tool_name"]): r["calls"] for r in specs["coding_tools"]["data"]["values"]}
    direct = dict(((r, t), n) for r, t, n in con.execute(
        "SELECT a.run_id, a.tool_name, count(*) FROM actions AS a JOIN runs USING (run_id) "
        "WHERE runs.source_format = 'claude-code' AND a.tool_name IS NOT NULL GROUP BY ALL").fetchall())
    assert tools == direct and len(direct) >= 5
    assert {r["agent_role"] for r in specs["coding_agents"]["data"]["values"]} >= {"general-purpose"}
    # no domain's chart holds another domain's runs
    for domain, ids in (("shop", {"demo", "demo-skill"}), ("coding", {r for r, _ in direct}), ("other", set(metrics))):
        series = {r["grp"] for k, sp in specs.items() if k.startswith(domain + "_") for r in sp["data"]["values"]
                  if "grp" in r}
        assert series and series <= ids, (domain, series)


def test_group_by_checkpoint_pools_every_chart(wh):
    """--group-by checkpoint: the demo runs share checkpoint scripted-strong@v1, so each shop chart has one series,
    its figures those of the two runs' episodes together; runs without a checkpoint stay on their own."""
    con = connect(wh)  # its own: prices stay on the connection they were set on
    rep = build(con, ReportOptions(group_by="checkpoint", prices=PRICE))
    specs = {c.key: c for c in rep.charts}
    (ckpt,) = {r["grp"] for c in specs.values() if c.key.startswith("shop_") for r in c.rows if "grp" in r}
    n, reward, loose = con.execute("SELECT count(*), avg(reward), avg(r_loose) FROM episodes "
                                   "WHERE run_id IN ('demo', 'demo-skill') AND status = 'completed'").fetchone()
    assert ckpt == con.execute("SELECT checkpoint_id FROM runs WHERE run_id = 'demo'").fetchone()[0]
    row = next(r for r in specs["shop_reward"].rows if r["metric"] == "reward")
    assert (row["runs"], row["n"], row["mean"]) == (2, n, pytest.approx(reward))
    assert {r["component"]: r["mean"] for r in specs["shop_components"].rows}["r_loose"] == pytest.approx(loose)
    assert sum(r["episodes"] for r in specs["shop_step_hist"].rows) == n
    assert sum(r["episodes"] for r in specs["shop_termination"].rows) == n
    assert [(r["k"], r["tasks"]) for r in specs["shop_pass_at_k"].rows] == [(k, 8) for k in (1, 2, 3, 4)]  # pooled
    assert len({r["grp"] for r in specs["coding_tools"].rows}) == 2
    assert rep.summary()["group_by"] == "checkpoint"
    assert specs["shop_cost"].rows[0]["episodes"] == n
    with pytest.raises(ReportError, match="--group-by takes run or checkpoint"):
        build(con, ReportOptions(group_by="model"))
    con.close()


def test_selection_by_experiment_and_errors(wh, con, tmp_path):
    rep = build(con, ReportOptions(experiment="demo-skill"))
    assert rep.run_ids == ["demo-skill"]
    assert [s.key for s in rep.sections] == ["shop"]
    assert [p.key for p in rep.sections[0].parts] == ["shop-runs", "shop-outcomes", "shop-failures", "shop-effort",
                                                      "shop-pass_at_k"]
    with pytest.raises(ReportError, match="known experiments: atif, claude-code, demo, demo-skill, openai-messages"):
        build(con, ReportOptions(experiment="dmeo"))
    with pytest.raises(ReportError, match="unknown run id.*nope.*known: demo"):
        build(con, ReportOptions(runs=["demo", "nope"]))
    # cost is left out, with the reason, for models without a price
    effort = next(p for p in rep.sections[0].parts if p.key == "shop-effort")
    assert "shop_cost" not in [c.key for c in effort.charts] and "No price for model(s) scripted-strong" in effort.notes[0]
    from typer.testing import CliRunner

    from shopsim_wh.cli.main import app

    res = CliRunner().invoke(app, ["report", "-w", str(wh), "--gate", "demo", "-o", str(tmp_path / "x.html")])
    assert res.exit_code == 2 and "BARE_RUN:TREATMENT_RUN" in res.output and not (tmp_path / "x.html").exists()


def test_gate_section_lists_recorded_decisions_when_the_table_exists(page, wh, tmp_path):
    """Also: what a report adds to its connection (selection, prices, this test's gate_results) is TEMP, so a
    catalog database file it runs on is left as it was."""
    catalog = tmp_path / "catalog.duckdb"
    con = connect(wh, database=str(catalog))
    objects = "SELECT table_name, table_type FROM information_schema.tables ORDER BY ALL"
    before = con.execute(objects).fetchall()
    if "gate_results" not in [n for n, _ in db.view_names(con)]:  # before the table exists: a note
        assert "no `gate_results` table yet" in page[0].read_text()
    # gate_results as the catalog branch declares it (SCHEMA_VERSION 4), shadowed on this connection only
    con.execute("""CREATE OR REPLACE TEMP VIEW gate_results AS SELECT * FROM (VALUES
        ('demo-skill', 'g1', TIMESTAMPTZ '2026-12-01 10:00:00+00', 'significance', 'pass', 'demo', 'demo-skill',
         'scripted-strong@v1', 'scripted-strong@v1', 20, 1.0, '["options-before-buy"]', '["options-before-buy"]', '0.1.0'),
        ('demo-skill', 'g0', TIMESTAMPTZ '2026-11-30 10:00:00+00', 'significance', 'fail', 'demo', 'demo-skill',
         'scripted-strong@v1', 'scripted-strong@v1', 20, 1.0, '[]', '[]', '0.1.0'),
        ('other', 'g2', TIMESTAMPTZ '2026-12-01 11:00:00+00', 'significance', 'fail', 'demo', 'other',
         NULL, NULL, 3, 0.1, '[]', '[]', '0.1.0'))
        AS t (run_id, gate_id, decided_at, rule, decision, bare_run, treatment_run, bare_checkpoint_id,
              treatment_checkpoint_id, n_pairs, coverage, covariate_names, selected, tool_version)""")
    out = tmp_path / "r.html"
    summary = write_report(con, out, ReportOptions(runs=["demo", "demo-skill"], gate=("demo", "demo-skill"),
                                                   bootstrap=50, prices={"scripted-strong": (1.0, 2.0)}))
    text = out.read_text()
    assert "Recorded gate decisions for this pair (2)" in text
    assert text.index(">g1<") < text.index(">g0<") and ">g2<" not in text
    assert "shop_cost" in summary["charts"]
    con.close()
    import duckdb

    after = duckdb.connect(str(catalog), read_only=True)
    assert after.execute("SELECT count(*) FROM model_prices WHERE model_name = 'scripted-strong'").fetchone() == (0,)
    assert after.execute(objects).fetchall() == before


def _bar_rows(spec: dict) -> int | None:
    """The bar rows of a chart with bars along y, counted from its data (distinct y values, times the distinct
    yOffset values of side-by-side bars); None for other charts."""
    inner = spec.get("spec", spec)
    encodings = [inner.get("encoding", {})] + [layer.get("encoding", {}) for layer in inner.get("layer", [])]
    enc = next((e for e in encodings if e.get("y", {}).get("type") == "nominal"), None)
    if enc is None:
        return None
    rows = spec["data"]["values"]
    offset = enc.get("yOffset", {}).get("field")
    return len({r[enc["y"]["field"]] for r in rows}) * (len({r[offset] for r in rows}) if offset else 1)


def test_report_renders_in_headless_chromium(page, tmp_path):
    binary = chromium_binary()
    if binary is None:
        reason = "chromium is not installed (Debian: apt-get install chromium; .ci/run installs it)"
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    out, summary = page
    (tmp_path / "profile").mkdir()
    browser = Browser(binary, tmp_path / "profile", width=1400)
    try:
        browser.open(out.as_uri())
        browser.wait_for("document.body && document.body.getAttribute('data-charts') === 'done'")
        drawn = browser.evaluate("""Array.from(document.querySelectorAll('.chart')).map(function (el) {
            var svg = el.querySelector('svg');
            // the plot's height: the background of the (first facet) cell, else of the root group
            var frame = svg && (svg.querySelector('g.mark-group.cell') || svg.querySelector('g.mark-group.root'));
            var bg = frame && frame.querySelector(':scope > g > path.background');
            var h = bg && /v(-?[0-9.]+)/.exec(bg.getAttribute('d'));
            return {id: el.id, drawn: el.getAttribute('data-drawn'),
                    marks: svg ? svg.querySelectorAll('g.role-mark > *').length : 0,
                    width: svg ? svg.getBoundingClientRect().width : 0,
                    height: svg ? svg.getBoundingClientRect().height : 0, plot: h ? Number(h[1]) : null,
                    title: svg ? (svg.querySelector('g.role-title text') || {}).textContent : null};
        })""")
        layout = browser.evaluate("""({page: document.documentElement.scrollWidth, view: window.innerWidth,
            tables: Array.from(document.querySelectorAll('table.runs')).map(function (t) {
                var box = t.parentElement;
                return {section: t.closest('section').id, scroll: box.scrollWidth, client: box.clientWidth,
                        right: t.getBoundingClientRect().right, rows: t.tBodies[0].rows.length,
                        titled: t.querySelectorAll('td[title]').length};
            })})""")
        browser.screenshot(tmp_path / "report.png")
        problems, urls = browser.problems(), browser.requested_urls()
        # the same checks see a broken chart and a request for a remote image (which the page's CSP blocks):
        # the report's head (runtime, CSP) and renderer around one bad spec
        text = out.read_text()
        broken = tmp_path / "broken.html"
        broken.write_text(text[:text.index("<body><header>")] + '<body><div class="chart" id="chart-termination"></div>'
                          '<script type="application/json" data-chart="chart-termination">{"mark": "nonsense", '
                          '"data": {"values": []}}</script><img src="http://127.0.0.1:9/x.png" alt="">'
                          + text[text.rindex("<script>"):])
        browser.events.clear()
        browser.call("Page.navigate", url=broken.as_uri())
        browser.wait_for("location.href.endsWith('broken.html') && document.body && "
                         "document.body.getAttribute('data-charts') === 'done'")
        broken_drawn = browser.evaluate("document.getElementById('chart-termination').getAttribute('data-drawn')")
        broken_problems = browser.problems()
    finally:
        browser.close()
    assert {d["id"] for d in drawn} == {f"chart-{k}" for k in summary["charts"]}
    for d in drawn:
        assert d["drawn"] == "ok" and d["marks"] > 0 and d["width"] > 100 and d["title"], d
    # at 1,400 px: no horizontal scrolling, every domain's run table fits its section, long ids titled
    assert layout["view"] == 1400 and layout["page"] <= 1400, layout
    assert [t["section"] for t in layout["tables"]] == ["shop", "coding", "other"]
    for t in layout["tables"]:
        assert t["scroll"] <= t["client"] and t["right"] <= 1400 and t["rows"] >= 2 and t["titled"] > 0, t
    # chart heights follow their bar rows (BAND px each within MIN_H .. MAX_H), never 1,000 px for a few bars
    from shopsim_wh.report.charts import BAND, MAX_H, MIN_H, PLOT_H

    specs = _specs(out.read_text())
    sized = {}
    for d in drawn:
        bars = _bar_rows(specs[d["id"].removeprefix("chart-")])
        want = PLOT_H if bars is None else max(MIN_H, min(MAX_H, bars * BAND))
        assert d["plot"] == want and d["height"] < MAX_H + 300, (d, bars)
        if bars is not None:
            sized[d["id"]] = (bars, d["plot"])
    assert len({bars for bars, plot in sized.values() if MIN_H < plot < MAX_H}) >= 3, sized  # proportional, seen
    assert problems == []
    assert urls and all(u.startswith("file://") for u in urls), urls
    assert (tmp_path / "report.png").stat().st_size > 10_000  # the page painted (docs/report.md: the docs' shot)
    assert broken_drawn == "error"
    assert any("chart chart-termination" in p for p in broken_problems), broken_problems
    assert any("127.0.0.1:9" in p for p in broken_problems), broken_problems


def test_every_report_query_states_its_grain():
    from importlib import resources

    files = sorted((resources.files("shopsim_wh.report") / "sql").iterdir(), key=lambda f: f.name)
    assert len(files) >= 15
    for f in files:
        head = "\n".join(f.read_text().splitlines()[:6]).lower()
        assert head.startswith("--") and "grain" in head, f"{f.name} must open with a comment stating its grain"


def test_exports_section_lists_the_manifests_of_these_runs(wh, con, tmp_path):
    """--exports: an export of these runs appears with its manifest's figures; one of other runs does not."""
    from shopsim_wh.core.errors import ShopsimError
    from shopsim_wh.export import export

    mine = export("sft-trajectory", con, tmp_path / "exports" / "demo", runs=["demo"])
    others = [r for (r,) in con.execute("SELECT run_id FROM runs WHERE run_id NOT LIKE 'demo%'").fetchall()]
    export("sft-trajectory", con, tmp_path / "exports" / "cc", runs=others)
    rep = build(con, ReportOptions(runs=["demo", "demo-skill"], exports=[str(tmp_path / "exports")]))
    sec = next(s for s in rep.sections if s.key == "exports")
    rows = sec.tables[0].rows
    manifest = json.loads(Path(mine.manifest).read_text())
    assert [(r["kind"], r["runs"], r["rows"], r["shards"]) for r in rows] == \
        [("sft-trajectory", "demo", manifest["rows"], len(manifest["shards"]))]
    assert rows[0]["snapshot"] == manifest["warehouse"]["snapshot"] and rows[0]["included"] == "nothing private"
    assert rows[0]["clean for training"] is False  # the demo runs the val split
    out = tmp_path / "r.html"
    write_report(con, out, ReportOptions(runs=["demo"], exports=[str(tmp_path / "exports")]))
    assert "Training-data exports" in out.read_text() and str(tmp_path / "exports" / "demo") in out.read_text()
    with pytest.raises(ShopsimError, match="no such file or directory"):
        build(con, ReportOptions(runs=["demo"], exports=[str(tmp_path / "nowhere")]))
