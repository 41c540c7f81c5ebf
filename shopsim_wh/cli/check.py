"""`check`: the integrity checker (acknowledged vs stored vs planned), see docs/durability.md."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from .options import WarehouseOpt


def check(
    warehouse: WarehouseOpt = None,
    plan: Annotated[str | None, typer.Option("--plan", help="Runner config whose planned episodes the run must hold "
                                             "(unexpected and missing episodes are counted against it).")] = None,
    against: Annotated[str | None, typer.Option("--against", help="An uninterrupted warehouse of the same config and "
                                                "seeds: compare the run's canonical rows (needs --plan).")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="text or json (one JSON object on stdout).")] = "text",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing; the exit code says it.")] = False,
) -> None:
    """Lost, duplicated, unexpected and partial episodes (all must be 0); exit 1 when any is found."""
    from ..core.errors import ShopsimError
    from ..ops.check import check as run_check
    from ..store.warehouse import Warehouse, default_root

    root = default_root(warehouse)
    if not Warehouse(root).exists():
        raise ShopsimError(f"no warehouse at {root}; pass --warehouse DIR (a directory holding _catalog/CURRENT)")
    if against is not None and plan is None:
        raise ShopsimError("--against compares one run's rows: pass --plan CONFIG too (it names the run)")
    report = run_check(root, plan, against)
    if not quiet:
        if fmt == "json":
            typer.echo(json.dumps(report.as_dict(), default=str))
        else:
            typer.echo(report.summary())
            for name in ("lost", "duplicated", "unexpected", "partial", "unreadable"):
                for item in getattr(report, name)[:10]:
                    typer.secho(f"  {name}: {item}", fg="red", err=True)
    if not report.ok:
        if not quiet:
            typer.secho("integrity check failed: keep this warehouse as it is and report it with the output above "
                        "(`shopsim-wh check --format json`)", fg="red", err=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(check)
