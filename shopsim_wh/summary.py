"""Run summaries and generic query output (library side of `summarize`, `sql`, `tables`)."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import duckdb

SUMMARY_SQL = """
SELECT m.*, t.termination_reasons, f.failures
FROM run_metrics AS m
LEFT JOIN (
    SELECT run_id, string_agg(reason || '=' || n, ', ' ORDER BY n DESC, reason) AS termination_reasons
    FROM (SELECT run_id, coalesce(termination_reason, status) AS reason, count(*) AS n FROM episodes GROUP BY 1, 2)
    GROUP BY run_id
) AS t USING (run_id)
LEFT JOIN (  -- failures of the episodes still failed (their last attempt), by stage and exception type
    SELECT run_id, string_agg(kind || '=' || n, ', ' ORDER BY n DESC, kind) AS failures
    FROM (SELECT e.run_id, e.error_stage || ':' || e.error_type AS kind, count(*) AS n
          FROM episodes AS e WHERE e.status = 'failed' GROUP BY 1, 2)
    GROUP BY run_id
) AS f USING (run_id)
WHERE $experiment IS NULL OR m.experiment = $experiment OR m.run_id = $experiment
ORDER BY m.run_id
"""


def summarize(con: duckdb.DuckDBPyConnection, experiment: str | None = None) -> list[dict]:
    """One dict per run: the `run_metrics` row plus the termination reasons as text."""
    rel = con.execute(SUMMARY_SQL, {"experiment": experiment})
    cols = [d[0] for d in rel.description]
    return [dict(zip(cols, r, strict=True)) for r in rel.fetchall()]


def format_summary(rows: list[dict]) -> str:
    if not rows:
        return "no runs in this warehouse (run `shopsim-wh run CONFIG` or `shopsim-wh ingest PATH`)"
    out = []
    for r in rows:
        def f(key: str, digits: int = 3, r: dict = r) -> str:
            v = r.get(key)
            return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{float(v):.{digits}f}"

        passk = (f"   pass@{r['repeats']} {f('pass_at_k')}   pass^{r['repeats']} {f('pass_hat_k')}"
                 if (r.get("repeats") or 1) > 1 else "")
        out.append(
            f"run {r['run_id']}: planned {r['planned']}, completed {r['completed']}, failed {r['failed']} "
            f"(coverage {f('coverage')})\n"
            f"  reward {f('reward_mean')} ± {f('reward_sem')} (SEM)   success {f('r_success_mean')}   "
            f"r_strict {f('r_strict_mean')}   right product {f('right_product_rate')}{passk}\n"
            f"  r_type {f('r_type_mean')}  r_att {f('r_att_mean')}  r_option {f('r_option_mean')}  r_price {f('r_price_mean')}\n"
            f"  mean model steps {f('mean_model_steps', 2)}   mean env actions {f('mean_steps', 2)}   "
            f"invalid-action rate {f('invalid_action_rate')}   protocol-error rate {f('protocol_error_rate')}\n"
            f"  termination: {r['termination_reasons']}\n"
            + (f"  failures: {r['failures']} (details: select * from failures)\n" if r.get("failures") else "")
            + f"  tokens in/out per episode {f('tokens_in_mean', 0)}/{f('tokens_out_mean', 0)}   "
            f"wall time per episode {f('wall_time_mean_s', 3)} s (total {f('wall_time_total_s', 1)} s)"
        )
    return "\n".join(out)


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple]


def run_query(con: duckdb.DuckDBPyConnection, query: str, params: dict[str, Any] | None = None) -> QueryResult:
    rel = con.execute(query, params or {})
    if rel.description is None:
        return QueryResult([], [])
    return QueryResult([d[0] for d in rel.description], rel.fetchall())


def _jsonable(v: Any) -> Any:
    if isinstance(v, (datetime, date)):
        return v.isoformat()
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def render(result: QueryResult, fmt: str, max_width: int = 60) -> str:
    if fmt == "json":
        return json.dumps([{c: _jsonable(v) for c, v in zip(result.columns, r, strict=True)} for r in result.rows],
                          ensure_ascii=False)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(result.columns)
        w.writerows([[_jsonable(v) for v in r] for r in result.rows])
        return buf.getvalue().rstrip("\n")
    cells = [[("NULL" if v is None else str(_jsonable(v)))[:max_width].replace("\n", " ") for v in r] for r in result.rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(result.columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(result.columns, widths, strict=True))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join([line, sep, *body, f"({len(result.rows)} row{'s' if len(result.rows) != 1 else ''})"])
