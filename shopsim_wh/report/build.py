"""Assemble the report: pick the runs, run each section's queries, turn the rows into charts and tables.

A section whose data is empty says why in a note instead of drawing an empty chart.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb

from ..core.errors import ShopsimError
from . import charts, queries
from .charts import Axis, ChartData
from .document import Report, Section, Table
from .exports_section import export_rows, read_manifests

Progress = Callable[[int, int, str], None]  # (done, total, what is being built)
MAX_K = 16  # longest pass@k curve drawn


class ReportError(ShopsimError):
    """The report cannot be built for this selection."""


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


@dataclass(frozen=True)
class Domain:
    """A kind of run that gets a section of its own (report_runs.sql decides which run is which) and the metrics
    that apply to it: runs of different domains never share axes."""

    key: str
    title: str
    intro: str
    unit: str  # what one episode is called here
    reward: bool  # reward, success and pass@k are drawn
    components: bool  # ShopSimulator's r_* components are drawn
    endings: bool  # termination reasons are drawn (sources that record them)
    tools: bool  # tool calls, tool errors and sub-agents are drawn
    colour: str  # what colours the reward bars: checkpoint_id (shop) or source (other)
    columns: tuple[str, ...]  # the run table's columns (_run_row)


CODING_SOURCES = ("claude-code", "agent-multi-turn")  # ingest readers of coding-agent sessions
GROUP_BY = ("run", "checkpoint")
DOMAINS = (
    Domain("shop", "Shop runs (ShopSimulator)",
           "Runs of the shopping task: the runner's and ingested ShopSimRL runs (source shopsim-wh-runner or "
           "shopsimrl-v4, or observation_version shopping-observation-*). reward = runs.primary_reward (r_strict "
           "for shop_env).", "episode", reward=True, components=True, endings=True, tools=False, colour="checkpoint_id",
           columns=("run", "source", "model", "checkpoint", "split", "reward is", "completed / planned",
                    "reward ± SEM", "success", "model steps", "tokens in / out", "USD / episode")),
    Domain("coding", "Coding-agent sessions",
           "Ingested coding-agent sessions (Claude Code, agent_multi_turn): no reward, so none is drawn; tool "
           "calls, tool errors (tool_result observations with is_error), sub-agents and effort per session.",
           "session", reward=False, components=False, endings=False, tools=True, colour="source",
           columns=("session", "source", "model", "sessions", "sub-agents", "model steps",
                    "tokens in / out", "USD / session")),
    Domain("other", "Other agent traces",
           "Every other ingested source (tau-bench's OpenAI messages, ATIF, ...): reward is each source's own task "
           "reward, so it is drawn apart from the shop's.", "episode", reward=True, components=False,
           endings=False, tools=True, colour="source",
           columns=("run", "source", "model", "reward is", "completed / planned", "reward ± SEM",
                    "success", "model steps", "tokens in / out", "USD / episode")),
)


def _num(v, fmt: str = ".3f") -> str | None:
    return None if v is None else format(v, fmt)


def _run_row(r: dict) -> dict:
    """A summary.sql row in the run table's words: pairs that belong together share a cell (completed / planned
    is the coverage)."""
    reward = None if r["reward_mean"] is None else _num(r["reward_mean"]) + (
        "" if r["reward_sem"] is None else f" ± {r['reward_sem']:.3f}")
    tokens = None if r["tokens_in_mean"] is None else f"{r['tokens_in_mean']:,.0f} / {r['tokens_out_mean'] or 0:,.0f}"
    cost = None if r["cost_per_episode"] is None else f"{r['cost_per_episode']:.4g}"
    return {"run": r["run_id"], "session": r["run_id"], "source": r["source"], "model": r["model_name"],
            "checkpoint": r["checkpoint_id"], "split": r["split"], "reward is": r["reward_meaning"],
            "completed / planned": f"{r['completed']:,} / {r['planned'] or r['episodes']:,}",
            "reward ± SEM": reward, "success": r["r_success_mean"], "model steps": r["mean_model_steps"],
            "tokens in / out": tokens, "USD / episode": cost, "USD / session": cost, "sessions": r["episodes"],
            "sub-agents": r["sub_agents"]}


def _runs_part(con, d: Domain, group_by: str) -> Section:
    rows = queries.rows(con, "summary", {"domain": d.key})
    s = Section(f"{d.key}-runs", "Runs", f"One row per run, never pooled: the headline figures of `run_metrics` "
                f"(means over completed {d.unit}s; cost from `model_prices`, empty where the model has no price). "
                "Long ids are shortened; hover a cell for the full value.",
                tables=[Table("", list(d.columns), [_run_row(r) for r in rows], abbreviate=True)])
    meanings = sorted({(r["source"], r["reward_meaning"]) for r in rows if r["reward_meaning"]})
    task_sources = {src for src, m in meanings if m == "task_reward"}  # each source's own tasks
    if d.reward and (len({m for _, m in meanings}) > 1 or len(task_sources) > 1):
        s.notes.append("Rewards here mean different things per source: " + "; ".join(
            f"{src}: {m}" for src, m in meanings) + ". Compare bars of one source and meaning only.")
    if group_by == "checkpoint":
        pooled = con.execute("SELECT grp, grp_runs FROM report_runs WHERE domain = $domain AND grp_runs > 1 "
                             "GROUP BY ALL ORDER BY min(pos)", {"domain": d.key}).fetchall()
        s.notes.append("--group-by checkpoint: each chart series is a checkpoint, its runs pooled ("
                       + (", ".join(f"{g}: {n} runs" for g, n in pooled) or "no checkpoint has two runs here")
                       + "); a run without a checkpoint_id stays on its own.")
    return s


def _series(group_by: str) -> str:
    return "checkpoint" if group_by == "checkpoint" else "run"


def _outcomes_part(con, d: Domain, group_by: str) -> Section:
    series = _series(group_by)
    pooled = " (runs of a checkpoint pooled)" if group_by == "checkpoint" else ""
    s = Section(f"{d.key}-outcomes", "Reward and success", f"Per {series}{pooled}: means over completed "
                f"{d.unit}s with error bars of one SEM (sample standard deviation / sqrt(n)). Success is strict "
                "success (`r_success` = 1, derived as reward >= 1 where the source reports no components).")
    rows = queries.rows(con, "reward_success", {"domain": d.key})
    if not rows:
        s.notes.append(f"No completed {d.unit} with a reward in these runs.")
        return s
    s.charts.append(charts.mean_sem_bars(
        ChartData(f"{d.key}_reward", f"Reward and success by {series} (mean ± SEM)", rows,
                  ["grp", "checkpoint_id", "source", "runs", "metric", "n", "mean", "sem", "lo", "hi"]),
        Axis("grp", series), Axis(d.colour, d.colour.removesuffix("_id")),
        "mean over completed episodes (0-1)", facet="metric"))
    comps = queries.rows(con, "components", {"domain": d.key}) if d.components else []
    if comps:
        s.charts.append(charts.grouped_bars(
            ChartData(f"{d.key}_components", f"Reward components r_* by {series} (mean)", comps,
                      ["grp", "component", "mean"]),
            Axis("component", "component"), Axis("mean", "mean over completed episodes that have it (0-1)"),
            Axis("grp", series)))
    return s


def _failures_part(con, d: Domain, group_by: str) -> Section:
    series = _series(group_by)
    s = Section(f"{d.key}-failures", "Endings and errors", "How episodes ended (`termination_shares`), and the "
                "deterministic error labels of `error_labels` (codes: `taxonomy`, docs/taxonomy.md)."
                if d.endings else "The deterministic error labels of `error_labels` (codes: `taxonomy`, "
                "docs/taxonomy.md).")
    p = {"domain": d.key}
    if d.endings:
        s.charts.append(charts.grouped_bars(
            ChartData(f"{d.key}_termination", f"Termination reasons by {series} (share of {d.unit}s)",
                      queries.rows(con, "termination", p), ["grp", "termination", "episodes", "share"]),
            Axis("grp", series), Axis("share", f"share of the {series}'s {d.unit}s (0-1)"),
            Axis("termination", "termination"), stack=True))
    codes = queries.rows(con, "error_codes", p)
    if not codes:
        s.notes.append("No error labels in these runs.")
        return s
    s.charts.append(charts.grouped_bars(
        ChartData(f"{d.key}_error_codes", f"Error codes by {series} ({d.unit}s with the code)", codes,
                  ["grp", "code", "category", "scope", "episodes", "labels"]),
        Axis("code", "error code"), Axis("episodes", f"{d.unit}s (count)"), Axis("grp", series)))
    steps = queries.rows(con, "error_steps", p)
    if steps:
        s.charts.append(charts.heatmap(
            ChartData(f"{d.key}_error_steps", "Where errors happen: error code by step", steps,
                      ["code", "step_idx", "labels"]),
            Axis("step_idx", "step (0-based model turn)"), Axis("code", "error code"),
            Axis("labels", "labels (count)")))
    return s


def _effort_part(con, d: Domain, group_by: str) -> Section:
    series, u = _series(group_by), d.unit
    s = Section(f"{d.key}-effort", "Steps, tokens and cost", f"Distributions over completed {u}s; cost per {u} = "
                "(tokens_in x USD/Mtok in + tokens_out x USD/Mtok out) / 1e6 from `model_prices`.")
    p = {"domain": d.key}
    top = queries.scalar_row(con, "token_max", p)
    if top.get("max_steps") is not None:
        s.charts.append(charts.histogram(
            ChartData(f"{d.key}_step_hist", f"Model steps per {u}", queries.rows(con, "step_hist", p),
                      ["grp", "model_steps", "episodes"]),
            Axis("model_steps", f"model steps per {u} (steps)"), None, f"{u}s (count)", series))
    if top.get("max_tokens"):
        width = _nice(top["max_tokens"] / 20)
        s.charts.append(charts.histogram(
            ChartData(f"{d.key}_token_hist", f"Tokens per {u} (in + out, bins of {width:,})",
                      queries.rows(con, "token_hist", p | {"width": width}),
                      ["grp", "bin_start", "bin_end", "episodes"]),
            Axis("bin_start", f"tokens per {u} (tokens)"), "bin_end", f"{u}s (count)", series))
    if not s.charts:
        s.notes.append(f"No completed {u} with steps or tokens in these runs.")
    cost = queries.rows(con, "cost", p)
    priced = [dict(r, mean=r["usd_mean"], sem=r["usd_sem"], n=r["episodes"]) for r in cost if r["priced"]]
    unpriced = sorted({m for r in cost if not r["priced"] for m in r["model_name"].split(", ")})
    if priced:
        s.charts.append(charts.mean_sem_bars(
            ChartData(f"{d.key}_cost", f"Cost per {u} by {series} (USD, mean ± SEM)", priced,
                      ["grp", "model_name", "episodes", "usd_mean", "usd_sem", "usd_total"]),
            Axis("grp", series), Axis("model_name", "model"), f"cost per completed {u} (USD)"))
    if unpriced:
        s.notes.append("No price for model(s) " + ", ".join(unpriced) + ": cost is left out. Price them with "
                       "`--price MODEL=USD_IN,USD_OUT` (USD per million tokens) or replace the `model_prices` view.")
    return s


def _pass_at_k_part(con, d: Domain, group_by: str) -> Section:
    series = _series(group_by)
    s = Section(f"{d.key}-pass_at_k", "pass@k", f"Per {series}, the mean over tasks of the unbiased pass@k "
                "estimator 1 - C(n-c,k)/C(n,k) and of tau-bench's pass^k (every one of k samples succeeds), for k "
                "up to the most samples a task has.")
    repeats = queries.scalar_row(con, "max_repeats", {"domain": d.key}).get("repeats")
    if not repeats:
        s.notes.append("No task with a completed sample in these runs.")
        return s
    rows = queries.rows(con, "pass_at_k", {"domain": d.key, "kmax": min(int(repeats), MAX_K)})
    s.charts.append(charts.lines(
        ChartData(f"{d.key}_pass_at_k", f"pass@k and pass^k by {series}", rows,
                  ["grp", "k", "tasks", "pass_at_k", "pass_hat_k"]),
        Axis("k", "k (samples per task)"), "share of tasks (0-1)", ["pass_at_k", "pass_hat_k"], series))
    if repeats == 1:
        s.notes.append("Every task has one sample: the curve is a single point (run more repeats for pass@k).")
    return s


def _tools_part(con, d: Domain, group_by: str) -> Section:
    series = _series(group_by)
    s = Section(f"{d.key}-tools", "Tools and sub-agents", "Tool calls per tool, the share whose tool_result was an "
                "error (is_error), and the sub-agents the episodes spawned (`ir_agents`, depth > 0) by role.")
    p = {"domain": d.key}
    tools = queries.rows(con, "coding_tools", p)
    if tools:
        s.charts.append(charts.grouped_bars(
            ChartData(f"{d.key}_tools", f"Tool calls by tool and {series}", tools,
                      ["grp", "tool_name", "tool_type", "calls", "errors", "error_rate"]),
            Axis("tool_name", "tool"), Axis("calls", "tool calls (count)"), Axis("grp", series), stack=True))
    if tools and not any(r["errors"] for r in tools):
        s.notes.append("No tool call's result reported an error (is_error) in these runs.")
    elif tools:
        s.charts.append(charts.grouped_bars(
            ChartData(f"{d.key}_tool_errors", f"Tool error rate by tool and {series}", tools,
                      ["grp", "tool_name", "calls", "errors", "error_rate"]),
            Axis("tool_name", "tool"), Axis("error_rate", "calls whose result was an error (share, 0-1)"),
            Axis("grp", series)))
    else:
        s.notes.append("No tool calls in these runs.")
    agents = queries.rows(con, "coding_agents", p)
    if agents:
        s.charts.append(charts.grouped_bars(
            ChartData(f"{d.key}_agents", f"Sub-agents by {series} and role", agents,
                      ["grp", "agent_role", "agents", "steps", "tokens", "series_subagent_failures"]),
            Axis("grp", series), Axis("agents", "sub-agents (count)"), Axis("agent_role", "role"),
            stack=True))
    else:
        s.notes.append("No sub-agents in these runs.")
    return s


def _domain_plan(con, d: Domain, group_by: str) -> tuple[Section, list[tuple[str, Callable]]]:
    """The domain's section (its parts still empty) and the steps that fill it, in order."""
    n = con.execute("SELECT count(*) FROM report_runs WHERE domain = ?", [d.key]).fetchone()[0]
    s = Section(d.key, d.title, f"{n} run(s). {d.intro}")
    builders = [_runs_part, *([_outcomes_part] if d.reward else []), *([_tools_part] if d.tools else []),
                _failures_part, _effort_part, *([_pass_at_k_part] if d.reward else [])]
    steps = []
    for fn in builders:
        label = f"{d.key}: " + fn.__name__.strip("_").removesuffix("_part").replace("_", " ")
        steps.append((label, lambda c, fn=fn: s.parts.append(fn(c, d, group_by))))
    return s, steps


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


