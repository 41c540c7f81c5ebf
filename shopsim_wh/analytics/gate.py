"""The paired bare-vs-skill gate (seed 000 §3 "Bare validation traces", §8.3; docs/gate.md).

For every job (task_id, sample_id) completed in both a bare run and a treatment run, ``delta_i = R_i - B_i``
is regressed without intercept on covariates ``C_i`` (default: one indicator per skill selected for the
treatment episode): ``delta_i = C_i' beta + e_i``. The sufficient statistics X'X, X'y, y'y and n are summed
in SQL over ``paired_deltas(bare, treatment)``; only the k x k solve happens here. Standard errors are the
classical OLS ones (sigma^2 = RSS / (n - k)), p-values two-sided Student t with n - k degrees of freedom
(:mod:`.stats`), confidence intervals from a seeded paired bootstrap over pairs.

Decision rule (documented in docs/gate.md): a coefficient *helps* when beta > 0, p < alpha and the
bootstrap interval lies above 0; it *hurts* when beta < 0 and either p < alpha or the interval lies below 0.
The gate passes iff at least one coefficient helps and none hurts.

Covariates are SQL: expressions are spliced into the query text on purpose (they are code the caller writes,
like a ``WHERE`` clause); run ids and skill ids are always bound as parameters.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import duckdb
import numpy as np

from ..core import run_identity as identity
from ..core.errors import ShopsimError
from ..engines.sandbox import check_expression
from .stats import t_two_sided_p

RULE = ("pass iff at least one coefficient helps (beta > 0, p < alpha, bootstrap CI above 0) and none hurts "
        "(beta < 0 with p < alpha or bootstrap CI below 0)")
SKILL_FIELD_PREFIX = "skill"  # fingerprint fields allowed to differ: skill_bank_hash, skills_mask_rate, ...
RUN_COLUMNS_COMPARED = ("model_name", "checkpoint_id", "split", "split_manifest_hash", "prompt_hash",
                        "action_limit", "environment_mode")


class GateError(ShopsimError):
    """The gate cannot produce a result."""


class GateRefused(GateError):
    """The two runs must not be paired (different jobs/model/..., no checkpoint id, a bare run with skills)."""

    def __init__(self, message: str, diff: dict[str, tuple[object, object]] | None = None):
        self.diff = diff or {}
        super().__init__(message)


class GateDataError(GateError):
    """The pairs cannot be fitted: no pairs, no or collinear covariates, all deltas equal."""


@dataclass(frozen=True)
class Coefficient:
    name: str
    beta: float
    se: float
    t: float
    p: float
    ci_low: float | None
    ci_high: float | None

    def to_dict(self) -> dict:
        return {"name": self.name, "beta": self.beta, "se": self.se, "t": self.t, "p": self.p,
                "ci_low": self.ci_low, "ci_high": self.ci_high}


@dataclass
class GateResult:
    bare_run: str
    treatment_run: str
    n_pairs: int
    coverage: float
    coefficients: list[Coefficient]
    decision: str  # "pass" | "fail"
    alpha: float
    bootstrap: int
    seed: int
    df: int
    residual_se: float
    bare_score: dict
    bootstrap_dropped: int = 0
    rule: str = RULE
    checkpoint_ids: tuple[str | None, str | None] = (None, None)
    notes: list[str] = field(default_factory=list)
    planned: int = 0  # the treatment run's planned episodes (the coverage denominator)
    alignment: dict = field(default_factory=dict)  # Alignment.to_dict(): how the runs were found pairable

    @property
    def passed(self) -> bool:
        return self.decision == "pass"

    def to_dict(self, full: bool = False) -> dict:
        """The issue's JSON shape: n_pairs, coverage, coefficients, decision (``full`` adds the context)."""
        out = {"n_pairs": self.n_pairs, "coverage": self.coverage,
               "coefficients": [c.to_dict() for c in self.coefficients], "decision": self.decision}
        if self.alignment.get("assumed_aligned") or full:  # an override is never silent
            out["alignment"] = self.alignment
        if full:
            out.update({"bare_run": self.bare_run, "treatment_run": self.treatment_run, "alpha": self.alpha,
                        "bootstrap": self.bootstrap, "seed": self.seed, "df": self.df,
                        "residual_se": self.residual_se, "bootstrap_dropped": self.bootstrap_dropped,
                        "bare_score": self.bare_score, "rule": self.rule, "notes": self.notes})
        return out

    def to_json(self, full: bool = False, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(full), indent=indent, allow_nan=False, default=_json_default)

    def to_table(self) -> str:
        """Plain-text report (no rich): bare score, fit summary, one line per coefficient, decision."""
        b = self.bare_score

        def f(x, w=9, p=4):
            return f"{'-':>{w}}" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:>{w}.{p}f}"

        lines = [
            f"paired gate: bare {self.bare_run} vs treatment {self.treatment_run}",
            f"bare run score (skill-free, unchanged): reward {f(b.get('reward_mean'), 0)} "
            f"± {f(b.get('reward_sem'), 0)} SEM over {b.get('completed')} completed of {b.get('planned')} planned; "
            f"r_success {f(b.get('r_success_mean'), 0)}",
            f"pairs {self.n_pairs}   coverage {self.coverage:.4f}   df {self.df}   "
            f"bootstrap {self.bootstrap} (seed {self.seed}, dropped {self.bootstrap_dropped})   alpha {self.alpha}",
        ]
        width = max([len("covariate")] + [len(c.name) for c in self.coefficients])
        lines.append(f"{'covariate':<{width}} {'beta':>9} {'se':>9} {'t':>9} {'p':>10} {'ci_low':>9} {'ci_high':>9}")
        for c in self.coefficients:
            p = f"{c.p:>10.3g}"
            lines.append(f"{c.name:<{width}} {f(c.beta)} {f(c.se)} {f(c.t, 9, 3)} {p} {f(c.ci_low)} {f(c.ci_high)}")
        lines.append(f"decision: {self.decision.upper()}  ({self.rule})")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _json_default(obj):
    if isinstance(obj, np.integer | np.floating):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


