"""`gate`: the paired bare-vs-skill validation gate (exit code 0 pass, 1 fail); `compare`: bare vs equipped."""

from __future__ import annotations

from typing import Annotated

import typer

from . import exits
from .options import MemoryOpt, QuietOpt, TimeoutOpt, WarehouseOpt

RULES = ("significance", "strictly-positive-top-k")


def gate(
    bare: Annotated[str, typer.Option("--bare", help="Run id (or experiment name of one run) of the skill-free run (an existing bare run can be reused).")],
    treatment: Annotated[str, typer.Option("--treatment", help="Run id (or experiment name of one run) of the (masked) skill run with the same jobs.")],
    rule: Annotated[str, typer.Option("--rule", help="significance (t test + bootstrap CI, shopsim-wh's own) or strictly-positive-top-k (ShopSimRL's: positive reward coefficients, best first, at most --budget).")] = "significance",
    budget: Annotated[int, typer.Option(help="strictly-positive-top-k: most skills kept (ShopSimRL's active_skill_budget).")] = 10,
    columns: Annotated[str | None, typer.Option("--columns", help="strictly-positive-top-k: comma-separated mask columns in order (default: the selected skills by id).")] = None,
    covariates: Annotated[list[str] | None, typer.Option("--covariates", "-c", help="significance: covariate `skill:<id>` or a SQL expression over paired_deltas; repeatable. Default: one indicator per selected skill.")] = None,
    bootstrap: Annotated[int, typer.Option(help="significance: paired bootstrap resamples for the confidence intervals.")] = 1000,
    alpha: Annotated[float, typer.Option(help="significance: significance level.")] = 0.05,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    allow_missing_checkpoint: Annotated[bool, typer.Option("--allow-missing-checkpoint", help="Pair runs without model.checkpoint_id.")] = False,
    seed: Annotated[int, typer.Option(help="significance: bootstrap seed.")] = 0,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Decide without recording the decision in gate_results.")] = False,
    assume_aligned: Annotated[bool, typer.Option("--assume-aligned", help="Pair the runs without checking that they played the same jobs with the same model, prompt, runtime and environment (for runs whose identity is too thin to check); the output records that alignment was assumed.")] = False,
    warehouse: WarehouseOpt = None,
    quiet: QuietOpt = False,
    timeout: TimeoutOpt = None,
    memory_limit: MemoryOpt = None,
) -> None:
    """Fit R_i - B_i = C_i' beta + e_i over paired episodes and decide pass/fail (exit code 0 pass, 1 fail); the
    decision is recorded in table gate_results (unless --dry-run). The fit, with the --covariates' SQL, runs under
    the limits of a user query (--timeout, --memory-limit)."""
    from ..analytics import gate_log
    from ..engines.sandbox import Limits, limited
    from ..engines.sandbox import connect as sandboxed
    from ..store.warehouse import default_root

    if rule not in RULES:
        raise typer.BadParameter(f"--rule must be one of {', '.join(RULES)}, not {rule!r}")
    if fmt not in ("table", "json"):
        raise typer.BadParameter(f"--format must be table or json, not {fmt!r}")
    from ..analytics.gate import resolve_run

    root = default_root(warehouse)
    limits = Limits.resolve(timeout, memory_limit)
    con = sandboxed(root, limits=limits)  # --covariates are SQL from the command line: the views and nothing else
    bare, treatment = resolve_run(con, bare), resolve_run(con, treatment)  # an experiment name of one run works too
    if rule == "strictly-positive-top-k":
        cols = [c.strip() for c in columns.split(",") if c.strip()] if columns else None
        args = gate_log.arguments(bare, treatment, rule, budget=budget, columns=cols,
                                  allow_missing_checkpoint=allow_missing_checkpoint, assume_aligned=assume_aligned)
    else:
        args = gate_log.arguments(bare, treatment, rule, covariates=covariates or None, bootstrap=bootstrap,
                                  alpha=alpha, allow_missing_checkpoint=allow_missing_checkpoint, seed=seed,
                                  assume_aligned=assume_aligned)
    with limited(con, limits, what="the gate's fit"):
        res = gate_log.decide(con, args)
    if not quiet:
        typer.echo(res.to_json() if fmt == "json" else res.to_table())
    if not dry_run:
        from ..engines.catalog import refresh_existing

        gate_id = gate_log.record(root, con, res, args)
        refresh_existing(root)
        if not quiet:
            typer.echo(f"recorded as gate_results.gate_id = {gate_id}", err=True)
    raise typer.Exit(exits.OK if res.passed else exits.FAILED)


def compare(
    bare: Annotated[str, typer.Argument(help="Run id (or experiment name of one run) of the skill-free run.")],
    equipped: Annotated[str, typer.Argument(help="Run id (or experiment name of one run) of the run with one fixed skill bank, same jobs.")],
    samples: Annotated[int, typer.Option(help="Bootstrap resamples.")] = 10_000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed (hashed with each metric's name).")] = 20260901,
    confidence: Annotated[float, typer.Option(help="Confidence level of the interval.")] = 0.95,
    summation: Annotated[str, typer.Option(help="How a resample's sum is added: neumaier (CPython >= 3.12 sum(), what ShopSimRL's published numbers match) or sequential (CPython <= 3.11).")] = "neumaier",
    fmt: Annotated[str, typer.Option("--format", "-f", help="table or json (ShopSimRL's comparison.json shape).")] = "table",
    assume_aligned: Annotated[bool, typer.Option("--assume-aligned", help="Pair the runs without checking that they played the same jobs with the same model, prompt, runtime and environment (for runs whose identity is too thin to check); the output records that alignment was assumed.")] = False,
    warehouse: WarehouseOpt = None,
) -> None:
    """Equipped minus bare per metric, with a task-level paired percentile bootstrap interval."""
    import json

    from ..analytics.compare import CompareOptions, to_table
    from ..analytics.compare import compare as run_compare
    from ..store.warehouse import default_root

    options = CompareOptions(samples=samples, seed=seed, confidence_level=confidence, summation=summation,
                             assume_aligned=assume_aligned)
    res = run_compare(default_root(warehouse), bare, equipped, options)
    typer.echo(json.dumps(res, indent=2, allow_nan=False) if fmt == "json" else to_table(res))


def register(app: typer.Typer) -> None:
    app.command()(gate)
    app.command()(compare)