@dataclass(frozen=True)
class ReportOptions:
    """What the report covers and how: the runs, the series, the paired gate, extra prices, the exports.

    ``runs`` / ``experiment``: the runs to cover (default: every run). ``group_by``: ``run`` (every run its
    own series) or ``checkpoint`` (a checkpoint's runs pooled). ``gate``: (bare run, treatment run) for the
    paired-gate section, fitted with ``bootstrap`` resamples and ``seed``. ``prices``: model -> (USD per Mtok
    in, out) added to ``model_prices`` on this connection. ``exports``: directories (or manifest files) of
    ``shopsim-wh export`` runs; the exports that read these runs get a section of their own.
    """

    runs: list[str] | None = None
    experiment: str | None = None
    gate: tuple[str, str] | None = None
    prices: dict[str, tuple[float, float]] | None = None
    bootstrap: int = 1000
    seed: int = 0
    exports: list[str] | None = None
    group_by: str = "run"


def build(con: duckdb.DuckDBPyConnection, options: ReportOptions | None = None, warehouse: str = "",
          progress: Progress | None = None) -> Report:
    """Build the report's sections over an open connection (:func:`shopsim_wh.engines.db.connect`): one per domain
    present (:data:`DOMAINS`), then the gate and the exports.

    ``options``: what to cover (:class:`ReportOptions`; default: every run, one series per run).
    ``warehouse``: the location named in the page's header. ``progress``: called with (done, total, step) as
    the steps run.
    """
    from .gate_section import gate_section

    o = options or ReportOptions()
    if o.group_by not in GROUP_BY:
        raise ReportError(f"--group-by takes {' or '.join(GROUP_BY)}, not {o.group_by!r}")
    t0 = time.perf_counter()
    run_ids = select_runs(con, o.runs, o.experiment)
    # read before the work: a wrong path fails at once
    manifests = read_manifests(o.exports) if o.exports else None
    if o.prices:
        set_prices(con, o.prices)
    queries.install_selection(con, run_ids, CODING_SOURCES, o.group_by)
    present = dict(con.execute("SELECT domain, list(run_id ORDER BY pos) FROM report_runs GROUP BY domain").fetchall())
    sections: list[Section] = []
    steps: list[tuple[str, Callable]] = [("error labels", queries.install_labels)]
    for d in DOMAINS:
        if d.key in present:
            sec, more = _domain_plan(con, d, o.group_by)
            sections.append(sec)
            steps += more
    gate_info: dict | None = None
    if o.gate:
        def add_gate(c):
            nonlocal gate_info
            sec, gate_info = gate_section(c, o.gate[0], o.gate[1], o.bootstrap, o.seed)
            sections.append(sec)
        steps.append(("paired gate", add_gate))
    if manifests is not None:
        steps.append(("exports", lambda c: sections.append(_exports_section(manifests, run_ids))))
    for i, (label, fn) in enumerate(steps):
        if progress:
            progress(i, len(steps), label)
        fn(con)
    if progress:
        progress(len(steps), len(steps), "done")
    title = f"shopsim-wh report: {o.experiment}" if o.experiment else "shopsim-wh report"
    return Report(title, warehouse, run_ids, sections, datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                  gate=gate_info, seconds=time.perf_counter() - t0, group_by=o.group_by,
                  domains={d.key: present[d.key] for d in DOMAINS if d.key in present})