# ------------------------------------------------------------------------------------------------ checks


def resolve_run(con: duckdb.DuckDBPyConnection, name: str) -> str:
    """The run id ``name`` stands for: a run id as it is, else the one run whose experiment is ``name`` (an
    ingested ShopSimRL run's id is ``shopsimrl-v4.<hash>``, its experiment the run directory's plan name); two or
    more runs of that experiment are refused, listing their ids."""
    if con.execute("SELECT 1 FROM runs WHERE run_id = ?", [name]).fetchone():
        return name
    ids = [r[0] for r in con.execute("SELECT run_id FROM runs WHERE experiment = ? ORDER BY run_id", [name]).fetchall()]
    if len(ids) == 1:
        return ids[0]
    if ids:
        raise GateError(f"experiment {name!r} has {len(ids)} runs ({', '.join(ids)}); name one by its run id "
                        "(`shopsim-wh runs list` shows them)")
    return name  # _run_row says it is unknown, listing the runs


def _run_row(con: duckdb.DuckDBPyConnection, run_id: str) -> dict:
    cur = con.execute("SELECT * FROM runs WHERE run_id = ?", [run_id])
    cols = [d[0] for d in cur.description]
    rows = cur.fetchall()
    if not rows:
        known = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
        raise GateError(f"run {run_id!r} is not in the warehouse; known runs: {', '.join(known) or '(none)'}")
    return dict(zip(cols, rows[0], strict=True))


def _fields(row: dict) -> dict | None:
    text = row.get("fingerprint_fields")
    try:
        fields = json.loads(text) if text else None
    except ValueError:
        fields = None
    return fields if isinstance(fields, dict) and fields else None


def _vocabulary(fields: dict | None) -> str | None:
    if fields is None:
        return None
    return "shopsimrl" if fields.get("identity_source") in identity.SOURCES else "shopsim-wh"


ASSUME_HINT = ("or pass --assume-aligned (assume_aligned=True) to pair the runs without this check; the output then "
               "records that alignment was assumed, not verified")


@dataclass
class Alignment:
    """How two runs were found pairable: the identity checks that ran (``checked``), those the runs' identities
    could not support (``unchecked``, each with the reason in ``notes``) or that the caller waived (``assumed``)."""
    vocabulary: str | None  # "shopsim-wh" (runner fields), "shopsimrl" (ShopSimRL's plan sections) or None
    checked: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    assumed: bool = False
    notes: list[str] = field(default_factory=list)
    sources: tuple[str | None, str | None] = (None, None)
    plan_fingerprints: tuple[str | None, str | None] = (None, None)
    observed: tuple[dict, dict] = ({}, {})

    @property
    def status(self) -> str:
        return "assumed" if self.assumed else "matched"

    def to_dict(self) -> dict:
        return {"status": self.status, "assumed_aligned": self.assumed, "vocabulary": self.vocabulary,
                "checked_fields": self.checked, "unchecked_fields": self.unchecked,
                "identity_sources": {"bare": self.sources[0], "treatment": self.sources[1]},
                "bare_plan_fingerprint": self.plan_fingerprints[0],
                "treatment_plan_fingerprint": self.plan_fingerprints[1], "notes": self.notes}


def _refuse_diff(bare_run: str, treatment_run: str, diff: dict, advice: str) -> None:
    lines = "\n".join(f"  {k}: bare={a!r} treatment={b!r}" for k, (a, b) in diff.items())
    raise GateRefused(f"runs {bare_run!r} and {treatment_run!r} differ in more than the skills, so their deltas would "
                      f"not measure the skills:\n{lines}\n{advice}", diff)


