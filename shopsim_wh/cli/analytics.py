"""`gate`: the paired bare-vs-skill validation gate (exit code 0 pass, 1 fail)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..warehouse import default_root
from .options import WarehouseOpt


def gate(
    bare: Annotated[str, typer.Option("--bare", help="Run id of the skill-free run (an existing bare run can be reused).")],
    treatment: Annotated[str, typer.Option("--treatment", help="Run id of the (masked) skill run with the same jobs.")],
    covariates: Annotated[list[str] | None, typer.Option("--covariates", "-c", help="Covariate: `skill:<id>` or a SQL expression over paired_deltas; repeatable. Default: one indicator per selected skill.")] = None,
    bootstrap: Annotated[int, typer.Option(help="Paired bootstrap resamples for the confidence intervals.")] = 1000,
    alpha: Annotated[float, typer.Option(help="Significance level.")] = 0.05,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    allow_missing_checkpoint: Annotated[bool, typer.Option("--allow-missing-checkpoint", help="Pair runs without model.checkpoint_id.")] = False,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    warehouse: WarehouseOpt = None,
) -> None:
    """Fit R_i - B_i = C_i' beta + e_i over paired episodes and decide pass/fail."""
    from ..analytics.gate import gate as run_gate

    result = run_gate(default_root(warehouse), bare, treatment, covariates=covariates or None, bootstrap=bootstrap,
                      alpha=alpha, allow_missing_checkpoint=allow_missing_checkpoint, seed=seed)
    typer.echo(result.to_json() if fmt == "json" else result.to_table())
    raise typer.Exit(0 if result.passed else 1)


def register(app: typer.Typer) -> None:
    app.command()(gate)
