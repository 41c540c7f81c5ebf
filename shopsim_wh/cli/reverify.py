"""`reverify --run RUN`: re-score a run's stored episodes with the current reward and labelling code (docs/reverify.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from .options import OutputOpt, WarehouseOpt, check_output, emit_json


def reverify(
    run: Annotated[str, typer.Option("--run", help="Run id (or the experiment name of one run) to re-score.")],
    primary_reward: Annotated[str | None, typer.Option(
        "--primary-reward", help="The reward component `reward` means in the new version: r_strict (shop_env, the "
        "embedded server, ShopSimRL), r_loose (pi-slime) or r_success; default the run's own runs.primary_reward.")] = None,
    tag: Annotated[str | None, typer.Option("--tag", help="A name for this labels version (part of its id).")] = None,
    warehouse: WarehouseOpt = None,
    fmt: OutputOpt = "text",
) -> None:
    """Re-score a run's stored episodes without running the policy: replay their actions in the embedded environment
    (runs that can be replayed) and recompute the reward, every r_* component and the rule labels with the current
    code, stored as a new labels version in table episode_labels. A version the run already has is skipped. Views
    episode_labels_versions and episode_labels_compare compare versions on the same trajectories."""
    from ..analytics.reverify import ReverifyOptions
    from ..analytics.reverify import reverify as run_reverify
    from ..store.warehouse import default_root

    check_output(fmt)
    res = run_reverify(default_root(warehouse), run, ReverifyOptions(primary_reward=primary_reward, tag=tag))
    if fmt == "json":
        emit_json(res.to_dict())
        return
    typer.echo(_text(res))


def _num(v) -> str:
    return "-" if v is None else f"{v:.4f}"


def _text(res) -> str:
    head = (f"reverify {res.run_id}: labels version {res.labels_version[:16]} (reward = {res.primary_reward}"
            f"{', tag ' + res.tag if res.tag else ''})")
    if res.skipped:
        return f"{head}\n  already stored ({res.episodes} episode(s), mean reward {_num(res.mean_reward)}): skipped"
    lines = [head,
             f"  {res.episodes} episode(s): {res.replayed} replayed ({res.diverged_episodes} diverged from the stored "
             f"trajectory), {res.not_replayable} not replayable (rule labels only)",
             f"  changed vs stored: reward {res.reward_changed}, components {res.components_changed}, success "
             f"{res.success_changed}, termination {res.termination_changed}, rule labels {res.label_changed}",
             f"  mean reward {_num(res.mean_reward)} (stored {_num(res.stored_mean_reward)})"]
    lines += [f"  note: {n}" for n in res.notes]
    lines.append("  compare versions: shopsim-wh sql \"select * from episode_labels_compare where run_id = $run\" "
                 f"-p run={res.run_id}")
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    app.command()(reverify)