def _check_shopsim_wh(bare: dict, treat: dict, fb: dict, ft: dict, al: Alignment) -> None:
    """Runner runs: every fingerprint field but the ``skill*`` ones must be equal."""
    diff: dict[str, tuple[object, object]] = {}
    for key in sorted(set(fb) | set(ft)):
        if not key.startswith(SKILL_FIELD_PREFIX) and fb.get(key) != ft.get(key):
            diff[key] = (fb.get(key), ft.get(key))
    for col in RUN_COLUMNS_COMPARED:
        if col not in fb and col not in ft and bare.get(col) != treat.get(col):
            diff[f"runs.{col}"] = (bare.get(col), treat.get(col))
    if diff:
        _refuse_diff(bare["run_id"], treat["run_id"], diff, "Run the treatment with the bare run's jobs, seeds, "
                     "model, checkpoint, sampling and prompt.")
    al.checked = sorted(k for k in set(fb) | set(ft) if not k.startswith(SKILL_FIELD_PREFIX))


def _without(d, key: str):
    return {k: v for k, v in d.items() if k != key} if isinstance(d, dict) else d


def _shopsimrl_view(name: str, value, other):
    """A section as ShopSimRL compares it: model without ``transport``, runtime without ``concurrency``, task split
    without ``source_path``; an environment from records (with the versions they observed) seen through the keys of
    a manifest's environment (``paired_validation._check_trace_plan``)."""
    if name == "model":
        return _without(value, "transport")
    if name == "runtime":
        return _without(value, "concurrency")
    if name == "task_split":
        return _without(value, "source_path")
    if name == "environment" and isinstance(value, dict) and isinstance(other, dict) and set(other) < set(value):
        return {k: value.get(k) for k in other}
    return value


def _jobs_seen(con, run_id: str, with_seed: bool) -> dict:
    cols = ", ".join(identity.job_key_fields(with_seed))
    rows = con.execute(f"SELECT DISTINCT {cols} FROM episodes WHERE run_id = ? AND task_id IS NOT NULL",
                       [run_id]).fetchall()
    return identity.jobs_identity([tuple(r) for r in rows], with_seed)


def _check_shopsimrl(con, bare: dict, treat: dict, fb: dict, ft: dict, al: Alignment) -> None:
    """ShopSimRL's alignment checks over the runs' identities (docs/gate.md)."""
    names = (bare["run_id"], treat["run_id"])
    required = [*identity.SECTIONS]
    if "task_split" in fb or "task_split" in ft:
        required.append("task_split")
    else:
        al.unchecked.append("task_split")
        al.notes.append("task_split not checked: neither run has a manifest.json (the jobs' split names are checked)")
    thin = {n: [k for k in required if not isinstance(f.get(k), dict) or not f[k]]
            for n, f in zip(names, (fb, ft), strict=True)}
    thin = {n: ks for n, ks in thin.items() if ks}
    if thin:
        what = "; ".join(f"run {n!r} has no {', '.join(ks)}" for n, ks in thin.items())
        raise GateRefused(f"the runs' identities are too thin to check their alignment: {what} (its manifest.json "
                          "plan or its records' provenance lacks the section). Ingest the run directory with its "
                          f"manifest.json beside traces.jsonl, {ASSUME_HINT}.")
    diff: dict[str, tuple[object, object]] = {}
    for k in required:
        a, b = _shopsimrl_view(k, fb[k], ft[k]), _shopsimrl_view(k, ft[k], fb[k])
        if a != b:
            diff[k] = (a, b)
    ob, ot = fb.get("observed") or {}, ft.get("observed") or {}
    if fb.get("identity_source") == identity.SOURCE_PROVENANCE:
        ob = {k: fb[k] for k in identity.SECTIONS}
    if ft.get("identity_source") == identity.SOURCE_PROVENANCE:
        ot = {k: ft[k] for k in identity.SECTIONS}
    if ob and ot:
        for k in identity.SECTIONS:
            a, b = _shopsimrl_view(k, ob.get(k), None), _shopsimrl_view(k, ot.get(k), None)
            if a != b and k not in diff:
                diff[f"records.{k}"] = (a, b)
    else:
        al.unchecked.append("records")
        al.notes.append("records' provenance not checked: "
                        + ", ".join(repr(n) for n, o in zip(names, (ob, ot), strict=True) if not o)
                        + " carries none (only its manifest.json plan was checked)")
    al.observed = (ob, ot)
    with_seed = identity.send_seed(fb["model"])
    jobs = [f["jobs"] if isinstance(f.get("jobs"), dict) and f["jobs"].get("key_fields")
            == identity.job_key_fields(with_seed) else _jobs_seen(con, n, with_seed)
            for n, f in zip(names, (fb, ft), strict=True)]
    if jobs[0]["sha256"] != jobs[1]["sha256"]:
        diff["jobs"] = tuple(f"{j['count']} jobs ({', '.join(j['key_fields'])}) sha256 {j['sha256'][:16]}" for j in jobs)
    if diff:
        _refuse_diff(*names, diff, "ShopSimRL pairs only runs of the same model (transport aside), prompt, runtime "
                     "(concurrency aside), environment, task split and jobs: run the treatment with the bare run's "
                     f"plan, {ASSUME_HINT}.")
    al.checked = [*required, *([] if "records" in al.unchecked else ["records"]), "jobs"]
    al.plan_fingerprints = (fb.get("plan_fingerprint"), ft.get("plan_fingerprint"))


