"""ShopSimRL's paired gate, ``paired_delta_ols_main_effects_no_intercept`` with the strictly-positive-top-k rule
(docs/gate.md "strictly-positive-top-k"), over the warehouse's ``paired_deltas``.

For every job completed in both runs (pairs in (task_id, sample_id) order), ``R_i - B_i`` is regressed on the
binary skill-mask columns (1 = the skill was injected into the treatment episode, from ``skills_selected``)
with no intercept and no centring, separately for ``reward`` and for every reward component ``r_*`` present on
every pair. X'X and X'y are summed in pair order in plain floats and solved exactly
(:func:`.stats.solve_exact`; a rank-deficient mask design is an error, as are fewer pairs than columns + 1);
coefficients within 1e-12 of zero are reported as 0.0. The decision keeps the strictly positive ``reward``
coefficients, best first (ties by id), at most ``budget``; there is no significance test. The gate passes when
it keeps at least one skill.

Pairing (``gate.check_pairable``) is the significance gate's: the runs may differ only in ``skill*`` fingerprint
fields, the bare run is skill-free, and ``model.checkpoint_id`` is required unless explicitly waived.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .gate import GateDataError, GateError, alignment, bare_score
from .stats import ZERO_TOLERANCE, RankDeficient, solve_exact

ESTIMATOR = "paired_delta_ols_main_effects_no_intercept"
FORMULA = "R_i - B_i = C_i^T beta + epsilon_i"
RULE = "strictly_positive_top_k"
COMPONENTS = ("r_att", "r_loose", "r_option", "r_price", "r_strict", "r_success", "r_type")
SUMMATIONS = ("sequential", "neumaier")


def fit_paired_delta_ols(masks: list[list[int]], values: list[float]) -> list[float]:
    """The no-intercept main-effects fit of ``values`` (the paired deltas) on the 0/1 ``masks`` rows."""
    if not masks or len(masks) != len(values):
        raise GateDataError("masks and values must have the same, non-zero length")
    k = len(masks[0])
    if k < 1 or any(len(row) != k for row in masks):
        raise GateDataError("the mask matrix must be rectangular with at least one column")
    if len(masks) <= k:
        raise GateDataError(f"{len(masks)} pair(s) for {k} mask column(s): the fit needs more pairs than columns; "
                            "run more jobs or gate fewer skills")
    if any(v not in (0, 1) for row in masks for v in row):
        raise GateDataError("mask values must be 0 or 1")
    xtx = [[0.0] * k for _ in range(k)]
    xty = [0.0] * k
    for row, y in zip(masks, values, strict=True):
        y = float(y)
        if not math.isfinite(y):
            raise GateDataError(f"paired delta {y} is not a finite number")
        x = [float(v) for v in row]
        for i in range(k):
            xty[i] += x[i] * y
            xi = xtx[i]
            for j in range(k):
                xi[j] += x[i] * x[j]
    try:
        beta = solve_exact(xtx, xty)
    except RankDeficient as exc:
        raise GateDataError(f"the skill-mask design is rank deficient ({exc}): some skill is never or always "
                            "injected, or two always go together; use another mask seed or more jobs") from None
    return [0.0 if abs(b) <= ZERO_TOLERANCE else b for b in beta]


def _mean(values: list[float], summation: str) -> float:
    """``sum(values) / len(values)`` as ShopSimRL's Python computes it (3.11: left to right; 3.12+: Neumaier)."""
    total, comp = 0.0, 0.0
    for x in values:
        if summation == "sequential":
            total += x
        else:
            t = total + x
            comp += (total - t) + x if abs(total) >= abs(x) else (x - t) + total
            total = t
    if summation == "neumaier" and comp and math.isfinite(comp):
        total += comp
    return total / len(values)


@dataclass
class ContributionResult:
    bare_run: str
    treatment_run: str
    columns: list[str]
    budget: int
    n_pairs: int
    planned: int
    estimates: dict
    contributions: list[dict]
    selected: list[str]
    bare_score: dict
    notes: list[str] = field(default_factory=list)
    alignment: dict = field(default_factory=dict)  # gate.Alignment.to_dict()

    @property
    def decision(self) -> str:
        return "pass" if self.selected else "fail"

    @property
    def passed(self) -> bool:
        return bool(self.selected)

    def to_dict(self) -> dict:
        """ShopSimRL's contributions.json fields (estimator, estimates, contributions, selected ids) + decision."""
        return {
            "estimator": {"name": ESTIMATOR, "formula": FORMULA, "fit_intercept": False,
                          "baseline": "same_task_bare_validation", "primary_outcome": "reward",
                          "selection_rule": RULE, "numerical_zero_tolerance": ZERO_TOLERANCE},
            "bare_run": self.bare_run, "treatment_run": self.treatment_run,
            "observations": self.n_pairs, "requested_observations": self.planned,
            "active_skill_budget": self.budget, "selected_count": len(self.selected),
            "selected_chunk_ids": self.selected, "estimates": self.estimates,
            "contributions": self.contributions, "bare_score": self.bare_score, "notes": self.notes,
            "alignment": self.alignment, "decision": self.decision,
        }

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    def to_table(self) -> str:
        b = self.bare_score
        aux = [m for m in ("r_strict", "r_success") if m in self.estimates]
        width = max(len("skill"), *(len(c) for c in self.columns))
        mean = b.get("reward_mean")
        lines = [f"paired gate (strictly-positive-top-k): bare {self.bare_run} vs treatment {self.treatment_run}",
                 f"bare run score (skill-free, unchanged): reward {'-' if mean is None else f'{mean:.4f}'} over "
                 f"{b.get('completed')} completed of {b.get('planned')} planned",
                 f"pairs {self.n_pairs} of {self.planned} planned   columns {len(self.columns)}   budget {self.budget}   "
                 f"estimator {ESTIMATOR}",
                 f"{'skill':<{width}} {'reward beta':>12} " + " ".join(f"{m:>12}" for m in aux) + f" {'rank':>5}  status"]
        for row in self.contributions:
            extra = " ".join(f"{row['auxiliary_coefficients'][m]:>12.6f}" for m in aux)
            lines.append(f"{row['chunk_id']:<{width}} {row['coefficient']:>12.6f} {extra} {row['rank']:>5}  {row['status']}")
        lines.append(f"decision: {self.decision.upper()}  (keeps the strictly positive reward coefficients, best first, "
                     f"ties by id, at most {self.budget}; kept: {', '.join(self.selected) or 'none'})")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass(frozen=True)
