"""The report's SQL: one ``.sql`` file per query under ``shopsim_wh/report/sql/``, values always bound."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from importlib import resources

import duckdb


@functools.cache
def text(name: str) -> str:
    """The query ``<name>.sql`` (its comment header included), without the trailing semicolon."""
    return (resources.files("shopsim_wh.report") / "sql" / f"{name}.sql").read_text().strip().rstrip(";")


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def rows(con: duckdb.DuckDBPyConnection, name: str, params: dict | None = None) -> list[dict]:
    """Run ``<name>.sql`` with named parameters; rows as dicts, NaN / inf as None (JSON has neither)."""
    cur = con.execute(text(name), params or {})
    cols = [d[0] for d in cur.description]
    return [{k: _clean(v) for k, v in zip(cols, r, strict=True)} for r in cur.fetchall()]


def scalar_row(con: duckdb.DuckDBPyConnection, name: str, params: dict | None = None) -> dict:
    got = rows(con, name, params)
    return got[0] if got else {}


def install_selection(con: duckdb.DuckDBPyConnection, run_ids: list[str], coding_sources: Sequence[str],
                      group_by: str) -> None:
    """TEMP tables ``report_runs`` (the selected runs, their domain and series) and ``report_episodes``."""
    from ..export.scope import SHOP_SOURCES  # the sources whose runs are the shop's, as exports know them

    con.execute("CREATE OR REPLACE TEMP TABLE report_runs AS " + text("report_runs"),
                {"run_ids": run_ids, "shop_sources": list(SHOP_SOURCES), "coding_sources": list(coding_sources),
                 "group_by": group_by})
    con.execute("CREATE OR REPLACE TEMP TABLE report_episodes AS " + text("report_episodes"))


def install_labels(con: duckdb.DuckDBPyConnection) -> None:
    """TEMP table ``report_labels``: the selected runs' error labels, computed once."""
    con.execute("CREATE OR REPLACE TEMP TABLE report_labels AS " + text("report_labels"))


def table_exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]).fetchone()[0] > 0