def _check_masks(con, treat: dict) -> str | None:
    """A treatment that declares masks (a gate run's ``mask_assignments.json``): every completed episode selected
    exactly the skills its assignment included, in order (``paired_validation.paired_observations``)."""
    try:
        prov = json.loads(treat.get("provenance") or "{}")
    except ValueError:
        return None
    masks = prov.get("mask_assignments") if isinstance(prov, dict) else None
    if not isinstance(masks, dict) or not isinstance(masks.get("included"), dict):
        return None
    included = masks["included"]
    rows = con.execute("SELECT episode_id, skill_ids FROM episodes WHERE run_id = ? AND status = 'completed' "
                       "ORDER BY episode_id", [treat["run_id"]]).fetchall()
    for eid, ids in rows:
        got = json.loads(ids) if ids else []
        if eid not in included or got != included[eid]:
            raise GateRefused(f"treatment episode {eid} of run {treat['run_id']!r} selected skills {got}, but its mask "
                              f"assignment (mask_assignments.json) is {included.get(eid, 'missing')}: the treatment "
                              "did not follow its frozen masks; re-run the masked rollouts")
    return f"masks: every completed treatment episode selected its assigned skills ({len(rows)} checked)"


def alignment(con: duckdb.DuckDBPyConnection, bare_run: str, treatment_run: str,
              allow_missing_checkpoint: bool = False, assume_aligned: bool = False) -> tuple[dict, dict, Alignment]:
    """Refuse runs that must not be paired; returns both runs' rows and how their alignment was established.

    Two runner runs are checked field by field (every fingerprint field but ``skill*``); two ingested ShopSimRL runs
    with ShopSimRL's own checks of their identities. ``assume_aligned`` skips the identity checks (and the checkpoint
    requirement) and says so in the result; the bare run must still be skill-free, a masked treatment must still
    have followed its masks."""
    if bare_run == treatment_run:
        raise GateRefused(f"bare and treatment are the same run ({bare_run!r})")
    bare, treat = _run_row(con, bare_run), _run_row(con, treatment_run)
    fb, ft = _fields(bare), _fields(treat)
    vb, vt = _vocabulary(fb), _vocabulary(ft)
    al = Alignment(vocabulary=vb if vb == vt else None,
                   sources=((fb or {}).get("identity_source"), (ft or {}).get("identity_source")))
    fb, ft = fb or {}, ft or {}
    if assume_aligned:
        al.assumed = True
        al.notes.append("alignment ASSUMED by the caller (--assume-aligned): the runs' identities were not checked")
    else:
        missing = [r for r, v in ((bare, vb), (treat, vt)) if v is None]
        if missing:
            what = ", ".join(f"{r['run_id']!r} (source {r.get('source_format')})" for r in missing)
            raise GateRefused(
                f"run(s) {what} record no run identity (fingerprint_fields), so the gate cannot verify that both runs "
                "played the same jobs with the same model, prompt and environment: a ShopSimRL run directory was "
                "ingested without its manifest.json and its records carry no provenance. Put the run's manifest.json "
                f"beside its traces.jsonl and ingest it again (or re-run it), {ASSUME_HINT}.")
        if vb != vt:
            raise GateRefused(
                f"run {bare_run!r} records a {vb} identity and run {treatment_run!r} a {vt} one (a runner run and an "
                "ingested ShopSimRL run): their fields cannot be checked against each other. Pair runs from the "
                f"same source, {ASSUME_HINT}.")
        if vb == "shopsimrl":
            _check_shopsimrl(con, bare, treat, fb, ft, al)
        else:
            _check_shopsim_wh(bare, treat, fb, ft, al)
        if not allow_missing_checkpoint:
            missing = [r["run_id"] for r, fp in ((bare, fb), (treat, ft)) if not _checkpoint(r, fp)]
            if missing:
                raise GateRefused(
                    f"run(s) {', '.join(repr(m) for m in missing)} have no model.checkpoint_id: the same server address "
                    "can serve new weights, so the bare baseline may be stale. Set model.checkpoint_id, or allow it "
                    "explicitly (allow_missing_checkpoint=True / --allow-missing-checkpoint).")
    n_bare_skills = con.execute("SELECT count(*) FROM skills_selected WHERE run_id = ?", [bare_run]).fetchone()[0]
    bank = bare.get("skill_bank_hash") or fb.get("skill_bank_hash")
    declared = fb.get("skills") if isinstance(fb.get("skills"), dict) else None
    if bank or n_bare_skills or (declared is not None and declared != {"provider": "none"}):
        raise GateRefused(f"bare run {bare_run!r} is not skill-free (skill bank {bank or declared!r}, "
                          f"{n_bare_skills} skill selections); use a run with skills.path = null as the bare run")
    if (note := _check_masks(con, treat)) is not None:
        al.checked.append("masks")
        al.notes.append(note)
    return bare, treat, al


