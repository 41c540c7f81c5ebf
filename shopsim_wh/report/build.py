"""Assemble the report: pick the runs, run each section's queries, turn the rows into charts and tables.

A section whose data is empty says why in a note instead of drawing an empty chart.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import duckdb

from .. import __version__
from ..errors import ShopsimError
from . import charts, queries
from .charts import Chart
from .exports_section import export_rows, read_manifests

Progress = Callable[[int, int, str], None]  # (done, total, what is being built)
MAX_K = 16  # longest pass@k curve drawn


class ReportError(ShopsimError):
    """The report cannot be built for this selection."""


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[dict]


@dataclass
class Section:
    key: str
    title: str
    intro: str
    charts: list[Chart] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    badge: str | None = None  # e.g. the gate's decision


@dataclass
class Report:
    title: str
    warehouse: str
    run_ids: list[str]
    sections: list[Section]
    generated_at: str
    tool_version: str = __version__
    gate: dict | None = None
    seconds: float = 0.0

    @property
    def charts(self) -> list[Chart]:
        return [c for s in self.sections for c in s.charts]

    def summary(self) -> dict:
        """What the CLI prints with --format json (the HTML path and size are added by the writer)."""
        return {"runs": self.run_ids, "sections": [s.key for s in self.sections],
                "charts": [c.key for c in self.charts], "gate": self.gate, "seconds": round(self.seconds, 3)}


def select_runs(con: duckdb.DuckDBPyConnection, runs: list[str] | None, experiment: str | None) -> list[str]:
    """The run ids to report on: ``runs`` as given, every run of ``experiment``, or every run (oldest first)."""
    known = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY created_at, run_id").fetchall()]
    if not known:
        raise ReportError("this warehouse has no runs: `shopsim-wh run configs/demo.yaml` or `shopsim-wh ingest PATH` "
                          "adds some, or pass --warehouse")
    if runs and experiment:
        raise ReportError("pass either --runs or --experiment, not both")
    if runs:
        missing = [r for r in runs if r not in known]
        if missing:
            raise ReportError(f"unknown run id(s) {', '.join(missing)}; known: {', '.join(known)} "
                              "(`shopsim-wh sql \"select run_id, experiment from runs\"` lists them)")
        return list(dict.fromkeys(runs))
    if experiment:
        got = [r[0] for r in con.execute("SELECT run_id FROM runs WHERE experiment = ? ORDER BY created_at, run_id",
                                          [experiment]).fetchall()]
        if not got:
            names = [r[0] for r in con.execute("SELECT DISTINCT experiment FROM runs ORDER BY 1").fetchall()]
            raise ReportError(f"no runs of experiment {experiment!r}; known experiments: {', '.join(map(str, names))}")
        return got
    return known


def set_prices(con: duckdb.DuckDBPyConnection, prices: dict[str, tuple[float, float]]) -> None:
    """Price models for this connection (USD per million input / output tokens), on top of ``model_prices``.

    A TEMP view ``model_prices`` over a TEMP table (shipped rows plus ``prices``, which win) shadows the shipped
    view for this connection only (as sql/analytics/model_prices.sql describes): a catalog database file is
    never changed, other connections are not affected.
    """
    shipped = con.execute("SELECT model_name, usd_per_mtok_in, usd_per_mtok_out FROM model_prices").fetchall()
    merged = {m: (i, o) for m, i, o in shipped} | {m: (float(i), float(o)) for m, (i, o) in prices.items()}
    con.execute("CREATE OR REPLACE TEMP TABLE report_prices "
                "(model_name VARCHAR, usd_per_mtok_in DOUBLE, usd_per_mtok_out DOUBLE)")
    con.executemany("INSERT INTO report_prices VALUES (?, ?, ?)", [(m, i, o) for m, (i, o) in merged.items()])
    con.execute("CREATE OR REPLACE TEMP VIEW model_prices AS SELECT * FROM report_prices")


def _nice(x: float) -> int:
    """The smallest of 1, 2, 5 x 10^k at least x (histogram bin widths)."""
    if x <= 1:
        return 1
    mag = 10 ** math.floor(math.log10(x))
    return int(next(m * mag for m in (1, 2, 5, 10) if m * mag >= x))


def _runs_section(con) -> Section:
    rows = queries.rows(con, "summary")
    cols = list(rows[0]) if rows else []
    return Section("runs", "Runs", "One row per run: the headline figures of `run_metrics` (rewards over completed "
                   "episodes; cost from `model_prices`, empty where the model has no price).",
                   tables=[Table("Run summary", cols, rows)])


def _outcomes_section(con) -> Section:
    s = Section("outcomes", "Reward and success", "Means over completed episodes with error bars of one SEM "
                "(sample standard deviation / sqrt(n)). Success is strict success (`r_success` = 1).")
    rows = queries.rows(con, "reward_success")
    by_run = [r for r in rows if r["level"] == "run"]
    by_ckpt = [r for r in rows if r["level"] == "checkpoint"]
    if not by_run:
        s.notes.append("No completed episode with a reward in the selected runs.")
        return s
    s.charts.append(charts.mean_sem_bars(
        "reward_by_run", "Reward and success by run (mean ± SEM)", by_run, "run_id", "run", "checkpoint_id",
        "checkpoint", "mean over completed episodes (0-1)", facet="metric", offset=False))
    s.charts.append(charts.mean_sem_bars(
        "reward_by_checkpoint", "Reward and success by checkpoint (mean ± SEM, runs pooled)", by_ckpt,
        "checkpoint_id", "checkpoint", "metric", "metric", "mean over completed episodes (0-1)"))
    comps = queries.rows(con, "components")
    if comps:
        s.charts.append(charts.grouped_bars(
            "components", "Reward components r_* by run (mean)", comps, "component", "component", "mean",
            "mean over completed episodes that have it (0-1)", "run_id", "run", ["run_id", "component", "mean"]))
    return s


def _failures_section(con) -> Section:
    s = Section("failures", "Endings and errors", "How episodes ended (`termination_shares`), and the deterministic "
                "error labels of `error_labels` (codes: `taxonomy`, docs/taxonomy.md).")
    term = queries.rows(con, "termination")
    s.charts.append(charts.grouped_bars(
        "termination", "Termination reasons by run (share of episodes)", term, "run_id", "run", "share",
        "share of the run's episodes (0-1)", "termination", "termination", ["run_id", "termination", "episodes", "share"],
        horizontal=True, stack=True))
    codes = queries.rows(con, "error_codes")
    if not codes:
        s.notes.append("No error labels in the selected runs.")
        return s
    s.charts.append(charts.grouped_bars(
        "error_codes", "Error codes by run (episodes with the code)", codes, "code", "error code", "episodes",
        "episodes (count)", "run_id", "run", ["run_id", "code", "category", "scope", "episodes", "labels"],
        horizontal=True))
    steps = queries.rows(con, "error_steps")
    if steps:
        s.charts.append(charts.heatmap(
            "error_steps", "Where errors happen: error code by step", steps, "step_idx", "step (0-based model turn)",
            "code", "error code", "labels", "labels (count)", ["code", "step_idx", "labels"]))
    return s


def _effort_section(con) -> Section:
    s = Section("effort", "Steps, tokens and cost", "Distributions over completed episodes of rollout runs; cost per "
                "episode = (tokens_in x USD/Mtok in + tokens_out x USD/Mtok out) / 1e6 from `model_prices`.")
    top = queries.scalar_row(con, "token_max")
    if top.get("max_steps") is not None:
        s.charts.append(charts.histogram(
            "step_hist", "Model steps per episode", queries.rows(con, "step_hist"), "model_steps", None,
            "model steps per episode (steps)", "episodes (count)", ["run_id", "model_steps", "episodes"]))
    if top.get("max_tokens"):
        width = _nice(top["max_tokens"] / 20)
        s.charts.append(charts.histogram(
            "token_hist", f"Tokens per episode (in + out, bins of {width:,})",
            queries.rows(con, "token_hist", {"width": width}), "bin_start", "bin_end",
            "tokens per episode (tokens)", "episodes (count)", ["run_id", "bin_start", "bin_end", "episodes"]))
    if not s.charts:
        s.notes.append("No completed rollout episode in the selected runs.")
    cost = queries.rows(con, "cost")
    priced = [dict(r, mean=r["usd_mean"], sem=r["usd_sem"], n=r["episodes"], metric="USD per episode")
              for r in cost if r["priced"]]
    unpriced = sorted({r["model_name"] or "(no model name)" for r in cost if not r["priced"]})
    if priced:
        ch = charts.mean_sem_bars("cost", "Cost per episode by run (USD, mean ± SEM)", priced, "run_id", "run",
                                  "model_name", "model", "cost per completed episode (USD)", offset=False)
        ch.columns = ["run_id", "model_name", "episodes", "usd_mean", "usd_sem", "usd_total"]
        s.charts.append(ch)
    if unpriced:
        s.notes.append("No price for model(s) " + ", ".join(unpriced) + ": cost is left out. Price them with "
                       "`--price MODEL=USD_IN,USD_OUT` (USD per million tokens) or replace the `model_prices` view.")
    return s


def _pass_at_k_section(con) -> Section:
    s = Section("pass_at_k", "pass@k", "Per run, the mean over tasks of the unbiased pass@k estimator "
                "1 - C(n-c,k)/C(n,k) and of tau-bench's pass^k (every one of k samples succeeds), for k up to "
                "the most samples a task has.")
    repeats = queries.scalar_row(con, "max_repeats").get("repeats")
    if not repeats:
        s.notes.append("No task with a completed sample in the selected runs.")
        return s
    rows = queries.rows(con, "pass_at_k", {"kmax": min(int(repeats), MAX_K)})
    s.charts.append(charts.lines("pass_at_k", "pass@k and pass^k by run", rows, "k", "k (samples per task)",
                                 "share of tasks (0-1)", ["pass_at_k", "pass_hat_k"],
                                 ["run_id", "k", "tasks", "pass_at_k", "pass_hat_k"]))
    if repeats == 1:
        s.notes.append("Every task has one sample: the curve is a single point (run more repeats for pass@k).")
    return s


def _coding_section(con) -> Section | None:
    n = con.execute("SELECT count(*) FROM report_runs WHERE kind = 'coding'").fetchone()[0]
    if not n:
        return None
    s = Section("coding", "Coding-agent sessions", f"{n} ingested session(s) without rewards (Claude Code, ATIF, "
                "...): tool calls, tool errors (`tool_result` observations with is_error) and sub-agents.")
    tools = queries.rows(con, "coding_tools")
    if tools:
        s.charts.append(charts.grouped_bars(
            "coding_tools", "Tool calls by tool (coding sessions)", tools, "tool_name", "tool", "calls",
            "tool calls (count)", "run_id", "session", ["run_id", "tool_name", "tool_type", "calls", "errors",
                                                         "error_rate"], horizontal=True, stack=True))
        s.charts.append(charts.grouped_bars(
            "coding_errors", "Tool error rate by tool (coding sessions)", tools, "tool_name", "tool", "error_rate",
            "calls whose result was an error (share, 0-1)", "run_id", "session",
            ["run_id", "tool_name", "calls", "errors", "error_rate"], horizontal=True))
    agents = queries.rows(con, "coding_agents")
    if agents:
        s.charts.append(charts.grouped_bars(
            "coding_agents", "Sub-agents by role (coding sessions)", agents, "run_id", "session", "agents",
            "sub-agents (count)", "agent_role", "role", ["run_id", "agent_role", "agents", "steps", "tokens",
                                                         "session_subagent_failures"], horizontal=True, stack=True))
    else:
        s.notes.append("No sub-agents in the selected coding sessions.")
    return s


def _exports_section(manifests, run_ids: list[str]) -> Section:
    rows = export_rows(manifests, run_ids)
    s = Section("exports", "Training-data exports", "The `shopsim-wh export` shards made from these runs, from their "
                "manifest.json: rows, shards, the snapshot read, what private text was let in (nothing by default) "
                "and whether no val/test task is in it (docs/export.md).")
    if rows:
        s.tables.append(Table("Exports", list(rows[0]), rows))
    else:
        s.notes.append(f"none of the {len(manifests)} manifest(s) given reads these runs")
    return s


def build(con: duckdb.DuckDBPyConnection, runs: list[str] | None = None, experiment: str | None = None,
          gate: tuple[str, str] | None = None, prices: dict[str, tuple[float, float]] | None = None,
          bootstrap: int = 1000, seed: int = 0, warehouse: str = "", progress: Progress | None = None,
          exports: list[str] | None = None) -> Report:
    """Build the report's sections over an open connection (:func:`shopsim_wh.db.connect`).

    ``gate``: (bare run, treatment run) for the paired-gate section. ``prices``: model -> (USD per Mtok in, out)
    added to ``model_prices`` on this connection. ``exports``: directories (or manifest files) of
    ``shopsim-wh export`` runs; the exports that read these runs get a section of their own.
    """
    from .gate_section import gate_section

    t0 = time.perf_counter()
    run_ids = select_runs(con, runs, experiment)
    if prices:
        set_prices(con, prices)
    queries.install_selection(con, run_ids)
    kinds = {k for (k,) in con.execute("SELECT DISTINCT kind FROM report_runs").fetchall()}
    rollout = [("reward and success", _outcomes_section), ("steps, tokens, cost", _effort_section),
               ("pass@k", _pass_at_k_section)] if "rollout" in kinds else []
    steps: list[tuple[str, Callable]] = [
        ("runs", _runs_section), *rollout[:1], ("error labels", queries.install_labels),
        ("endings and errors", _failures_section), *rollout[1:], ("coding sessions", _coding_section)]
    if gate:
        steps.insert(len(steps) - 1, ("paired gate", lambda c: gate_section(c, gate[0], gate[1], bootstrap, seed)))
    if exports:
        manifests = read_manifests(exports)  # read before the work: a wrong path fails at once
        steps.append(("exports", lambda c: _exports_section(manifests, run_ids)))
    sections, gate_info = [], None
    for i, (label, fn) in enumerate(steps):
        if progress:
            progress(i, len(steps), label)
        sec = fn(con)
        if isinstance(sec, tuple):  # the gate section also returns its summary
            sec, gate_info = sec
        if sec is not None:
            sections.append(sec)
    if progress:
        progress(len(steps), len(steps), "done")
    title = f"shopsim-wh report: {experiment}" if experiment else "shopsim-wh report"
    return Report(title, warehouse, run_ids, sections, datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                  gate=gate_info, seconds=time.perf_counter() - t0)