class ContributionOptions:
    """How :func:`contributions` fits and selects: the top-k budget, mask columns, summation, pairing checks.

    ``columns``: the mask columns in order (default: every skill the paired treatment episodes selected, sorted
    by id); the order only moves the last bits of the solve, pass ShopSimRL's column order to match its digits.
    ``summation``: how the outcome means add up (see :func:`_mean`). ``allow_missing_checkpoint``: pair runs
    without ``model.checkpoint_id``; ``assume_aligned``: pair them without checking their identities.
    """

    budget: int = 10  # most skills kept (ShopSimRL's active_skill_budget)
    columns: Sequence[str] | None = None
    allow_missing_checkpoint: bool = False
    summation: str = "neumaier"  # one of SUMMATIONS
    assume_aligned: bool = False


def contributions(con_or_warehouse, bare_run: str, treatment_run: str,
                  options: ContributionOptions | None = None) -> ContributionResult:
    """Fit every metric's coefficients and apply the strictly-positive-top-k rule.

    ``options``: the budget, mask columns, summation and pairing checks (:class:`ContributionOptions`;
    default: its defaults).
    """
    o = options or ContributionOptions()
    budget, columns, summation = o.budget, o.columns, o.summation
    if budget < 1:
        raise GateError(f"budget must be positive, not {budget}")
    if summation not in SUMMATIONS:
        raise GateError(f"summation must be one of {', '.join(SUMMATIONS)}, not {summation!r}")
    from ..engines.db import as_connection

    con = as_connection(con_or_warehouse)
    _, treat, aligned = alignment(con, bare_run, treatment_run, o.allow_missing_checkpoint, o.assume_aligned)
    cur = con.execute("SELECT * FROM paired_deltas(?, ?) ORDER BY task_id, sample_id", [bare_run, treatment_run])
    names = [d[0] for d in cur.description]
    pairs = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    if not pairs:
        raise GateDataError(f"zero pairs: no job (task_id, sample_id) is completed in both {bare_run!r} and "
                            f"{treatment_run!r}")
    used = sorted({s for p in pairs for s in p["skills"]})
    if columns is None:
        columns = used
    else:
        columns = list(columns)
        if len(set(columns)) != len(columns):
            raise GateDataError(f"mask columns repeat an id: {columns}")
        stray = [s for s in used if s not in columns]
        if stray:
            raise GateDataError(f"the treatment run injected skills that are not mask columns: {', '.join(stray)}; "
                                "add them to the columns")
    if not columns:
        raise GateDataError(f"no mask columns: no paired episode of {treatment_run!r} selected a skill")
    masks = [[1 if c in p["skills"] else 0 for c in columns] for p in pairs]
    notes = list(aligned.notes)
    estimates: dict[str, dict] = {}
    for metric in (*COMPONENTS, "reward"):
        rk, bk = ("R_i", "B_i") if metric == "reward" else (f"R_{metric}", f"B_{metric}")
        r = [p[rk] for p in pairs]
        b = [p[bk] for p in pairs]
        if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in r + b):
            if metric != "reward":
                notes.append(f"{metric} is missing on some pairs: not fitted")
            continue
        delta = [float(x) - float(y) for x, y in zip(r, b, strict=True)]
        beta = fit_paired_delta_ols(masks, delta)
        estimates[metric] = {"intercept": 0.0, "coefficients": dict(zip(columns, beta, strict=True)),
                             "observations": len(pairs), "masked_mean": _mean([float(v) for v in r], summation),
                             "bare_mean": _mean([float(v) for v in b], summation), "delta_mean": _mean(delta, summation)}
    primary = estimates["reward"]["coefficients"]
    ranked = sorted(columns, key=lambda c: (-primary[c], c))
    ranks = {c: i for i, c in enumerate(ranked, 1)}
    keep = set([c for c in ranked if primary[c] > 0.0][:budget])
    rows = []
    for c in columns:
        status = "selected" if c in keep else ("non_positive" if primary[c] <= 0.0 else "budget_excluded")
        rows.append({"chunk_id": c, "coefficient": primary[c], "rank": ranks[c], "status": status,
                     "auxiliary_coefficients": {m: e["coefficients"][c] for m, e in estimates.items() if m != "reward"}})
    planned = treat.get("planned_episodes") or con.execute(
        "SELECT count(*) FROM episodes WHERE run_id = ?", [treatment_run]).fetchone()[0]
    return ContributionResult(bare_run, treatment_run, columns, budget, len(pairs), int(planned), estimates, rows,
                              [c for c in columns if c in keep], bare_score(con, bare_run), notes, aligned.to_dict())
