"""Exit codes of every `shopsim-wh` command, decided here and nowhere else (docs/cli.md is generated from EXIT_CODES).

Commands return a result code with ``raise typer.Exit(exits.FAILED)``; exceptions are turned into a one-line
``error: ...`` on stderr and a code by :func:`handle`. This module imports nothing heavy: a duckdb error is
recognised by its module name, so `--help` never pays for importing duckdb.
"""

from __future__ import annotations

import sys

OK = 0
FAILED = 1
USAGE = 2
UNREACHABLE = 3
LOCKED = 4
INTERRUPTED = 130

EXIT_CODES: tuple[tuple[int, str], ...] = (
    (OK, "success (a gate that passed, a run whose every episode completed, a query that ran, an `ingest` that "
         "landed episodes or found every input already ingested: a re-run over the same files adds nothing)"),
    (FAILED, "the command worked and the answer is negative: the gate failed, `doctor` found problems, "
             "a run has failed episodes (run the same command again to retry them)"),
    (USAGE, "usage or bad input, the message says what to fix: an unknown option, a bad config, an unknown run or "
            "experiment, a SQL error, a malformed file, an `ingest` that landed nothing (no input held a trace: "
            "the message says what was read), a run stopped by the model server refusing its requests (401, 403, "
            "400, 404, 422: a bad key or model name), an optional extra not installed (the message names its "
            "`pip install 'shopsim-wh[...]'` line)"),
    (UNREACHABLE, "a configured server (model or environment) refused the connection or never answered: "
                  "the message names its URL"),
    (LOCKED, "the warehouse is locked by another writer (another `run` or `ingest`) for longer than "
             "`$SHOPSIM_WH_LOCK_TIMEOUT_S` (default 30 s): the message names it (pid, host, since when, command); "
             "run the command again once it has finished"),
    (INTERRUPTED, "interrupted (Ctrl-C); a run or ingest resumes where it stopped when you run it again"),
)
# a few words per code, for `shopsim-wh --help`
SHORT = {OK: "ok", FAILED: "gate failed / findings / failed episodes", USAGE: "usage or bad input",
         UNREACHABLE: "a server unreachable", LOCKED: "warehouse locked", INTERRUPTED: "interrupted"}


def epilog() -> str:
    """The exit codes line of ``shopsim-wh --help``."""
    return "Exit codes: " + ", ".join(f"{code} {SHORT[code]}" for code, _ in EXIT_CODES) + " (docs/cli.md)."


# modules of the optional extras (pyproject's [project.optional-dependencies]) -> (extra, what needs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "boto3": ("s3", "an s3:// warehouse"), "botocore": ("s3", "an s3:// warehouse"),
    "s3fs": ("s3", "an s3:// warehouse"),
    "pyspark": ("spark", "Spark (--engine spark, spark-views)"), "sqlglot": ("spark", "Spark (--engine spark, spark-views)"),
    "ray": ("ray", "runtime.executor: ray"),
    "torch": ("slime", "a slime dump holding tensors (ingest --format slime)"),
    "tokenizers": ("tokens", "a Hugging Face tokenizer (--tokenizer DIR, model.tokenizer)"),
    "transformers": ("tokens", "a Hugging Face tokenizer's chat template (--tokenizer DIR)"),
    "jinja2": ("tokens", "a Hugging Face tokenizer's chat template (--tokenizer DIR)"),
}

SQL_HINT = ("hint: `shopsim-wh tables` lists the tables and views; docs/schema.md and docs/sql_cookbook.md "
            "describe them")


def code_for(exc: BaseException) -> int | None:
    """The exit code for an exception the CLI reports as a message (None: not ours, let it raise)."""
    from ..core.errors import ServerUnreachable, ShopsimError, WarehouseLockedError

    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED
    if isinstance(exc, ServerUnreachable):
        return UNREACHABLE
    if isinstance(exc, WarehouseLockedError):
        return LOCKED
    if isinstance(exc, ShopsimError) or _is_duckdb_error(exc) or missing_extra(exc):
        return USAGE
    return None


def missing_extra(exc: BaseException) -> str | None:
    """The message for an import of an optional extra's module that is not installed (None: not that case)."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    module = exc.name.split(".")[0]
    if module not in EXTRAS:
        return None
    extra, what = EXTRAS[module]
    return f"{what} needs {module}, which is not installed: pip install 'shopsim-wh[{extra}]'"


def _is_duckdb_error(exc: BaseException) -> bool:
    if "duckdb" not in sys.modules:  # nothing can have raised one
        return False
    import duckdb

    return isinstance(exc, duckdb.Error)


def handle(exc: BaseException) -> int | None:
    """Print ``error: ...`` (and a hint for SQL errors) on stderr; return the exit code, None if not ours."""
    code = code_for(exc)
    if code is None:
        return None
    import typer

    if code == INTERRUPTED:
        typer.secho("interrupted", fg="yellow", err=True)
        return code
    typer.secho(f"error: {missing_extra(exc) or exc}", fg="red", err=True)
    if _is_duckdb_error(exc):  # a query the user wrote: say what DuckDB said and where to look
        typer.echo(SQL_HINT, err=True)
    return code


def table_md() -> str:
    """The exit-code table of docs/cli.md."""
    rows = ["| code | meaning |", "| --- | --- |"]
    rows += [f"| {code} | {meaning} |" for code, meaning in EXIT_CODES]
    return "\n".join(rows)
