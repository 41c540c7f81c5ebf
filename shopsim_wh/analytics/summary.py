"""Run summaries and generic query output (library side of `summarize`, `sql`, `tables`)."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import duckdb

SUMMARY_SQL = """
SELECT m.*, s.requested, s.trace_files, s.reward_components, s.policy_failures, s.policy_failure_rate,
       s.termination_reasons, s.duration_ms_mean, s.tokens, s.errors, f.failures
FROM run_metrics AS m
JOIN eval_summary AS s USING (run_id)
LEFT JOIN (  -- failures of the episodes still failed (their last attempt), by stage and exception type
    SELECT run_id, string_agg(kind || '=' || n, ', ' ORDER BY n DESC, kind) AS failures
    FROM (SELECT e.run_id, coalesce(e.error_stage, '?') || ':' || coalesce(e.error_type, 'unknown') AS kind,
                 count(*) AS n
          FROM episodes AS e WHERE NOT episode_completed(e.status, e.done) GROUP BY 1, 2)
    GROUP BY run_id
) AS f USING (run_id)
WHERE $experiment IS NULL OR m.experiment = $experiment OR m.run_id = $experiment
ORDER BY m.run_id
"""

EVAL_SUMMARY_SQL = """
SELECT * FROM eval_summary
WHERE $experiment IS NULL OR experiment = $experiment OR run_id = $experiment
ORDER BY run_id
"""

SUMMARY_SCHEMA = "shopsimrl-eval-summary-v2"
# (section, key) of every scalar figure of summary.json, in the original's order; the keyed sections
# (reward_components, behavior.termination_reasons, cost.tokens, errors) are eval_summary's MAP columns.
_LAYOUT = (
    ("counts", ("requested", "trace_files", "completed", "failed", "scored", "coverage")),
    ("primary", ("reward_mean", "reward_sem", "success_rate")),
    ("reward_components", None),
    ("behavior", ("steps_mean", "model_steps", "protocol_errors", "protocol_error_rate", "policy_failures",
                  "policy_failure_rate", "invalid_action_rate", "invalid_actions", "total_actions",
                  "termination_reasons")),
    ("cost", ("duration_ms_mean", "tokens")),
    ("errors", None),
)


def _rows(con: duckdb.DuckDBPyConnection, sql: str, experiment: str | None) -> list[dict]:
    rel = con.execute(sql, {"experiment": experiment})
    cols = [d[0] for d in rel.description]
    return [dict(zip(cols, r, strict=True)) for r in rel.fetchall()]


def check_experiment(con: duckdb.DuckDBPyConnection, experiment: str | None) -> None:
    """Raise a WarehouseError naming the known experiments when ``experiment`` is neither one nor a run id."""
    if experiment is None:
        return
    rows = con.execute("SELECT DISTINCT experiment, run_id FROM runs ORDER BY 1, 2").fetchall()
    if any(experiment in (e, r) for e, r in rows):
        return
    from ..core.errors import WarehouseError

    known = sorted({e for e, _ in rows if e is not None})
    runs = sorted({r for e, r in rows if r != e})
    if not rows:
        raise WarehouseError(f"no experiment {experiment!r}: this warehouse has no runs yet; run `shopsim-wh run "
                             "CONFIG` or `shopsim-wh ingest PATH` first")
    raise WarehouseError(f"no experiment or run named {experiment!r} in this warehouse; known experiments: "
                         f"{', '.join(known) or 'none'}" + (f" (run ids: {', '.join(runs[:20])}"
                                                            f"{' ...' if len(runs) > 20 else ''})" if runs else "")
                         + "; pass one of them to --experiment, or omit it for every run")


def summarize(con: duckdb.DuckDBPyConnection, experiment: str | None = None) -> list[dict]:
    """One dict per run: the `run_metrics` row plus eval_summary's keyed figures and the failures as text.

    An ``experiment`` that is neither an experiment nor a run id raises a WarehouseError listing the known ones."""
    check_experiment(con, experiment)
    return _rows(con, SUMMARY_SQL, experiment)


def eval_summary_json(row: dict) -> dict:
    """An `eval_summary` row in the shape of ShopSimRL's summary.json (without its `created_at`)."""
    out: dict[str, Any] = {"schema_version": SUMMARY_SCHEMA}
    for section, keys in _LAYOUT:
        if keys is None:
            out[section] = dict(sorted((row[section] or {}).items()))
            continue
        part = {k: row[k] for k in keys}
        for k in ("termination_reasons", "tokens"):
            if k in part:
                part[k] = dict(sorted((part[k] or {}).items()))
        out[section] = part
    return out