def _checkpoint(row: dict, fields: dict):
    model = fields.get("model") if isinstance(fields.get("model"), dict) else {}
    return row.get("checkpoint_id") or fields.get("checkpoint_id") or model.get("checkpoint_id")


def check_pairable(con: duckdb.DuckDBPyConnection, bare_run: str, treatment_run: str,
                   allow_missing_checkpoint: bool = False, assume_aligned: bool = False) -> tuple[dict, dict]:
    """Refuse runs that must not be paired; returns both runs rows (:func:`alignment` also says how)."""
    bare, treat, _ = alignment(con, bare_run, treatment_run, allow_missing_checkpoint, assume_aligned)
    return bare, treat


# ------------------------------------------------------------------------------------------------ covariates

FIT_COLUMNS = ("task_id", "sample_id", "delta", "skills")  # what the fit reads besides the covariates' columns
_WHOLE_ROW = re.compile(r"\*|\bcolumns\s*\(|\bp\b(?!\s*\.)", re.IGNORECASE)  # may read columns it does not name


def _pair_columns(con, bare_run: str, treatment_run: str, covariates) -> str:
    """The select list of the pairs table: :data:`FIT_COLUMNS` plus the ``paired_deltas`` columns the covariate
    expressions name (``*`` when one may read columns without naming them: ``*``, ``COLUMNS(...)``, the row
    ``p``). The table holds every pair: 401 bytes a pair in DuckDB with every column, 99 with these four
    (docs/scale.md, issue 13)."""
    texts = []
    if isinstance(covariates, Mapping):
        texts = list(covariates.values())
    elif isinstance(covariates, str):
        texts = [covariates]
    elif isinstance(covariates, Sequence):
        texts = [c[1] if isinstance(c, tuple) and len(c) == 2 else c for c in covariates]
    if not all(isinstance(t, str) for t in texts):
        return "*"  # _covariate_specs says what is wrong with them
    user = [t for t in texts if not t.startswith("skill:")]
    if any(_WHOLE_ROW.search(t) for t in user):
        return "*"
    have = [d[0] for d in con.execute("SELECT * FROM paired_deltas(?, ?) LIMIT 0", [bare_run, treatment_run]).description]
    named = [c for c in have if c not in FIT_COLUMNS and any(re.search(rf"\b{re.escape(c)}\b", t, re.IGNORECASE)
                                                              for t in user)]
    return ", ".join(f'"{c}"' for c in (*FIT_COLUMNS, *named))


def _covariate_specs(con, pairs_table: str, treatment_run: str, covariates) -> list[tuple[str, str, dict]]:
    """(name, SQL expression over the pairs relation `p`, parameters) per covariate."""
    if covariates is None:
        skills = [r[0] for r in con.execute(
            f"SELECT DISTINCT s FROM (SELECT unnest(skills) AS s FROM {pairs_table}) WHERE s IS NOT NULL ORDER BY 1"
        ).fetchall()]
        if not skills:
            raise GateDataError(f"no covariates: no paired episode of treatment run {treatment_run!r} selected a "
                                "skill (skills_selected is empty for them); pass covariates explicitly")
        items = [f"skill:{s}" for s in skills]
    elif isinstance(covariates, Mapping):
        items = list(covariates.items())
    elif isinstance(covariates, str):
        items = [covariates]
    elif isinstance(covariates, Sequence):
        items = list(covariates)
    else:
        raise GateDataError(f"covariates must be None, a list of expressions or a name -> expression mapping, "
                            f"not {type(covariates).__name__}")
    if not items:
        raise GateDataError("no covariates: the covariate list is empty")
    specs = []
    for j, item in enumerate(items):
        name, expr = item if isinstance(item, tuple) else (item, item)
        if not isinstance(expr, str) or not expr.strip():
            raise GateDataError(f"covariate {name!r} has an empty expression")
        if expr.startswith("skill:"):
            sid = expr[len("skill:"):]
            specs.append((sid if name == expr else name, f"CASE WHEN list_contains(p.skills, $s{j}) THEN 1 ELSE 0 END",
                          {f"s{j}": sid}))
        else:  # user SQL spliced into the fit's query: one expression, and the query runs in the sandbox
            specs.append((name, check_expression(expr, f"covariate {name!r}"), {}))
    names = [s[0] for s in specs]
    if len(set(names)) != len(names):
        raise GateDataError(f"covariate names must be unique: {names}")
    return specs


# ------------------------------------------------------------------------------------------------ fit


