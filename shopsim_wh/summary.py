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
WITH planned AS (
    SELECT run_id, experiment, planned_episodes FROM runs
),
eps AS (
    SELECT * FROM episodes WHERE ($experiment IS NULL OR experiment = $experiment OR run_id = $experiment)
),
per_run AS (
    SELECT
        run_id,
        count(*) FILTER (WHERE status = 'completed') AS completed,
        count(*) FILTER (WHERE status = 'failed') AS failed,
        avg(reward) FILTER (WHERE status = 'completed') AS reward_mean,
        stddev_samp(reward) FILTER (WHERE status = 'completed')
            / sqrt(count(*) FILTER (WHERE status = 'completed')) AS reward_sem,
        avg(r_type) AS r_type, avg(r_att) AS r_att, avg(r_option) AS r_option, avg(r_price) AS r_price,
        avg(r_hard) AS r_hard, avg(r_success) AS success_rate,
        avg(CAST(right_product AS DOUBLE)) AS right_product,
        avg(model_steps) AS mean_model_steps,
        avg(total_actions) AS mean_actions,
        sum(invalid_actions) / nullif(sum(total_actions), 0) AS invalid_action_rate,
        sum(protocol_errors) / nullif(sum(model_steps), 0) AS protocol_error_rate,
        sum(tokens_in) AS tokens_in, sum(tokens_out) AS tokens_out,
        sum(duration_s) AS episode_seconds
    FROM eps GROUP BY run_id
),
reasons AS (
    SELECT run_id, string_agg(termination_reason || '=' || n, ', ' ORDER BY n DESC, termination_reason) AS termination_reasons
    FROM (SELECT run_id, coalesce(termination_reason, status) AS termination_reason, count(*) AS n FROM eps GROUP BY 1, 2)
    GROUP BY run_id
),
final AS (
    SELECT p.run_id, p.planned_episodes AS planned, r.completed, r.failed,
           r.completed / nullif(p.planned_episodes, 0) AS coverage,
           r.* EXCLUDE (run_id, completed, failed), t.termination_reasons
    FROM per_run r JOIN planned p USING (run_id) LEFT JOIN reasons t USING (run_id)
)
SELECT * FROM final ORDER BY run_id
"""


def summarize(con: duckdb.DuckDBPyConnection, experiment: str | None = None) -> list[dict]:
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

        out.append(
            f"run {r['run_id']}: planned {r['planned']}, completed {r['completed']}, failed {r['failed']} "
            f"(coverage {f('coverage')})\n"
            f"  reward {f('reward_mean')} ± {f('reward_sem')} (SEM)   success {f('success_rate')}   r_hard {f('r_hard')}   "
            f"right product {f('right_product')}\n"
            f"  r_type {f('r_type')}  r_att {f('r_att')}  r_option {f('r_option')}  r_price {f('r_price')}\n"
            f"  mean model steps {f('mean_model_steps', 2)}   mean env actions {f('mean_actions', 2)}   "
            f"invalid-action rate {f('invalid_action_rate')}   protocol-error rate {f('protocol_error_rate')}\n"
            f"  termination: {r['termination_reasons']}\n"
            f"  tokens in/out {r['tokens_in']}/{r['tokens_out']}   episode wall time {f('episode_seconds', 1)} s"
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
