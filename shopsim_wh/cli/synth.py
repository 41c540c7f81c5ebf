"""`synth-reasoning`: send the `reasoning-requests` of the selected runs to a teacher, store the answers."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from .options import WarehouseOpt


def synth_reasoning(
    teacher: Annotated[str, typer.Option("--teacher", "-t", help="Teacher config (YAML): `teacher:` with the runner's model keys (base_url: embedded = the scripted teacher), `concurrency`.")],
    warehouse: WarehouseOpt = None,
    runs: Annotated[list[str] | None, typer.Option("--runs", help="Run ids to read (repeatable; default every run).")] = None,
    experiment: Annotated[str | None, typer.Option("--experiment", help="Only the runs of this experiment.")] = None,
    where: Annotated[str | None, typer.Option("--where", help="Boolean expression over the reasoning-requests filter columns (default: status = 'completed' AND success).")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Send at most this many new requests.")] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", min=1, help="Requests in flight (default: the config's).")] = None,
    allow_test: Annotated[bool, typer.Option("--allow-test", help="Allow runs holding test-split episodes.")] = False,
    fmt: Annotated[str, typer.Option("--format", "-f", help="text or json (one JSON object on stdout).")] = "text",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Trajectory-grounded synthetic reasoning: one teacher call per new request (idempotent per request and
    teacher fingerprint; a second run sends nothing); answers whose action contradicts the recorded one are
    stored as rejected with the reason. Export the accepted ones with `shopsim-wh export sft-reasoning`."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from ..demo.reasoning import SynthOptions, synthesize
    from ..store.warehouse import default_root

    root = default_root(warehouse)
    options = SynthOptions(runs=runs or None, experiment=experiment, where=where, limit=limit, allow_test=allow_test,
                           concurrency=concurrency)
    if quiet or fmt == "json":
        result = synthesize(root, teacher, options)
    else:
        cols = (TextColumn("[bold]synth-reasoning"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[rate]:.1f} req/s"), TimeRemainingColumn())
        with Progress(*cols, transient=True) as bar:
            task = bar.add_task("send", total=None, rate=0.0)

            def progress(done: int, total: int) -> None:
                elapsed = bar.tasks[0].elapsed or 1e-9
                bar.update(task, completed=done, total=total, rate=done / elapsed)

            result = synthesize(root, teacher, options, progress=progress)
    d = result.as_json()
    if fmt == "json":
        typer.echo(json.dumps(d, sort_keys=True))
    else:
        typer.echo(f"{d['requests']} request(s): {d['already_answered']} already answered by this teacher, "
                   f"{d['sent']} sent: {d['accepted']} accepted, {d['rejected']} rejected, {d['failed']} failed "
                   f"in {d['seconds']:.1f} s (teacher {d['teacher_fingerprint'][:12]})")
        for reason, n in sorted(d["reject_reasons"].items()):
            typer.echo(f"  rejected {reason}: {n}")
        for e in d["errors"]:
            typer.echo(f"  error {e}", err=True)
        if d["accepted"]:
            typer.echo(f"  export them: shopsim-wh export sft-reasoning --warehouse {root} --out DIR")
    if result.unreachable and result.accepted + result.rejected == 0:
        typer.echo(f"error: the teacher server at {result.teacher_base_url} is unreachable; check teacher.base_url "
                   f"in {teacher} and that the server is up (nothing was stored)", err=True)
        raise typer.Exit(3)
    if result.failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("synth-reasoning")(synth_reasoning)