def _xtx_from_sql(con, pairs_table: str, specs) -> tuple[int, np.ndarray, np.ndarray, float, str, dict]:
    k = len(specs)
    params: dict = {}
    for _, _, p in specs:
        params.update(p)
    cols = ", ".join(f"CAST(({expr}) AS DOUBLE) AS x{j}" for j, (_, expr, _) in enumerate(specs))
    rel = f"WITH x AS (SELECT p.task_id, p.sample_id, CAST(p.delta AS DOUBLE) AS y, {cols} FROM {pairs_table} AS p)"
    sums = ["count(*)", "sum(y * y)", " + ".join(f"CASE WHEN x{j} IS NULL THEN 1 ELSE 0 END" for j in range(k))]
    sums[2] = f"sum({sums[2]})"
    pairs = [(i, j) for i in range(k) for j in range(i, k)]
    sums += [f"sum(x{i} * x{j})" for i, j in pairs] + [f"sum(x{j} * y)" for j in range(k)]
    try:
        row = con.execute(f"{rel} SELECT {', '.join(sums)} FROM x", params).fetchone()
    except duckdb.Error as exc:
        raise GateDataError(f"the covariate SQL failed: {exc}") from exc
    n, yty, n_null = int(row[0]), float(row[1] or 0.0), int(row[2] or 0)
    if n_null:
        raise GateDataError(f"covariates are NULL on {n_null} pair(s); make every expression non-NULL")
    xtx = np.zeros((k, k))
    for (i, j), v in zip(pairs, row[3:3 + len(pairs)], strict=True):
        xtx[i, j] = xtx[j, i] = float(v or 0.0)
    xty = np.array([float(v or 0.0) for v in row[3 + len(pairs):]])
    return n, xtx, xty, yty, rel, params


def _check_design(names: list[str], xtx: np.ndarray) -> None:
    k = len(names)
    diag = np.diag(xtx)
    zero = [names[j] for j in range(k) if diag[j] <= 0]
    if zero:
        raise GateDataError(f"collinear covariates: {', '.join(zero)} is zero on every pair (a skill never selected "
                            "among the paired episodes?); drop it")
    for i in range(k):
        for j in range(i + 1, k):
            if abs(abs(xtx[i, j]) - math.sqrt(diag[i] * diag[j])) <= 1e-12 * math.sqrt(diag[i] * diag[j]):
                raise GateDataError(f"collinear covariates: {names[i]} and {names[j]} are proportional on every pair "
                                    "(always selected together?); merge or drop one")
    scale = 1.0 / np.sqrt(diag)
    eig = np.linalg.eigvalsh(xtx * scale[:, None] * scale[None, :])
    if eig[0] <= 1e-10 * eig[-1]:
        raise GateDataError(f"collinear covariates: {', '.join(names)} are linearly dependent on the pairs "
                            f"(smallest scaled eigenvalue {eig[0]:.3g}); drop one")


MAX_PATTERNS = 64  # the per-pattern sampler: at most this many distinct covariate rows ...
PAIRS_PER_PATTERN = 500  # ... and at least this many pairs per pattern (below, the pair sampler is cheaper)


def _bootstrap(x: np.ndarray, y: np.ndarray, replicates: int, seed: int) -> tuple[np.ndarray, int]:
    """Paired bootstrap over pairs (pairs in (task_id, sample_id) order); replicate b uses the generator
    ``numpy.random.default_rng([seed, b])``, so replicates are independent of each other (and could run in any
    order or in parallel). Two exact samplers of the same resampling distribution (n pairs drawn uniformly with replacement):

    * few distinct covariate rows (skill indicators: P <= ``MAX_PATTERNS`` patterns in ``numpy.unique`` order)
      and n >= ``PAIRS_PER_PATTERN`` * P: ``m = rng.multinomial(n, n_p / n)`` draws per pattern, then for each
      pattern p in order ``rng.integers(0, n_p, m_p)`` picks its pairs (in pair order within the pattern);
    * otherwise: ``rng.integers(0, n, n)`` picks the pairs.

    Singular resamples are dropped and counted.
    """
    n, k = x.shape
    patterns, inverse = _patterns(x)
    if len(patterns) <= MAX_PATTERNS and n >= PAIRS_PER_PATTERN * len(patterns):
        sums = _pattern_sums(patterns, inverse, y, replicates, seed)
        m, sy = sums[:, :len(patterns)], sums[:, len(patterns):]
        xtx = np.einsum("bp,pi,pj->bij", m, patterns, patterns)
        xty = sy @ patterns
    else:
        xtx, xty = _pair_sums(x, y, replicates, seed)
    betas = np.full((replicates, k), np.nan)
    try:
        betas[:] = np.linalg.solve(xtx, xty[..., None])[..., 0]
    except np.linalg.LinAlgError:  # some resample is singular: solve one by one, drop those
        for r in range(replicates):
            try:
                betas[r] = np.linalg.solve(xtx[r], xty[r])
            except np.linalg.LinAlgError:
                pass
    ok = ~np.isnan(betas).any(axis=1)
    return betas[ok], int((~ok).sum())


