"""`plan`, `run`, `summarize`."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from . import exits
from .options import ConfigArg, OutputOpt, QuietOpt, RunWarehouseOpt, WarehouseOpt, check_output, emit_json


def _plan_doc(cfg, p) -> dict:
    return {"experiment": p.run_id, "episodes": len(p.jobs), "split": cfg.tasks.split,
            "tasks": len({j.task_id for j in p.jobs}), "repeats": cfg.tasks.repeats,
            "first_tasks": [j.task_id for j in p.jobs[:8]],
            "split_manifest": {"version": p.manifest.version, "hash": p.manifest.content_hash},
            "model": {"name": cfg.model.name, "base_url": cfg.model.base_url, "checkpoint_id": cfg.model.checkpoint_id},
            "environment": {"url": cfg.environment.url, "dialect": cfg.environment.dialect,
                            "persona": cfg.environment.persona},
            "runtime": {"max_steps": cfg.runtime.max_steps, "send_seed": cfg.model.send_seed,
                        "tool_choice": cfg.model.tool_choice, "concurrency": cfg.runtime.concurrency,
                        "executor": cfg.runtime.executor, "ray_address": cfg.runtime.ray_address,
                        "ray_workers": cfg.runtime.ray_workers},
            "prompt": {"version": p.prompts.version, "hash": p.prompts.prompt_hash},
            "skills": {"bank_hash": p.fingerprint_fields["skill_bank_hash"], "mask_rate": cfg.skills.mask_rate},
            "fingerprint": p.fingerprint}


def _executor(cfg) -> str:
    r = cfg.runtime
    if r.executor == "local":
        return f"local ({r.concurrency} episodes in flight)"
    return (f"ray at {r.ray_address or 'a local Ray'}: {r.ray_workers or 'one per cluster CPU'} worker(s), "
            f"{r.concurrency} episodes in flight each")


def plan(config: ConfigArg, fmt: OutputOpt = "text") -> None:
    """Validate a config and show what `run` would do, without calling any server."""
    from ..core.config import load_config, public_url
    from ..rollout import runner

    check_output(fmt)
    cfg = load_config(config)
    runner.check_config_usable(cfg)
    p = runner.plan(cfg)
    if fmt == "json":
        emit_json(_plan_doc(cfg, p))
        return
    first = ", ".join(str(j.task_id) for j in p.jobs[:8])
    typer.echo(f"experiment     {p.run_id}")
    typer.echo(f"episodes       {len(p.jobs)} ({cfg.tasks.split}: {len({j.task_id for j in p.jobs})} tasks x {cfg.tasks.repeats} repeats)")
    typer.echo(f"first tasks    {first}{' ...' if len(p.jobs) > 8 else ''}")
    typer.echo(f"split manifest {p.manifest.version} ({p.manifest.content_hash[:16]})")
    typer.echo(f"model          {cfg.model.name} @ {public_url(cfg.model.base_url)} (checkpoint {cfg.model.checkpoint_id})")
    typer.echo(f"environment    {public_url(cfg.environment.url)} ({cfg.environment.dialect}, persona {cfg.environment.persona})")
    typer.echo(f"runtime        {cfg.runtime.max_steps} model turns, send_seed {cfg.model.send_seed}, "
               f"tool_choice {cfg.model.tool_choice}")
    typer.echo(f"executor       {_executor(cfg)}")
    typer.echo(f"prompt         {p.prompts.version} hash {p.prompts.prompt_hash}")
    typer.echo(f"skills         {p.fingerprint_fields['skill_bank_hash'] or 'none'} (mask rate {cfg.skills.mask_rate})")
    typer.echo(f"fingerprint    {p.fingerprint}")


def _progress(cfg, quiet: bool, bar_wanted: bool = True):
    """(context manager, on_start, progress) for runner.run: a rich bar with rate and ETA on stderr."""
    from contextlib import nullcontext

    if quiet:
        return nullcontext(), None, None
    if not bar_wanted:
        def note(todo: int, skipped: int) -> None:
            if skipped:
                typer.echo(f"resuming: {skipped} episode(s) already completed are skipped", err=True)

        return nullcontext(), note, None
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
                   TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[stats]}"), TimeElapsedColumn(),
                   TimeRemainingColumn(), console=Console(stderr=True), transient=False)
    state = {"task": None, "ok": 0, "failed": 0, "reward": 0.0}

    def on_start(todo: int, skipped: int) -> None:
        if skipped:
            bar.console.print(f"resuming: {skipped} episode(s) already completed are skipped")
        if todo:  # a finished run has nothing to do: no empty 0/0 bar
            state["task"] = bar.add_task(cfg.experiment.name, total=todo, stats="", rate="")

    def progress(rec) -> None:
        if rec.completed:
            state["ok"] += 1
            state["reward"] += rec.episode.get("reward") or 0.0
        else:
            state["failed"] += 1
        mean = state["reward"] / state["ok"] if state["ok"] else 0.0
        task = bar.tasks[0] if bar.tasks else None
        rate = f"{task.speed:.1f} ep/s" if task is not None and task.speed else ""
        bar.update(state["task"], advance=1, rate=rate, stats=f"reward {mean:.3f} failed {state['failed']}")

    return bar, on_start, progress


def _unreachable_hint(cfg, url: str) -> str:
    model = url == cfg.model.base_url
    key = "model.base_url" if model else "environment.url"
    probe = f"curl {url.rstrip('/')}/models" if model else \
        f"curl {url.rstrip('/')}/healthz" if cfg.environment.dialect == "shop_env" else None
    return (f"no connection to the {'model' if model else 'environment'} server at {url} ({key}): check that it is "
            f"running and listening there{f' ({probe})' if probe else ''}, or fix {key} in the config; then run "
            "the same command again (completed episodes are kept)")


def run(
    config: ConfigArg,
    warehouse: RunWarehouseOpt = None,
    concurrency: Annotated[int | None, typer.Option(min=1, help="Episodes in flight (overrides runtime.concurrency).")] = None,
    allow_test: Annotated[bool, typer.Option("--allow-test", help="Allow the test split (recorded on the run).")] = False,
    fmt: OutputOpt = "text",
    quiet: QuietOpt = False,
) -> None:
    """Run (or resume) an experiment and land every step in the warehouse.

    Exits 1 when episodes failed (run it again to retry them), 2 when the model server refused the requests
    (401/403/400/404/422: fix the key or the config), 3 when a server could not be reached."""
    from ..analytics.summary import format_summary, summarize
    from ..core.config import load_config
    from ..engines.db import connect
    from ..rollout import runner
    from ..store.warehouse import default_root

    check_output(fmt)
    cfg = load_config(config)
    runner.check_config_usable(cfg)
    bar, on_start, progress = _progress(cfg, quiet, bar_wanted=fmt != "json" or sys.stderr.isatty())

    def on_signal(name: str, in_flight: int) -> None:
        typer.secho(f"{name}: starting nothing new, finishing {in_flight} episode(s) in flight "
                    "(send it again to abandon them)", fg="yellow", err=True)

    with bar:
        result = runner.run(cfg, warehouse, concurrency, allow_test, progress=progress, on_start=on_start,
                            on_signal=on_signal)
    root = default_root(warehouse, cfg.output.warehouse)
    if result.interrupted:
        typer.secho(f"interrupted by {result.interrupted}: {result.committed} episode(s) committed by this invocation; "
                    "run the same command again to resume "
                    f"(`shopsim-wh check -w {root}` verifies the warehouse)", fg="yellow", err=True)
        raise typer.Exit(result.exit_code)
    _refresh_catalogs(root, cfg.output.catalog, quiet or fmt == "json")
    code = exits.UNREACHABLE if result.unreachable else exits.USAGE if result.fatal else \
        exits.FAILED if result.failed else exits.OK
    hints = [_unreachable_hint(cfg, url) for url in result.unreachable]
    rows = summarize(connect(root), cfg.experiment.name)
    if fmt == "json":
        emit_json({"run_id": result.run_id, "warehouse": str(root), "planned": result.planned,
                   "attempted": result.attempted, "completed": result.completed, "failed": result.failed,
                   "skipped": result.skipped, "seconds": round(result.seconds, 3), "exit_code": code,
                   "stopped_early": result.fatal, "unreachable": result.unreachable, "failures": result.failures,
                   "leases": result.leases, "summary": rows[0] if rows else None})
    elif not quiet:
        typer.echo(f"\n{result.attempted} episode(s) run in {result.seconds:.1f} s "
                   f"({result.completed} completed, {result.failed} failed, {result.skipped} skipped as already done) "
                   f"-> warehouse {root}")
        for line in result.failures[:0 if result.unreachable else 5]:
            typer.secho(f"  failed {line}", fg="yellow")
        typer.echo(format_summary(rows))
    if result.fatal and not result.unreachable:
        typer.secho(f"error: run stopped early: {result.fatal}", fg="red", err=True)
    if result.unreachable and result.attempted < result.planned - result.skipped:
        typer.echo(f"stopped after {result.attempted} episode(s): nothing completed", err=True)
    for hint in hints:
        typer.secho(f"error: {hint}", fg="red", err=True)
    if held := result.leases.get("lost", 0) + result.leases.get("unreleased", 0):  # lost: 0 once reclaimed
        typer.secho(f"warning: up to {held} environment slot(s) may still be leased on the server (reset answers lost "
                    "in transit, or releases it refused); send release_all or restart the server before the next run, "
                    "or set environment.exclusive: true when this run is the server's only client "
                    "(docs/reliability.md)", fg="yellow", err=True)
    if result.failed and not result.unreachable:
        typer.echo(f"{result.failed} episode(s) failed; they are kept in `failures` (shopsim-wh sql \"select * from "
                   "failures\"); run the same command again to retry them", err=True)
    raise typer.Exit(code)


def _refresh_catalogs(root, configured: str | None, quiet: bool = False) -> None:
    """Rebuild output.catalog and the warehouse's own catalog.duckdb (when it exists) after a commit."""
    from ..engines.catalog import refresh_existing
    from ..store.warehouse import Warehouse

    if Warehouse(root).exists():
        for info in refresh_existing(root, configured):
            if not quiet:
                typer.echo(f"catalog {info.path} refreshed (snapshot {info.snapshot_version})", err=True)