def eval_summaries(con: duckdb.DuckDBPyConnection, experiment: str | None = None) -> dict[str, dict]:
    """run_id -> the run's summary.json figures as the original computes them (see sql/analytics/eval_summary.sql)."""
    check_experiment(con, experiment)
    return {r["run_id"]: eval_summary_json(r) for r in _rows(con, EVAL_SUMMARY_SQL, experiment)}


def _reward_meaning(primary: str | None) -> str:
    return f"reward = {primary}" if primary else "reward = the source's top-level reward (meaning not recorded)"


def format_summary(rows: list[dict]) -> str:
    if not rows:
        return "no runs in this warehouse (run `shopsim-wh run CONFIG` or `shopsim-wh ingest PATH`)"
    out = []
    for r in rows:
        def f(key: str, digits: int = 3, r: dict = r) -> str:
            v = r.get(key)
            return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{float(v):.{digits}f}"

        def kv(key: str, r: dict = r) -> str:
            d = r.get(key) or {}
            return ", ".join(f"{k}={v}" for k, v in sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))) or "none"

        comps = "  ".join(f"{k} {v:.3f}" for k, v in sorted((r.get("reward_components") or {}).items()))
        passk = (f"   pass@{r['repeats']} {f('pass_at_k')}   pass^{r['repeats']} {f('pass_hat_k')}"
                 if (r.get("repeats") or 1) > 1 else "")
        out.append(
            f"run {r['run_id']}: planned {r['requested']}, completed {r['completed']}, failed {r['failed']} "
            f"(coverage {f('coverage')}), {r['trace_files']} episode(s) with a trace, {r['scored']} scored\n"
            f"  {_reward_meaning(r.get('primary_reward'))}: mean {f('reward_mean')} ± {f('reward_sem')} (SEM)   "
            f"success rate {f('success_rate')} (reported r_success)   right product {f('right_product_rate')}{passk}\n"
            f"  reward components (as reported): {comps or 'none'}\n"
            f"  incl. derived: r_strict {f('r_strict_mean')}  r_loose {f('r_loose_mean')}  r_success {f('r_success_mean')}\n"
            f"  steps per episode {f('mean_model_steps', 2)} (env actions {f('mean_steps', 2)})   model steps "
            f"{r['model_steps_total'] or 0}, protocol errors {r['protocol_errors_total'] or 0} "
            f"(rate {f('protocol_error_rate')}), policy failures {r['policy_failures']} (rate {f('policy_failure_rate')}), "
            f"invalid actions {r['invalid_actions_total'] or 0}/{r['total_actions_total'] or 0} "
            f"(rate {f('invalid_action_rate')})\n"
            f"  termination: {kv('termination_reasons')}\n"
            + (f"  failures: {r['failures']} (details: select * from failures)\n" if r.get("failures") else "")
            + f"  tokens (completed episodes): {kv('tokens')}   per episode in/out {f('tokens_in_mean', 0)}/"
            f"{f('tokens_out_mean', 0)}   wall time per episode {f('duration_ms_mean', 0)} ms "
            f"(all attempts {f('wall_time_total_s', 1)} s)"
        )
    return "\n".join(out)


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple]


def run_query(con: duckdb.DuckDBPyConnection, query: str, params: dict[str, Any] | None = None) -> QueryResult:
    """Run untrusted SQL through the sandbox: one SELECT-like statement (:func:`shopsim_wh.engines.sandbox.check_query`);
    give it a :func:`shopsim_wh.engines.sandbox.connect` connection so it reads nothing outside the warehouse."""
    from ..engines.sandbox import execute

    rel = execute(con, query, params)
    if rel.description is None:
        return QueryResult([], [])
    return QueryResult([d[0] for d in rel.description], rel.fetchall())


