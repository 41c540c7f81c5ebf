"""`runs list`, `runs rm RUN_ID`: see and remove whole runs (one atomic snapshot commit)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from .options import WarehouseOpt

app = typer.Typer(no_args_is_help=True, help="List the warehouse's runs, or remove one (`runs rm RUN_ID`).")


@app.command("list")
def list_cmd(
    warehouse: WarehouseOpt = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    show_all: Annotated[bool, typer.Option("--all", "-a", help="Also the partitions that hold no episode (an ingest's "
                                           "load record, the error rows of an input with no valid record), marked "
                                           "empty.")] = False,
) -> None:
    """Every run of the current snapshot that holds episodes: id, experiment, source, checkpoint, created, episode
    attempts, files, size. `--all` adds the partitions without an episode, marked as empty."""
    from ..store.maintenance import list_runs
    from ..store.warehouse import default_root

    runs = list_runs(default_root(warehouse))
    shown = [r for r in runs if show_all or r.episodes]
    hidden = len(runs) - len(shown)
    if fmt == "json":
        typer.echo(json.dumps({"runs": [{**r.as_dict(), "empty": not r.episodes, "note": _empty(r)}
                                      for r in shown], "hidden_empty": hidden}))
        return
    typer.echo(f"{'run_id':32} {'experiment':24} {'source':20} {'checkpoint':14} {'created':20} {'episodes':>8} "
               f"{'files':>5} {'MB':>8}")
    for r in shown:
        note = f"  (empty: {_empty(r)})" if _empty(r) else ""
        typer.echo(f"{r.run_id:32} {r.experiment or '-':24} {r.source_format or '-':20} {r.checkpoint_id or '-':14} "
                   f"{(r.created_at or '-')[:19]:20} {r.episodes:>8} {r.files:>5} {r.bytes / 1e6:>8.2f}{note}")
    if hidden:
        typer.echo(f"{hidden} partition(s) without an episode not shown (load records, rejected inputs): "
                   "`shopsim-wh runs list --all` lists them", err=True)


def _empty(r) -> str | None:
    """Why a partition holds no episode (None when it holds some)."""
    if r.episodes:
        return None
    if set(r.tables) <= {"loads"}:
        return "an ingest's load record"
    if set(r.tables) <= {"ingest_errors", "import_fidelity", "loads"}:
        return "rejected records only (ingest_errors)"
    return "no episode"


@app.command("rm")
def rm_cmd(
    run_id: Annotated[str, typer.Argument(help="Run id to remove (`shopsim-wh runs list` shows them).")],
    warehouse: WarehouseOpt = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing on success.")] = False,
) -> None:
    """Remove a run from the warehouse in one commit; its files are deleted by `vacuum` after the grace period."""
    from ..engines.catalog import refresh_existing
    from ..store.maintenance import GRACE_S, remove_run
    from ..store.warehouse import default_root

    root = default_root(warehouse)
    n = remove_run(root, run_id)
    refresh_existing(root)
    if fmt == "json":
        typer.echo(json.dumps({"removed": run_id, "files_pending_delete": n, "grace_s": GRACE_S}))
    elif not quiet:
        typer.echo(f"removed run {run_id} ({n} files); `shopsim-wh vacuum` deletes the files once they are "
                   f"{GRACE_S:.0f} s old (readers of the previous snapshot may still use them)")


def register(main: typer.Typer) -> None:
    main.add_typer(app, name="runs")