def summarize_cmd(
    warehouse: WarehouseOpt = None,
    experiment: Annotated[str | None, typer.Option(help="Only this experiment (or run id).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print each run's figures in ShopSimRL's summary.json "
                                          "shape (shopsimrl-eval-summary-v2), keyed by run id.")] = False,
    fmt: OutputOpt = "text",
) -> None:
    """Coverage, failures, reward mean and SEM, r_* means, steps, error rates, tokens and time per run.

    `reward` is the server's top-level reward (r_strict for shop_env runs, see runs.primary_reward); the figures
    are computed by the rules of ShopSimRL's summary.json (view eval_summary). `--format json` prints
    {"runs": [one object per run with every figure]}."""
    from ..analytics.summary import eval_summaries, format_summary, summarize
    from ..core.errors import WarehouseError
    from ..engines.db import connect
    from ..store.warehouse import Warehouse, default_root

    check_output(fmt)
    root = default_root(warehouse)
    if not Warehouse(root).exists():
        raise WarehouseError(f"no warehouse at {root}; pass --warehouse DIR or run `shopsim-wh run CONFIG` first")
    if as_json:
        emit_json(eval_summaries(connect(root), experiment))
        return
    rows = summarize(connect(root), experiment)
    if fmt == "json":
        emit_json({"runs": rows})
        return
    typer.echo(format_summary(rows))


def register(app: typer.Typer) -> None:
    app.command()(plan)
    app.command()(run)
    app.command("summarize")(summarize_cmd)
