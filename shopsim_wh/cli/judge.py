"""`judge`: an offline judge over frozen traces; `labels import`: human labels in (docs/judge.md)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from . import exits
from .options import OutputOpt, QuietOpt, WarehouseOpt, check_output

labels_app = typer.Typer(no_args_is_help=True, help="Human labels: `labels import FILE` (CSV or JSONL).")


def judge(
    rubric: Annotated[str, typer.Option("--rubric", help="Rubric (YAML): id, version, questions with their labels, "
                                                         "grain, include (docs/judge.md).")],
    model: Annotated[str, typer.Option("--model", "-m", help="Judge config (YAML with the run config's `model:` keys), "
                                                             "or `embedded`: the scripted judge.")] = "embedded",
    warehouse: WarehouseOpt = None,
    runs: Annotated[list[str] | None, typer.Option("--runs", help="Run ids to judge (repeatable; default every run).")] = None,
    where: Annotated[str | None, typer.Option("--where", help="Boolean SQL expression over the `episodes` view: which "
                                                              "episodes to judge (default all).")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Send at most this many new requests.")] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", min=1, help="Requests in flight (default: the config's).")] = None,
    allow_test: Annotated[bool, typer.Option("--allow-test", help="Allow runs holding test-split episodes.")] = False,
    fmt: OutputOpt = "text",
    quiet: QuietOpt = False,
) -> None:
    """Judge stored episodes (no new rollout) with a rubric; answers land in `judge_outputs` / `judge_labels`. Idempotent
    and resumable: an answer already stored for the same input, rubric file and judge is not asked again. Compare with
    the rule taxonomy, other judges and human labels in the views judge_confusion and judge_agreement."""
    from ..rollout.judge import JudgeOptions, load_judge_config, load_rubric
    from ..rollout.judge import judge as run_judge
    from ..store.warehouse import default_root

    check_output(fmt)
    root = default_root(warehouse)
    lr, cfg = load_rubric(rubric), load_judge_config(model)
    options = JudgeOptions(runs=runs or None, where=where, limit=limit, allow_test=allow_test, concurrency=concurrency)
    if quiet or fmt == "json":
        result = run_judge(root, lr, cfg, options)
    else:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        cols = (TextColumn(f"[bold]judge {lr.rubric.id}@{lr.rubric.version}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[rate]:.1f} req/s"), TimeRemainingColumn())
        with Progress(*cols, transient=True) as bar:
            task = bar.add_task("judge", total=None, rate=0.0)

            def progress(done: int, total: int) -> None:
                elapsed = bar.tasks[0].elapsed or 1e-9
                bar.update(task, completed=done, total=total, rate=done / elapsed)

            result = run_judge(root, lr, cfg, options, progress=progress)
    d = result.as_json()
    if fmt == "json":
        typer.echo(json.dumps(d, sort_keys=True))
    elif not quiet:
        typer.echo(f"rubric {d['rubric_id']}@{d['rubric_version']} ({d['rubric_sha256'][:12]}), judge "
                   f"{d['judge_fingerprint'][:12]} at {d['judge_base_url']}: {d['items']} {d['grain']}(s) in scope, "
                   f"{d['already_judged']} already judged, {d['sent']} sent: {d['parsed']} parsed, "
                   f"{d['parse_errors']} with a parse error (raw output kept), {d['failed']} failed "
                   f"in {d['seconds']:.1f} s")
        for q, counts in sorted(d["label_counts"].items()):
            typer.echo(f"  {q}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])))
        for e in d["errors"]:
            typer.echo(f"  error {e}", err=True)
        if d["parsed"] + d["parse_errors"]:
            typer.echo(f"  calibration: shopsim-wh sql --warehouse {root} \"SELECT * FROM judge_agreement\"")
    if result.unreachable and result.parsed + result.parse_errors == 0:
        typer.echo(f"error: the judge server at {result.judge_base_url} is unreachable; check model.base_url in "
                   f"{model} and that the server is up (nothing was stored)", err=True)
        raise typer.Exit(exits.UNREACHABLE)
    if result.failed:
        raise typer.Exit(exits.FAILED)


@labels_app.command("import")
def labels_import(
    file: Annotated[str, typer.Argument(help="CSV (with a header) or JSONL: run_id or experiment, episode_id, "
                                             "[step_idx], label, value, labeler, [note].")],
    warehouse: WarehouseOpt = None,
    fmt: OutputOpt = "text",
) -> None:
    """Import human labels; every bad row is reported with its line and nothing lands until all are right.
    Importing the same file again adds nothing."""
    from ..ingest.labels import import_labels
    from ..store.warehouse import default_root

    check_output(fmt)
    result = import_labels(default_root(warehouse), file)
    d = result.as_json()
    if fmt == "json":
        typer.echo(json.dumps(d, sort_keys=True))
    else:
        typer.echo(f"{d['rows']} label row(s) in {d['source_file']}: {d['imported']} imported, "
                   f"{d['already_stored']} already stored" + (f" (runs {', '.join(d['runs'])})" if d["runs"] else ""))


def register(app: typer.Typer) -> None:
    app.command("judge")(judge)
    app.add_typer(labels_app, name="labels")