def _jsonable(v: Any) -> Any:
    if isinstance(v, (datetime, date)):
        return v.isoformat()
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def render(result: QueryResult, fmt: str, max_width: int = 60, width: int | None = None) -> str:
    """``table`` (columns side by side; switches to ``vertical`` when a line would be wider than ``width``),
    ``vertical`` (one ``column | value`` line per field, a header per row), ``csv`` or ``json``."""
    if fmt == "json":
        return json.dumps([{c: _jsonable(v) for c, v in zip(result.columns, r, strict=True)} for r in result.rows],
                          ensure_ascii=False)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(result.columns)
        w.writerows([[_jsonable(v) for v in r] for r in result.rows])
        return buf.getvalue().rstrip("\n")
    count = f"({len(result.rows)} row{'s' if len(result.rows) != 1 else ''})"
    if fmt == "vertical":
        return _vertical(result, count)
    cells = [[_cell(v) for v in r] for r in result.rows]
    if width is not None:  # to a terminal: every value whole, side by side while that fits
        widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(result.columns)]
        if sum(widths) + 2 * max(len(widths) - 1, 0) > width:
            return _vertical(result, count)
    cells = [[v[:max_width] for v in row] for row in cells]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(result.columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(result.columns, widths, strict=True))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join([line, sep, *body, count])


def _cell(v: Any) -> str:
    return ("NULL" if v is None else str(_jsonable(v))).replace("\n", " ")


def _vertical(result: QueryResult, count: str) -> str:
    """psql's expanded display: wide rows stay readable (every value whole, one field a line)."""
    pad = max((len(c) for c in result.columns), default=0)
    out = []
    for i, row in enumerate(result.rows, 1):
        out.append(f"-[ row {i} ]" + "-" * max(0, pad - 6))
        out += [f"{c.ljust(pad)} | {_cell(v)}" for c, v in zip(result.columns, row, strict=True)]
    return "\n".join([*out, count])


_RUN_EQ = re.compile(r"\brun_id\s*(?:=|<>|!=)\s*'((?:[^']|'')+)'", re.I)
_RUN_IN = re.compile(r"\brun_id\s+(?:NOT\s+)?IN\s*\(([^()]*)\)", re.I)
_LITERAL = re.compile(r"'((?:[^']|'')*)'")


def _call_args(text: str) -> list[str]:
    """The top-level comma-separated arguments of a call whose '(' was just consumed."""
    args, depth, cur = [], 0, []
    for ch in text:
        if ch == ")" and depth == 0:
            break
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    args.append("".join(cur).strip())
    return args


def named_runs(con: duckdb.DuckDBPyConnection, query: str) -> set[str]:
    """Run ids a query names as literals: ``run_id = '...'``, ``run_id IN (...)`` and the run arguments of the
    table macros (``paired_deltas('bare', 'treatment')``, ``ir_context('run', ...)``, ...)."""
    from ..engines.db import macro_signatures

    names = {m.group(1).replace("''", "'") for m in _RUN_EQ.finditer(query)}
    for m in _RUN_IN.finditer(query):
        names |= {v.replace("''", "'") for v in _LITERAL.findall(m.group(1))}
    for macro, _, params in macro_signatures(con):
        run_positions = [i for i, p in enumerate(params) if "run" in p.lower()]
        if not run_positions:
            continue
        for call in re.finditer(rf"\b{re.escape(macro)}\s*\(", query, re.I):
            args = _call_args(query[call.end():])
            for i in run_positions:
                lit = _LITERAL.fullmatch(args[i]) if i < len(args) else None
                if lit:
                    names.add(lit.group(1).replace("''", "'"))
    return names


def absent_runs_note(con: duckdb.DuckDBPyConnection, query: str) -> str | None:
    """A note for a query that names run ids this warehouse does not hold (None when it holds them all)."""
    named = named_runs(con, query)
    if not named:
        return None
    known = {r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()}
    absent = sorted(named - known)
    if not absent:
        return None
    hint = (" (the cookbook's synth-* runs are written by `shopsim-wh demo-data`)"
            if any(a.startswith("synth-") for a in absent) else "")
    shown = ", ".join(sorted(known)[:10]) + (" ..." if len(known) > 10 else "")
    return (f"note: this warehouse has no run {', '.join(repr(a) for a in absent)}{hint}; "
            f"its runs: {shown or 'none'}")
