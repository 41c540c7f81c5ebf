"""`demo-data`: the synthetic warehouse that docs/sql_cookbook.md's queries name (synth-ckpt-a-bare, ...)."""

from __future__ import annotations

from typing import Annotated

import typer

from .options import OutputOpt, QuietOpt, WarehouseOpt, check_output, emit_json


def demo_data(
    warehouse: WarehouseOpt = None,
    episodes: Annotated[int, typer.Option(min=10, help="Shop episodes over the five runs (about 1 s per 1,000).")] = 5000,
    seed: Annotated[int, typer.Option(help="Generator seed.")] = 11,
    fmt: OutputOpt = "text",
    quiet: QuietOpt = False,
) -> None:
    """Write the cookbook's synthetic runs (two checkpoints, bare / skill / placebo, a train-split teacher run and
    coding-agent sessions) into a warehouse; running it again replaces them."""
    from ..demo.shop import WarehouseSpec, demo_runs, generate
    from ..store.warehouse import default_root

    check_output(fmt)
    root = default_root(warehouse)
    info = generate(root, episodes, WarehouseSpec(runs=demo_runs(), seed=seed, repeats=2, coding_episodes=6))
    run_ids = [r.run_id for r in info.runs] + ([info.coding_run] if info.coding_run else [])
    if fmt == "json":
        emit_json({"warehouse": str(root), "runs": run_ids, "episodes_per_run": info.episodes_per_run,
                   "tasks": info.tasks, "repeats": info.repeats})
    elif not quiet:
        typer.echo(f"wrote {len(run_ids)} synthetic runs ({info.episodes_per_run} episodes each: {info.tasks} tasks x "
                   f"{info.repeats}) -> warehouse {root}")
        typer.echo(f"  runs: {', '.join(run_ids)}")
        typer.echo("  try: shopsim-wh gate --bare synth-ckpt-a-bare --treatment synth-ckpt-a-skill"
                   + (f" -w {root}" if warehouse else ""))


def register(app: typer.Typer) -> None:
    app.command("demo-data")(demo_data)
