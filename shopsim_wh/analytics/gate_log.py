"""Gate decisions as data: every ``shopsim-wh gate`` result becomes a ``gate_results`` row (schema.py).

:func:`decide` runs either rule (``significance``: :func:`.gate.gate`; ``strictly-positive-top-k``:
:func:`.contributions.contributions`) from keyword arguments that are plain JSON values, so the row's
``arguments`` column is enough to run the same decision again (:func:`rerun`). :func:`record` commits the row
through the warehouse writer, partitioned under the treatment run (lineage: ``runs rm`` of that run drops its
decisions), with a ``loads`` row (command ``gate``) whose ``load_id`` is the ``gate_id``.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime

from .. import __version__
from ..core.errors import ShopsimError
from .gate import GateError

RULES = ("significance", "strictly-positive-top-k")
# the keyword arguments each rule takes (with their defaults, which are recorded too)
RULE_ARGS = {
    "significance": {"covariates": None, "bootstrap": 1000, "alpha": 0.05, "seed": 0,
                     "allow_missing_checkpoint": False, "assume_aligned": False},
    "strictly-positive-top-k": {"budget": 10, "columns": None, "allow_missing_checkpoint": False,
                                "assume_aligned": False},
}


def arguments(bare_run: str, treatment_run: str, rule: str = "significance", **kwargs) -> dict:
    """The complete argument record of one decision (defaults filled in): what ``gate_results.arguments`` holds."""
    if rule not in RULES:
        raise GateError(f"unknown gate rule {rule!r}; use one of {', '.join(RULES)}")
    unknown = set(kwargs) - set(RULE_ARGS[rule])
    if unknown:
        raise GateError(f"rule {rule!r} takes no argument(s) {', '.join(sorted(unknown))}; "
                        f"it takes {', '.join(RULE_ARGS[rule])}")
    out = {"rule": rule, "bare_run": bare_run, "treatment_run": treatment_run, **RULE_ARGS[rule]}
    out.update({k: v for k, v in kwargs.items() if v is not None or k == "covariates"})
    json.dumps(out)  # every argument must be storable; a non-JSON value fails here, before any work
    return out


def decide(con_or_warehouse, args: dict):
    """Run the decision an :func:`arguments` record describes; returns a GateResult or a ContributionResult."""
    kw = {k: v for k, v in args.items() if k not in ("rule", "bare_run", "treatment_run")}
    if args["rule"] == "strictly-positive-top-k":
        from .contributions import ContributionOptions, contributions

        return contributions(con_or_warehouse, args["bare_run"], args["treatment_run"],
                             ContributionOptions(**kw))
    from .gate import GateOptions, gate

    return gate(con_or_warehouse, args["bare_run"], args["treatment_run"], GateOptions(**kw))


def coefficient_rows(result) -> list[dict]:
    if hasattr(result, "coefficients"):
        return [c.to_dict() for c in result.coefficients]
    return [{"name": r["chunk_id"], "beta": r["coefficient"], "se": None, "t": None, "p": None, "ci_low": None,
             "ci_high": None, "rank": r["rank"], "status": r["status"],
             "auxiliary": r["auxiliary_coefficients"]} for r in result.contributions]


def gate_row(con, result, args: dict, gate_id: str | None = None, decided_at: datetime | None = None) -> dict:
    """The ``gate_results`` row of a decision (``con``: a warehouse connection, for the runs' fingerprints)."""
    runs = {r[0]: r[1:] for r in con.execute(
        "SELECT run_id, fingerprint, checkpoint_id FROM runs WHERE run_id IN (?, ?)",
        [result.bare_run, result.treatment_run]).fetchall()}
    bare, treat = runs.get(result.bare_run, (None, None)), runs.get(result.treatment_run, (None, None))
    significance = args["rule"] == "significance"
    coefs = coefficient_rows(result)
    if significance:
        selected = [c.name for c in result.coefficients if c.beta > 0 and c.p < result.alpha
                    and (c.ci_low is None or c.ci_low > 0)]
        text, planned = result.rule, result.planned
        full = result.to_json(full=True)
    else:
        from .contributions import RULE

        selected, planned, full = result.selected, result.planned, result.to_json()
        text = (f"{RULE}: keep the strictly positive reward coefficients, best first (ties by id), at most "
                f"{result.budget}; pass iff at least one is kept")
    gate_id = gate_id or uuid.uuid4().hex
    return {
        "gate_id": gate_id, "decided_at": decided_at or datetime.now(UTC), "rule": args["rule"], "rule_text": text,
        "decision": result.decision, "bare_run": result.bare_run, "treatment_run": result.treatment_run,
        "bare_fingerprint": bare[0], "treatment_fingerprint": treat[0],
        "bare_checkpoint_id": bare[1], "treatment_checkpoint_id": treat[1],
        "covariates": json.dumps(args.get("covariates") if significance else args.get("columns")),
        "covariate_names": json.dumps([c["name"] for c in coefs]), "coefficients": json.dumps(coefs, allow_nan=False),
        "n_pairs": result.n_pairs, "planned": planned,
        "coverage": result.coverage if significance else (result.n_pairs / planned if planned else None),
        "df": result.df if significance else None, "residual_se": result.residual_se if significance else None,
        "alpha": result.alpha if significance else None, "bootstrap": result.bootstrap if significance else None,
        "bootstrap_seed": result.seed if significance else None,
        "bootstrap_dropped": result.bootstrap_dropped if significance else None,
        "budget": None if significance else result.budget, "selected": json.dumps(selected),
        "allow_missing_checkpoint": bool(args.get("allow_missing_checkpoint")),
        "bare_score": json.dumps(result.bare_score, allow_nan=False, default=str),
        "arguments": json.dumps(args), "result": full, "notes": json.dumps(result.notes),
        "tool_version": __version__, "load_id": gate_id,
    }


def record(root: str | os.PathLike, con, result, args: dict) -> str:
    """Commit the decision's ``gate_results`` row (and its ``loads`` row); returns the ``gate_id``."""
    from ..core.schema import to_arrow
    from ..store.warehouse import Warehouse

    row = gate_row(con, result, args)
    load = {"command": "gate", "started_at": row["decided_at"], "finished_at": datetime.now(UTC),
            "episodes_written": 0, "status": "complete", "tool_version": __version__, "load_id": row["gate_id"]}
    with Warehouse(root).writer() as w:
        w.commit([("gate_results", result.treatment_run, to_arrow("gate_results", [row])),
                  ("loads", result.treatment_run, to_arrow("loads", [load]))])
    return row["gate_id"]


class GateRecordError(ShopsimError):
    """A recorded decision cannot be found or re-run."""


def recorded(con, gate_id: str) -> dict:
    cur = con.execute("SELECT * FROM gate_results WHERE gate_id = ?", [gate_id])
    names = [d[0] for d in cur.description]
    rows = cur.fetchall()
    if not rows:
        known = [r[0] for r in con.execute("SELECT gate_id FROM gate_results ORDER BY decided_at DESC LIMIT 5").fetchall()]
        raise GateRecordError(f"no gate decision {gate_id!r} in gate_results; recent ones: {', '.join(known) or '(none)'}"
                              " (shopsim-wh sql \"select gate_id, decided_at, decision from gate_results\")")
    return dict(zip(names, rows[0], strict=True))


def rerun(con_or_warehouse, gate_id: str):
    """Re-run a recorded decision from its row: ``(row, result)``. Refuses when either run's fingerprint changed
    since (the runs were replaced: the same arguments would gate other data)."""
    from ..engines.db import as_connection

    con = as_connection(con_or_warehouse)
    row = recorded(con, gate_id)
    args = json.loads(row["arguments"])
    now = dict(con.execute("SELECT run_id, fingerprint FROM runs WHERE run_id IN (?, ?)",
                           [row["bare_run"], row["treatment_run"]]).fetchall())
    for run, then in ((row["bare_run"], row["bare_fingerprint"]), (row["treatment_run"], row["treatment_fingerprint"])):
        if now.get(run) != then:
            raise GateRecordError(f"run {run!r} has fingerprint {now.get(run)!r} now, {then!r} when gate {gate_id} ran: "
                                  "the run was replaced or removed, so re-running would gate other data")
    return row, decide(con, args)
