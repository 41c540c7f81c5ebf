"""`plan`, `run`, `summarize`."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from .. import runner
from ..config import load_config
from ..db import connect
from ..summary import eval_summaries, format_summary, summarize
from ..warehouse import Warehouse, default_root
from .options import ConfigArg, WarehouseOpt


def plan(config: ConfigArg) -> None:
    """Validate a config and show what `run` would do, without calling any server."""
    cfg = load_config(config)
    runner.check_config_usable(cfg)
    p = runner.plan(cfg)
    first = ", ".join(str(j.task_id) for j in p.jobs[:8])
    typer.echo(f"experiment     {p.run_id}")
    typer.echo(f"episodes       {len(p.jobs)} ({cfg.tasks.split}: {len({j.task_id for j in p.jobs})} tasks x {cfg.tasks.repeats} repeats)")
    typer.echo(f"first tasks    {first}{' ...' if len(p.jobs) > 8 else ''}")
    typer.echo(f"split manifest {p.manifest.version} ({p.manifest.content_hash[:16]})")
    typer.echo(f"model          {cfg.model.name} @ {cfg.model.base_url} (checkpoint {cfg.model.checkpoint_id})")
    typer.echo(f"environment    {cfg.environment.url} ({cfg.environment.dialect}, persona {cfg.environment.persona})")
    typer.echo(f"runtime        {cfg.runtime.max_steps} model turns, send_seed {cfg.model.send_seed}, "
               f"tool_choice {cfg.model.tool_choice}")
    typer.echo(f"prompt         {p.prompts.version} hash {p.prompts.prompt_hash}")
    typer.echo(f"skills         {p.fingerprint_fields['skill_bank_hash'] or 'none'} (mask rate {cfg.skills.mask_rate})")
    typer.echo(f"fingerprint    {p.fingerprint}")


def run(
    config: ConfigArg,
    warehouse: WarehouseOpt = None,
    concurrency: Annotated[int | None, typer.Option(min=1, help="Episodes in flight (overrides runtime.concurrency).")] = None,
    allow_test: Annotated[bool, typer.Option("--allow-test", help="Allow the test split (recorded on the run).")] = False,
) -> None:
    """Run (or resume) an experiment and land every step in the warehouse."""
    cfg = load_config(config)
    runner.check_config_usable(cfg)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[stats]}"),
                  TimeElapsedColumn(), TimeRemainingColumn(), transient=False) as bar:
        task = None
        counts = {"ok": 0, "failed": 0, "reward": 0.0}

        def on_start(todo: int, skipped: int) -> None:
            nonlocal task
            task = bar.add_task(cfg.experiment.name, total=todo, stats="")
            if skipped:
                bar.console.print(f"resuming: {skipped} episode(s) already completed are skipped")

        def progress(rec) -> None:
            if rec.completed:
                counts["ok"] += 1
                counts["reward"] += rec.episode.get("reward") or 0.0
            else:
                counts["failed"] += 1
            mean = counts["reward"] / counts["ok"] if counts["ok"] else 0.0
            bar.update(task, advance=1, stats=f"reward {mean:.3f} failed {counts['failed']}")

        result = runner.run(cfg, warehouse, concurrency, allow_test, progress=progress, on_start=on_start)
    root = default_root(warehouse, cfg.output.warehouse)
    _refresh_catalogs(root, cfg.output.catalog)
    typer.echo(f"\n{result.attempted} episode(s) run in {result.seconds:.1f} s "
               f"({result.completed} completed, {result.failed} failed, {result.skipped} skipped as already done) "
               f"-> warehouse {root}")
    for line in result.failures[:5]:
        typer.secho(f"  failed {line}", fg="yellow")
    if result.fatal:
        typer.secho(f"run stopped early: {result.fatal}", fg="red", err=True)
        raise typer.Exit(1)
    if result.failed:
        typer.echo("  failed episodes are kept in `failures`; run the same command again to retry them")
    typer.echo(format_summary(summarize(connect(root), cfg.experiment.name)))


def _refresh_catalogs(root, configured: str | None) -> None:
    """Rebuild output.catalog and the warehouse's own catalog.duckdb (when it exists) after a commit."""
    from ..catalog import refresh_existing

    if Warehouse(root).exists():
        for info in refresh_existing(root, configured):
            typer.echo(f"catalog {info.path} refreshed (snapshot {info.snapshot_version})", err=True)


def summarize_cmd(
    warehouse: WarehouseOpt = None,
    experiment: Annotated[str | None, typer.Option(help="Only this experiment (or run id).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print each run's figures in ShopSimRL's summary.json "
                                          "shape (shopsimrl-eval-summary-v2), keyed by run id.")] = False,
) -> None:
    """Coverage, failures, reward mean and SEM, r_* means, steps, error rates, tokens and time per run.

    `reward` is the server's top-level reward (r_strict for shop_env runs, see runs.primary_reward); the figures
    are computed by the rules of ShopSimRL's summary.json (view eval_summary)."""
    root = default_root(warehouse)
    if not Warehouse(root).exists():
        raise typer.BadParameter(f"no warehouse at {root}; pass --warehouse or run `shopsim-wh run CONFIG` first")
    if as_json:
        typer.echo(json.dumps(eval_summaries(connect(root), experiment), ensure_ascii=False, indent=2))
        return
    typer.echo(format_summary(summarize(connect(root), experiment)))


def register(app: typer.Typer) -> None:
    app.command()(plan)
    app.command()(run)
    app.command("summarize")(summarize_cmd)
