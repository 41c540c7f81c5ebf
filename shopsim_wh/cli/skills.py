"""`skills mine | add | list | review | snapshot | select`: skill candidates behind the gold firewall, reviewed,
snapshotted as immutable SkillBanks, and the gate's selection written with its proposal ledger (docs/skills.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from . import exits
from .options import OutputOpt, QuietOpt, WarehouseOpt, check_output, emit_json

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]},
                  add_completion=False)

RoundOpt = Annotated[str | None, typer.Option("--round", help="The loop round (partition of the candidate tables).")]


def _root(warehouse: str | None):
    from ..store.warehouse import default_root

    return default_root(warehouse)


def _refresh(root) -> None:
    from ..engines.catalog import refresh_existing

    refresh_existing(root)


@app.command()
def mine(
    runs: Annotated[list[str] | None, typer.Option("--runs", help="Run id (or experiment name) to mine; repeatable. Default: every skill-free run.")] = None,
    round_: Annotated[str, typer.Option("--round", help="The loop round the candidates belong to (a name).")] = "round-000",
    builder: Annotated[str, typer.Option("--builder", help="rules: the taxonomy's rule templates; llm: the --model writes each from the cluster's evidence. One candidate per failure mechanism.")] = "rules",
    model: Annotated[str | None, typer.Option("--model", "-m", help="--builder llm: model config (YAML with a run config's `model:` section).")] = None,
    max_refs: Annotated[int, typer.Option("--max-refs", help="At most this many evidence refs per channel (success, failure).")] = 25,
    fmt: OutputOpt = "text",
    warehouse: WarehouseOpt = None,
) -> None:
    """Mine skill candidates from the error taxonomy of the runs' episodes into skill_candidates, one per failure
    mechanism, with positive (success) and negative (failure) evidence refs into steps. Exit 1 when the model of
    --builder llm gave no skill for some cluster (each is reported with the reason; run again to ask again)."""
    from ..analytics.skill_candidates import MineOptions
    from ..analytics.skill_candidates import mine as run_mine

    check_output(fmt)
    root = _root(warehouse)
    res = run_mine(root, MineOptions(tuple(runs or ()), round_, builder, max_refs, model))
    _refresh(root)
    emit_json(res.to_dict()) if fmt == "json" else typer.echo(res.to_table())
    if res.unreachable and not res.candidates:
        typer.echo(f"error: the model server of {model} is unreachable; check model.base_url and that the server is "
                   "up (no candidate was stored)", err=True)
        raise typer.Exit(exits.UNREACHABLE)
    if res.failed:
        typer.echo(f"error: {len(res.failed)} cluster(s) got no skill from the model: "
                   + "; ".join(f"{f['mechanism']}: {f['reason']}" for f in res.failed), err=True)
        raise typer.Exit(exits.FAILED)


@app.command()
def add(
    title: Annotated[str, typer.Option("--title", help="The candidate's title.")],
    content: Annotated[str | None, typer.Option("--content", help="The skill text as injected into the prompt.")] = None,
    content_file: Annotated[str | None, typer.Option("--content-file", help="Read the skill text from this file.")] = None,
    round_: Annotated[str, typer.Option("--round", help="The loop round (a name).")] = "round-000",
    mechanism: Annotated[str, typer.Option("--mechanism", help="The failure mechanism it addresses.")] = "manual",
    operation: Annotated[str, typer.Option("--operation", help="ADD, or REWRITE with --target.")] = "ADD",
    target: Annotated[str | None, typer.Option("--target", help="REWRITE: the skill id it replaces.")] = None,
    positive: Annotated[list[str] | None, typer.Option("--positive", help="Success evidence RUN:EPISODE[:STEP]; repeatable.")] = None,
    negative: Annotated[list[str] | None, typer.Option("--negative", help="Failure evidence RUN:EPISODE[:STEP]; repeatable.")] = None,
    warehouse: WarehouseOpt = None,
) -> None:
    """Add a hand-written candidate (builder manual); the firewall checks it like any other."""
    from pathlib import Path

    from ..analytics.skill_candidates import ManualCandidate
    from ..analytics.skill_candidates import add as run_add

    if (content is None) == (content_file is None):
        raise typer.BadParameter("give the skill text with exactly one of --content and --content-file")
    text = content if content is not None else Path(content_file).read_text(encoding="utf-8")
    root = _root(warehouse)
    row = run_add(root, ManualCandidate(title, text, round_, mechanism, operation, target, tuple(positive or ()),
                                        tuple(negative or ())))
    _refresh(root)
    typer.echo(f"added {row['candidate_id']} to {round_}")


@app.command("list")
def list_cmd(
    round_: RoundOpt = None,
    fmt: OutputOpt = "text",
    warehouse: WarehouseOpt = None,
) -> None:
    """Every candidate with its gold-firewall findings and review state (blocked, accepted, rejected, pending)."""
    from ..analytics.skill_candidates import listing
    from ..engines.db import connect

    check_output(fmt)
    con = connect(_root(warehouse))
    rows = listing(con, round_)
    if fmt == "json":
        emit_json({"candidates": rows})
        return
    if not rows:
        typer.echo("no skill candidates; mine some: shopsim-wh skills mine")
        return
    for r in rows:
        review = (f"{r['review_decision']} by {r['reviewer']}: {r['review_reason']}" if r["review_decision"]
                  else "not reviewed")
        typer.echo(f"{r['round']}  {r['candidate_id']}  {r['state']:<8}  {r['mechanism']:<14} {r['title']}")
        typer.echo(f"    evidence {r['negative_refs']} failing, {r['positive_refs']} succeeding   builder "
                   f"{r['builder']}   review: {review}")
        firewall = ", ".join(f"{f['finding']} ({f['example']!r})" for f in r["findings"]) or "clean"
        typer.echo(f"    firewall: {firewall}")


@app.command()
def review(
    candidates: Annotated[list[str], typer.Argument(help="The candidate id(s) (online-...): one decision for each.")],
    accept: Annotated[bool, typer.Option("--accept", help="Accept the candidate(s).")] = False,
    reject: Annotated[bool, typer.Option("--reject", help="Reject the candidate(s).")] = False,
    reason: Annotated[str, typer.Option("--reason", help="Why (stored with the decision).")] = "",
    reviewer: Annotated[str | None, typer.Option("--reviewer", help="Who decides (default: $USER).")] = None,
    round_: RoundOpt = None,
    quiet: QuietOpt = False,
    warehouse: WarehouseOpt = None,
) -> None:
    """Accept or reject candidates with a reason (table skill_reviews, one row each; the latest review counts)."""
    from ..analytics.skill_candidates import Review
    from ..analytics.skill_candidates import review as run_review

    if accept == reject:
        raise typer.BadParameter("pass exactly one of --accept and --reject")
    root = _root(warehouse)
    decision = "accept" if accept else "reject"
    done = run_review(root, [Review(c, decision, reason, reviewer, round_) for c in candidates])
    _refresh(root)
    for row, cand in done:
        if not quiet:
            typer.echo(f"{row['decision']}ed {row['candidate_id']} ({cand['run_id']}) by {row['reviewer']}")
        if accept and list(cand["findings"]):
            typer.secho(f"warning: {row['candidate_id']} has gold-firewall findings ({', '.join(cand['findings'])}): "
                        "it never reaches a snapshot while they stand", fg="yellow", err=True)


@app.command()
def snapshot(
    out: Annotated[str, typer.Option("--out", help="The SkillBank file to write (never overwritten).")],
    round_: RoundOpt = None,
    fmt: OutputOpt = "text",
    warehouse: WarehouseOpt = None,
) -> None:
    """Write the round's accepted candidates without a firewall finding as an immutable shopsimrl-skillbank-v1 file
    (usable as skills.path), each skill traceable to its evidence, review and firewall result."""
    from ..analytics.skillbank_snapshot import snapshot as run_snapshot

    check_output(fmt)
    root = _root(warehouse)
    res = run_snapshot(root, out, round_)
    _refresh(root)
    emit_json(res.to_dict()) if fmt == "json" else typer.echo(res.to_table())


@app.command()
def select(
    out: Annotated[str, typer.Option("--out", help="Directory for selected_skillbank.json and proposal_ledger.jsonl.")],
    treatment: Annotated[str | None, typer.Option("--treatment", help="The masked run of a snapshot: its latest strictly-positive-top-k gate decision.")] = None,
    gate_id: Annotated[str | None, typer.Option("--gate", help="A gate_results.gate_id instead of --treatment.")] = None,
    fmt: OutputOpt = "text",
    warehouse: WarehouseOpt = None,
) -> None:
    """Write the gate's selected SkillBank and the round's proposal ledger (every candidate's fate)."""
    from ..analytics.skillbank_snapshot import select as run_select

    check_output(fmt)
    root = _root(warehouse)
    res = run_select(root, out, treatment, gate_id)
    _refresh(root)
    emit_json(res.to_dict()) if fmt == "json" else typer.echo(res.to_table())