def _patterns(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``numpy.unique(x, axis=0, return_inverse=True)``; for 0/1 covariates (skill indicators) through an
    integer code per row (first column most significant: the same lexicographic order, 20x faster)."""
    k = x.shape[1]
    if k <= 62 and np.all((x == 0) | (x == 1)):
        weights = np.left_shift(1, np.arange(k - 1, -1, -1, dtype=np.int64))
        codes, inverse = np.unique(x.astype(np.int64) @ weights, return_inverse=True)
        return ((codes[:, None] & weights) > 0).astype(float), inverse.reshape(-1)
    patterns, inverse = np.unique(x, axis=0, return_inverse=True)
    return patterns, inverse.reshape(-1)


def _chunks(run, replicates: int, chunk: int) -> np.ndarray:
    # one thread: the per-replicate numpy calls hold the GIL, threads only contend for it
    return np.vstack([run(s, min(replicates, s + chunk)) for s in range(0, replicates, chunk)])


def _pattern_sums(patterns: np.ndarray, inverse: np.ndarray, y: np.ndarray, replicates: int, seed: int) -> np.ndarray:
    """Per replicate: draws per pattern and the sum of the drawn deltas per pattern."""
    n, n_pat = len(y), len(patterns)
    members = [y[inverse == p] for p in range(n_pat)]
    freq = np.array([len(v) for v in members]) / n

    def run(start: int, stop: int) -> np.ndarray:
        out = np.zeros((stop - start, 2 * n_pat))
        for r, b in enumerate(range(start, stop)):
            rng = np.random.default_rng([seed, b])
            m = rng.multinomial(n, freq)
            out[r, :n_pat] = m
            for p in range(n_pat):
                if m[p]:
                    out[r, n_pat + p] = members[p][rng.integers(0, len(members[p]), m[p])].sum()
        return out

    return _chunks(run, replicates, 100)


def _pair_sums(x: np.ndarray, y: np.ndarray, replicates: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    n, k = x.shape
    pairs = [(i, j) for i in range(k) for j in range(i, k)]
    z = np.column_stack([x[:, i] * x[:, j] for i, j in pairs] + [x[:, j] * y for j in range(k)])

    def run(start: int, stop: int) -> np.ndarray:
        w = np.empty((stop - start, n))
        for r, b in enumerate(range(start, stop)):
            w[r] = np.bincount(np.random.default_rng([seed, b]).integers(0, n, n), minlength=n)
        return w @ z

    sums = _chunks(run, replicates, max(1, min(50, 5_000_000 // max(n, 1))))
    xtx = np.zeros((replicates, k, k))
    for col, (i, j) in enumerate(pairs):
        xtx[:, i, j] = xtx[:, j, i] = sums[:, col]
    return xtx, sums[:, len(pairs):]


@dataclass(frozen=True)
class GateOptions:
    """How :func:`gate` fits and pairs: covariates, bootstrap resamples and seed, alpha, pairing checks.

    ``covariates``: None (an indicator per skill the treatment run selected), or a list of SQL expressions
    over the columns of ``paired_deltas`` (``p.skills``, ``p.task_id``, ...) or ``"skill:<id>"`` items, or a
    mapping name -> expression. ``allow_missing_checkpoint``: pair runs without ``model.checkpoint_id``.
    ``assume_aligned``: pair the runs without checking their identities (recorded in the result).
    """

    covariates: Sequence[str] | Mapping[str, str] | None = None
    bootstrap: int = 1000  # paired bootstrap resamples for the confidence intervals (0: none)
    alpha: float = 0.05  # significance level, in (0, 1)
    seed: int = 0  # bootstrap seed
    allow_missing_checkpoint: bool = False
    assume_aligned: bool = False


def gate(con_or_warehouse, bare_run: str, treatment_run: str,
         options: GateOptions | None = None) -> GateResult:
    """Fit the paired gate of ``treatment_run`` against the skill-free ``bare_run``.

    ``con_or_warehouse``: a connection from :func:`shopsim_wh.engines.db.connect` or a warehouse path (opened with
    :func:`shopsim_wh.engines.sandbox.connect`; pass such a connection too when the covariates are untrusted input).
    ``options``: the covariates, bootstrap, alpha, seed and pairing checks (:class:`GateOptions`; default: its
    defaults). Raises :class:`GateRefused` / :class:`GateDataError` with the reason.
    """
    o = options or GateOptions()
    covariates, bootstrap, alpha, seed = o.covariates, o.bootstrap, o.alpha, o.seed
    if not 0 < alpha < 1:
        raise GateError(f"alpha must be in (0, 1), not {alpha}")
    if bootstrap < 0:
        raise GateError(f"bootstrap must be >= 0, not {bootstrap}")
    from ..engines.db import as_connection
    from ..engines.sandbox import connect as sandbox_connect

    # a path opens the read-only sandbox: the covariates are SQL from the command line
    con = as_connection(con_or_warehouse, sandbox_connect)
    bare, treat, aligned = alignment(con, bare_run, treatment_run, o.allow_missing_checkpoint,
                                     o.assume_aligned)
    table = f"gate_pairs_{uuid.uuid4().hex[:12]}"
    cols = _pair_columns(con, bare_run, treatment_run, covariates)
    con.execute(f"CREATE TEMP TABLE {table} AS SELECT {cols} FROM paired_deltas(?, ?)", [bare_run, treatment_run])
    try:
        n_pairs = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        if n_pairs == 0:
            raise GateDataError(f"zero pairs: no job (task_id, sample_id) is completed in both {bare_run!r} and "
                                f"{treatment_run!r}")
        specs = _covariate_specs(con, table, treatment_run, covariates)
        fit = _fit(con, table, specs, bootstrap, alpha, seed)
    finally:
        con.execute(f"DROP TABLE IF EXISTS {table}")
    bare_scores = bare_score(con, bare_run)
    coefs, df, sigma2, dropped = fit
    helps = [c for c in coefs if c.beta > 0 and c.p < alpha and (c.ci_low is None or c.ci_low > 0)]
    hurts = [c for c in coefs if c.beta < 0 and (c.p < alpha or (c.ci_high is not None and c.ci_high < 0))]
    planned = treat.get("planned_episodes") or con.execute(
        "SELECT count(*) FROM episodes WHERE run_id = ?", [treatment_run]).fetchone()[0]
    notes = list(aligned.notes)
    if hurts:
        notes.append("hurts: " + ", ".join(c.name for c in hurts))
    if helps:
        notes.append("helps: " + ", ".join(c.name for c in helps))
    if dropped:
        notes.append(f"{dropped} singular bootstrap resample(s) dropped")
    return GateResult(
        bare_run=bare_run, treatment_run=treatment_run, n_pairs=n_pairs,
        coverage=n_pairs / planned if planned else 0.0, coefficients=coefs,
        decision="pass" if helps and not hurts else "fail", alpha=alpha, bootstrap=bootstrap, seed=seed, df=df,
        residual_se=math.sqrt(sigma2), bare_score=bare_scores, bootstrap_dropped=dropped,
        checkpoint_ids=(bare.get("checkpoint_id"), treat.get("checkpoint_id")), notes=notes, planned=int(planned),
        alignment=aligned.to_dict())


def _fit(con, table: str, specs, bootstrap: int, alpha: float, seed: int):
    names = [s[0] for s in specs]
    k = len(specs)
    n, xtx, xty, yty, rel, params = _xtx_from_sql(con, table, specs)
    if n <= k:
        raise GateDataError(f"{n} pair(s) for {k} covariate(s): the fit needs more pairs than covariates")
    cols = ", ".join(f"x{j}" for j in range(k))
    arrays = con.execute(f"{rel} SELECT {cols}, y FROM x ORDER BY task_id, sample_id", params).fetchnumpy()
    x = np.column_stack([np.asarray(arrays[f"x{j}"], dtype=float) for j in range(k)])
    y = np.asarray(arrays["y"], dtype=float)
    if np.all(y == y[0]):
        raise GateDataError(f"all {n} paired deltas equal {y[0]:g}: there is no variation to attribute to the "
                            "covariates (identical runs, or a degenerate reward)")
    _check_design(names, xtx)
    beta = np.linalg.solve(xtx, xty)
    rss = yty - float(beta @ xty)
    df = n - k
    if rss <= 1e-12 * yty:
        raise GateDataError("the covariates fit every delta exactly (zero residual variance): standard errors "
                            "and p-values are undefined")
    sigma2 = rss / df
    se = np.sqrt(sigma2 * np.diag(np.linalg.inv(xtx)))
    tstat = beta / se
    pvals = [t_two_sided_p(float(t), df) for t in tstat]
    lows = highs = [None] * k
    dropped = 0
    if bootstrap:
        boots, dropped = _bootstrap(x, y, bootstrap, seed)
        if len(boots) == 0:
            raise GateDataError("every bootstrap resample was singular; too few pairs for these covariates")
        q = np.quantile(boots, [alpha / 2, 1 - alpha / 2], axis=0)
        lows, highs = [float(v) for v in q[0]], [float(v) for v in q[1]]
    coefs = [Coefficient(names[j], float(beta[j]), float(se[j]), float(tstat[j]), float(pvals[j]), lows[j], highs[j])
             for j in range(k)]
    return coefs, df, sigma2, dropped


def bare_score(con, run_id: str) -> dict:
    """The run's own skill-free score: its `run_metrics` row (completed episodes only), unchanged by pairing."""
    cur = con.execute(
        "SELECT completed, failed, reward_mean, reward_sem, r_success_mean, r_strict_mean, planned "
        "FROM run_metrics WHERE run_id = ?", [run_id])
    cols = [d[0] for d in cur.description]
    out = dict(zip(cols, cur.fetchone(), strict=True))
    return {c: (None if isinstance(v, float) and math.isnan(v) else v) for c, v in out.items()}

