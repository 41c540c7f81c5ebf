"""`training retokenize`: stored token ids against their text through a tokenizer's chat template; `training summary`:
what the training namespace holds (docs/training.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from .options import OutputOpt, QuietOpt, WarehouseOpt, check_output, emit_json

app = typer.Typer(no_args_is_help=True, help="The training namespace: trainer samples with token ids, loss masks and "
                                             "logprobs (docs/training.md).")

RunsOpt = Annotated[list[str] | None, typer.Option(
    "--run", help="Run id (or the experiment name of one run); repeatable. Default: every run with trainer samples.")]


@app.command("retokenize")
def retokenize(
    tokenizer: Annotated[str, typer.Option(
        "--tokenizer", help="`builtin` (builtin:shopsim-bytes-v1), or the path of a Hugging Face tokenizer: a directory "
        "with tokenizer.json and tokenizer_config.json holding a chat_template (or chat_template.jinja), or its "
        "tokenizer.json. Needs pip install 'shopsim-wh[tokens]'.")],
    runs: RunsOpt = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Check at most this many samples.")] = None,
    warehouse: WarehouseOpt = None,
    fmt: OutputOpt = "text",
    quiet: QuietOpt = False,
) -> None:
    """Re-render every trainer sample's messages (and the tools offered) through the tokenizer's chat template,
    tokenize, and compare with the stored ids: one training_retokenization row per sample with the first position
    that differs (NULL: identical). Each run adds a newer check; the view training_token_drift lists the samples
    whose stored ids differ from their retokenization or could not be rendered."""
    from ..analytics.retokenize import RetokenizeOptions
    from ..analytics.retokenize import retokenize as run_retokenize
    from ..core.tokenizer import load
    from ..store.warehouse import default_root

    check_output(fmt)
    root = default_root(warehouse)
    tok = load(tokenizer)
    options = RetokenizeOptions(runs=tuple(runs or ()), limit=limit)
    if quiet or fmt == "json":
        res = run_retokenize(root, tok, options)
    else:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        cols = (TextColumn("[bold]retokenize"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[rate]:.0f} samples/s"), TimeRemainingColumn())
        with Progress(*cols, transient=True) as bar:
            task = bar.add_task("retokenize", total=None, rate=0.0)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total, rate=done / (bar.tasks[0].elapsed or 1e-9))

            res = run_retokenize(root, tok, options, progress=progress)
    if fmt == "json":
        emit_json(res.to_dict())
    elif not quiet:
        typer.echo(_text(res, root))


def _text(res, root) -> str:
    lines = [f"retokenize with {res.tokenizer_id} ({res.tokenizer_hash[:12]}) over {', '.join(res.runs)}: "
             f"{res.checked} sample(s) checked in {res.seconds:.1f} s",
             f"  identical {res.identical}, drifted {res.drifted}, not renderable {res.not_renderable}"
             + (f"; {res.placeholders} aborted placeholder(s) not checked" if res.placeholders else "")]
    if res.other_tokenizer:
        lines.append(f"  note: {res.other_tokenizer} of them were recorded with another tokenizer "
                     "(training_samples.tokenizer_hash): their ids are bound to differ from this one's")
    for e in res.examples[:3]:
        lines.append(f"  drift {e['run_id']} {e['episode_id']} {e['agent_id']} sample {e['sample_idx']}: first "
                     f"mismatch at token {e['first_mismatch']} (stored {e['stored_tokens']}, retokenized "
                     f"{e['retokenized_tokens']})")
        if e["stored_text"] is not None and e["retokenized_text"] is not None:
            lines.append(f"    stored      ...{e['stored_text']!r}...")
            lines.append(f"    retokenized ...{e['retokenized_text']!r}...")
    if res.drifted or res.not_renderable:
        lines.append(f"  every one: shopsim-wh sql --warehouse {root} \"SELECT * FROM training_token_drift "
                     f"WHERE tokenizer_hash = '{res.tokenizer_hash}'\"")
    return "\n".join(lines)


@app.command("summary")
def summary(
    runs: RunsOpt = None,
    warehouse: WarehouseOpt = None,
    fmt: OutputOpt = "text",
) -> None:
    """Trainer samples, tokens and trainable tokens per run, source and tokenizer, and the latest retokenization
    checks per tokenizer."""
    from ..analytics.training import summary as run_summary
    from ..engines.db import connect
    from ..store.warehouse import default_root

    check_output(fmt)
    doc = run_summary(connect(default_root(warehouse)), tuple(runs or ()))
    if fmt == "json":
        emit_json(doc)
        return
    if doc.get("note"):
        typer.echo(doc["note"])
        return
    t = doc["totals"]
    lines = [f"{t['samples']} trainer sample(s) of {t['episodes']} episode(s): {t['tokens']} tokens, "
             f"{t['trainable_tokens']} trainable"]
    for r in doc["samples"]:
        lines.append(f"  {r['run_id']} [{r['source']}, {r['tokenizer_id']}]: {r['samples']} sample(s), "
                     f"{r['episodes']} episode(s), {r['tokens']} tokens, {r['trainable_tokens']} trainable"
                     + (f", {r['placeholders']} aborted placeholder(s)" if r["placeholders"] else ""))
    for c in doc["checks"]:
        lines.append(f"  retokenized {c['run_id']} with {c['tokenizer_id']} ({c['tokenizer_hash'][:12]}): "
                     f"{c['checked']} checked, {c['identical']} identical, {c['drifted']} drifted, "
                     f"{c['not_renderable']} not renderable")
    typer.echo("\n".join(lines))
