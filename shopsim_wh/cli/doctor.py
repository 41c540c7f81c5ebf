"""`doctor`: check a warehouse; every finding comes with the command that fixes it (exit 1 on findings)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from .options import WarehouseOpt


def doctor(
    warehouse: WarehouseOpt = None,
    config: Annotated[str | None, typer.Option("--config", "-c", help="Also check the servers this config names (and its output.warehouse / output.catalog).")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only findings.")] = False,
) -> None:
    """Snapshot, files (presence, size, schema, rows), orphans, stale locks, duplicate episodes, schema versions,
    catalog freshness and (with --config) server reachability."""
    from ..ops.doctor import doctor as run_doctor
    from ..store.warehouse import default_root

    cfg = None
    if config:
        from ..core.config import load_config

        cfg = load_config(config)
    root = default_root(warehouse, cfg.output.warehouse if cfg else None)
    findings = run_doctor(root, cfg)
    if fmt == "json":
        typer.echo(json.dumps({"warehouse": str(root), "ok": not findings,
                               "findings": [f.as_dict() for f in findings]}))
    else:
        for f in findings:
            typer.secho(f"{f.code:18} {f.message}", fg="yellow")
            typer.echo(f"{'':18} fix: {f.fix}")
        if not findings and not quiet:
            typer.echo(f"warehouse {root}: no findings")
        elif findings:
            typer.echo(f"{len(findings)} finding(s) in warehouse {root}", err=True)
    raise typer.Exit(1 if findings else 0)


def register(app: typer.Typer) -> None:
    app.command()(doctor)
