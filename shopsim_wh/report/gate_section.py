"""The report's paired-gate section: estimates with confidence intervals, per-task deltas, recorded decisions.

The estimates come from :func:`shopsim_wh.analytics.gate.gate` (the same fit as `shopsim-wh gate`); recorded
decisions from the ``gate_results`` table when the warehouse has one (older warehouses do not).
"""

from __future__ import annotations

import duckdb

from . import charts, queries
from .charts import ChartData
from .document import Section, Table


def _verdict(c, alpha: float) -> str:
    """helps / hurts / neutral by the rule the gate states (analytics.gate.RULE)."""
    if c.beta > 0 and c.p < alpha and (c.ci_low is None or c.ci_low > 0):
        return "helps"
    if c.beta < 0 and (c.p < alpha or (c.ci_high is not None and c.ci_high < 0)):
        return "hurts"
    return "neutral"


def _recorded(con: duckdb.DuckDBPyConnection, bare: str, treatment: str, s: Section) -> None:
    if not queries.table_exists(con, "gate_results"):
        s.notes.append("This warehouse records no gate decisions (no `gate_results` table yet: a shopsim-wh with "
                       "gate recording writes one on every `shopsim-wh gate`).")
        return
    try:
        rows = queries.rows(con, "gate_results", {"bare": bare, "treatment": treatment})
    except duckdb.BinderException as exc:  # a gate_results table of another shape: say so, draw the rest
        s.notes.append(f"The warehouse's gate_results table has an unexpected shape ({exc}); recorded decisions "
                       "are left out.")
        return
    if not rows:
        s.notes.append(f"No recorded decision for this pair yet: `shopsim-wh gate --bare {bare} --treatment "
                       f"{treatment}` records one.")
        return
    s.tables.append(Table(f"Recorded gate decisions for this pair ({len(rows)})", list(rows[0]), rows))


def gate_section(con: duckdb.DuckDBPyConnection, bare: str, treatment: str, bootstrap: int, seed: int):
    """(Section, summary dict) for ``--gate bare:treatment``; a refused gate is a section with the reason."""
    from ..analytics.gate import GateError, GateOptions, gate

    s = Section("gate", f"Paired gate: {bare} vs {treatment}",
                "Per job completed in both runs, delta = treatment reward - bare reward, regressed on one indicator "
                "per selected skill (docs/gate.md). Intervals are the paired bootstrap's.")
    try:
        res = gate(con, bare, treatment, GateOptions(bootstrap=bootstrap, seed=seed))
    except GateError as exc:
        s.badge = "refused"
        s.notes.append(f"The gate cannot be fitted: {exc}")
        _recorded(con, bare, treatment, s)
        return s, {"bare_run": bare, "treatment_run": treatment, "decision": None, "error": str(exc)}
    s.badge = res.decision
    est = [dict(c.to_dict(), verdict=_verdict(c, res.alpha)) for c in res.coefficients]
    cols = ["name", "beta", "se", "t", "p", "ci_low", "ci_high", "verdict"]
    s.charts.append(charts.estimates(
        ChartData("gate_estimates", f"Gate estimates with {100 * (1 - res.alpha):.0f}% bootstrap intervals",
                  est, cols), "effect on reward per episode (beta, reward units)"))
    deltas = queries.rows(con, "gate_deltas", {"bare": bare, "treatment": treatment})
    for r in deltas:
        r["task"] = str(r["task_id"])
        r["sign"] = "helped" if r["delta"] > 0 else "hurt" if r["delta"] < 0 else "no change"
    s.charts.append(charts.deltas(
        ChartData("gate_deltas", "Per-task paired deltas (treatment - bare, mean over samples)", deltas,
                  ["task_id", "pairs", "bare", "treatment", "delta"]),
        "delta reward (treatment - bare, reward units)"))
    s.notes.append(f"Decision: {res.decision.upper()} over {res.n_pairs} pairs (coverage {res.coverage:.3f}, "
                   f"alpha {res.alpha}, {res.bootstrap} bootstrap resamples, seed {res.seed}). Rule: {res.rule}.")
    s.notes += res.notes
    _recorded(con, bare, treatment, s)
    return s, res.to_dict(full=False) | {"bare_run": bare, "treatment_run": treatment}
