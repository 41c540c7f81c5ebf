"""`report`: one self-contained HTML file with the warehouse's charts (offline; docs/report.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from .options import WarehouseOpt


def _parse_gate(value: str | None) -> tuple[str, str] | None:
    if value is None:
        return None
    bare, sep, treatment = value.partition(":")
    if not sep or not bare or not treatment:
        raise typer.BadParameter(f"--gate takes BARE_RUN:TREATMENT_RUN (e.g. demo:demo-skill), not {value!r}")
    return bare, treatment


def _parse_prices(values: list[str] | None) -> dict[str, tuple[float, float]]:
    out = {}
    for v in values or []:
        model, sep, rest = v.rpartition("=")
        try:
            usd_in, usd_out = (float(x) for x in rest.split(","))
        except ValueError:
            sep = ""
        if not sep or not model:
            raise typer.BadParameter(f"--price takes MODEL=USD_IN,USD_OUT per million tokens (e.g. "
                                     f"my-model=0.5,1.5), not {v!r}")
        out[model] = (usd_in, usd_out)
    return out


def report(
    out: Annotated[Path, typer.Option("--out", "-o", help="HTML file to write (replaced atomically).")] = Path("report.html"),
    runs: Annotated[list[str] | None, typer.Option("--runs", help="Run ids to cover (repeatable or comma-separated; default: every run).")] = None,
    experiment: Annotated[str | None, typer.Option(help="Cover every run of this experiment (runs.experiment).")] = None,
    gate: Annotated[str | None, typer.Option("--gate", help="BARE:TREATMENT: add the paired gate's estimates and per-task deltas.")] = None,
    price: Annotated[list[str] | None, typer.Option("--price", help="MODEL=USD_IN,USD_OUT per million tokens, for cost (repeatable; adds to the model_prices view).")] = None,
    bootstrap: Annotated[int, typer.Option(min=0, help="Gate: paired bootstrap resamples for the intervals.")] = 1000,
    seed: Annotated[int, typer.Option(help="Gate: bootstrap seed.")] = 0,
    fmt: Annotated[str, typer.Option("--format", "-f", help="text or json (one JSON summary object on stdout).")] = "text",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar; with text, print only the output path.")] = False,
    group_by: Annotated[str, typer.Option("--group-by", help="run: every run its own bar (default); checkpoint: pool the runs of each checkpoint (runs.checkpoint_id) into one.")] = "run",
    exports: Annotated[list[str] | None, typer.Option("--exports", help="Directory of `shopsim-wh export` shards (manifests at any depth; repeatable): list the exports of these runs.")] = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Write an offline HTML report with one section per domain (shop runs, coding-agent sessions, other traces;
    never on shared axes): run table, reward and success with SEM per run, r_* components, endings, error codes
    by step, step and token histograms, cost, pass@k, tools and sub-agents; the paired gate with --gate.

    Exit codes: 0 written (whatever the gate decided: `shopsim-wh gate` is the pass/fail check), 2 bad input."""
    if fmt not in ("text", "json"):
        raise typer.BadParameter(f"--format must be text or json, not {fmt!r}")
    if group_by not in ("run", "checkpoint"):
        raise typer.BadParameter(f"--group-by takes run or checkpoint, not {group_by!r}")
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from ..core.errors import ShopsimError
    from ..engines.db import connect
    from ..report import ReportOptions, write_report
    from ..store.warehouse import Warehouse, default_root, location

    root = default_root(warehouse)
    if not Warehouse(root).exists():
        raise ShopsimError(f"no warehouse at {root}; pass --warehouse or run `shopsim-wh run configs/demo.yaml` first")
    run_ids = [r.strip() for item in runs or [] for r in item.split(",") if r.strip()] or None
    options = ReportOptions(runs=run_ids, experiment=experiment, gate=_parse_gate(gate),
                            prices=_parse_prices(price), bootstrap=bootstrap, seed=seed, exports=exports,
                            group_by=group_by)
    with Progress(TextColumn("[bold]report[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True),
                  disable=quiet, transient=True) as bar:
        task = bar.add_task("connecting", total=None)

        def progress(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=label)

        summary = write_report(connect(root), out, options, warehouse=location(root), progress=progress)
    if fmt == "json":
        sys.stdout.write(json.dumps(summary, allow_nan=False, default=str) + "\n")
        return
    if quiet:
        typer.echo(summary["out"])
        return
    gate_line = ""
    if summary["gate"]:
        g = summary["gate"]
        gate_line = f"; gate {g['bare_run']} vs {g['treatment_run']}: {g.get('decision') or 'refused: ' + g['error']}"
    domains = ", ".join(f"{d} {len(r)}" for d, r in summary["domains"].items())
    typer.echo(f"wrote {summary['out']} ({summary['bytes'] / 1e6:.2f} MB, {len(summary['charts'])} charts over "
               f"{len(summary['runs'])} run(s): {domains}; series per {summary['group_by']}{gate_line}) in "
               f"{summary['seconds']:.1f} s; open it in any browser, no network needed")


def register(app: typer.Typer) -> None:
    app.command()(report)
