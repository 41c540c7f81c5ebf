"""`shopsim-wh` entry point: registers the verbs and turns library errors into one clear line."""

from __future__ import annotations

import sys

import duckdb
import typer

from ..errors import ShopsimError
from . import analytics, catalog, compact, config, data, doctor, ingest, rollout, runs, sim, vacuum

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Columnar trace warehouse with SQL analytics for LLM-agent rollouts.")
rollout.register(app)
data.register(app)
ingest.register(app)
analytics.register(app)
catalog.register(app)
doctor.register(app)
runs.register(app)
vacuum.register(app)
compact.register(app)
app.add_typer(config.app, name="config", help="Config tools: `config import` converts a ShopSimRL experiment YAML.")
app.add_typer(sim.app, name="sim", help="The embedded ShopSimulator-compatible server and scripted policy.")


def main() -> None:
    try:
        app()
    except ShopsimError as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        sys.exit(2)
    except duckdb.Error as exc:  # a query the user wrote: say what DuckDB said and where to look
        typer.secho(f"error: {exc}", fg="red", err=True)
        typer.echo("hint: `shopsim-wh tables` lists the tables and views; docs/schema.md and docs/sql_cookbook.md "
                   "describe them", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
