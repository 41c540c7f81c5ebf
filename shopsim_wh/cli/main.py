"""`shopsim-wh` entry point: registers the verbs and turns library errors into one clear line.

Startup stays light (`--help` in well under 0.3 s): no module of the CLI imports duckdb, pyarrow, polars, httpx,
numpy or a library module that does at its top; each command imports them inside its function (docs/cli.md,
"Adding a command"). tests/test_cli_startup.py holds that.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from .. import __version__
from . import (
    analytics,
    catalog,
    check,
    compact,
    config,
    data,
    demo,
    doctor,
    exits,
    export,
    ingest,
    judge,
    report,
    reverify,
    rollout,
    runs,
    sim,
    skills,
    spark,
    synth,
    training,
    vacuum,
)

# rich_markup_mode=None: click's plain help (like sqlite-utils and datasette); rich's help renderer alone costs
# ~0.1-0.6 s of imports (rich.markdown, markdown_it, pygments) on every --help.
app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Columnar trace warehouse with SQL analytics for LLM-agent rollouts.",
                  epilog=exits.epilog())


def _version(value: bool) -> None:
    if value:
        typer.echo(f"shopsim-wh {__version__}")
        raise typer.Exit(exits.OK)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", "-V", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Columnar trace warehouse with SQL analytics for LLM-agent rollouts."""


rollout.register(app)
data.register(app)
ingest.register(app)
analytics.register(app)
report.register(app)
check.register(app)
demo.register(app)
export.register(app)
synth.register(app)
catalog.register(app)
doctor.register(app)
runs.register(app)
vacuum.register(app)
compact.register(app)
spark.register(app)
judge.register(app)
reverify.register(app)
app.add_typer(config.app, name="config", help="Config tools: `config import` converts a ShopSimRL experiment YAML.")
app.add_typer(sim.app, name="sim", help="The embedded ShopSimulator-compatible server and scripted policy.")
app.add_typer(skills.app, name="skills", help="Skill candidates behind the gold firewall, reviews, SkillBank snapshots and the gate's selection.")
app.add_typer(training.app, name="training", help="The training namespace: `training retokenize` checks stored token ids against a tokenizer, `training summary`.")


def main() -> None:
    try:
        app()
    except Exception as exc:
        code = exits.handle(exc)
        if code is None:
            raise
        sys.exit(code)


if __name__ == "__main__":
    main()
