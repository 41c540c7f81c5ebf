"""`vacuum`: delete files no snapshot needs (replaced past the grace period, orphans of crashed commits)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from .options import WarehouseOpt


def vacuum(
    warehouse: WarehouseOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Delete them whatever their age (only when nothing reads an older snapshot).")] = False,
    grace: Annotated[float, typer.Option("--grace", help="Seconds a replaced file is kept for readers of older snapshots.")] = 300.0,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing on success.")] = False,
) -> None:
    """Delete replaced files older than the grace period and orphans left by crashed commits."""
    from ..store.maintenance import vacuum as run_vacuum
    from ..store.warehouse import default_root

    res = run_vacuum(default_root(warehouse), force=force, grace_s=grace)
    if fmt == "json":
        typer.echo(json.dumps(res))
    elif not quiet:
        typer.echo(f"removed {res['removed_files']} file(s), {res['removed_bytes'] / 1e6:.2f} MB; "
                   f"{res['waiting_files']} younger than {grace:.0f} s wait for a later vacuum")


def register(app: typer.Typer) -> None:
    app.command()(vacuum)
