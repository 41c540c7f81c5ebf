"""`config import`: a ShopSimRL experiment YAML → a shopsim-wh config."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]}, add_completion=False)


@app.command("import")
def import_cmd(
    original: Annotated[str, typer.Argument(help="ShopSimRL experiment config (YAML).")],
    out: Annotated[str | None, typer.Option("--out", "-o", help="Write the converted config here (default: print it).")] = None,
) -> None:
    """Convert a ShopSimRL experiment YAML (`shopsim-wh run` also reads one directly); notes go to stderr."""
    from ..core.config_import import import_file

    text, notes = import_file(original, out)
    for note in notes:
        typer.secho(f"note: {note}", fg="yellow", err=True)
    if out is None:
        typer.echo(text, nl=False)
    else:
        typer.echo(f"wrote {out}", err=True)
