"""Row comparison for the Spark-vs-DuckDB tests: rows as multisets of canonical tuples (floats to 9 significant
digits, JSON text and nested values in one canonical JSON form, timestamps as UTC ISO text)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from collections import Counter


def _num(x: float) -> float | str:
    if math.isnan(x):
        return "nan"
    return float(f"{x:.9g}")


def _plain(v):
    """A value as plain JSON-able data: structs/rows -> dicts, lists -> lists, numbers -> rounded floats."""
    if v is None or isinstance(v, str | bool):
        if isinstance(v, str) and (v[:1] in ("{", "[") or v[:1].isdigit() or v[:1] == "-"):
            try:  # JSON text: compared as the value it encodes ('0.0' and '0', key order)
                return _plain(json.loads(v))
            except ValueError:
                return v
        return v
    if isinstance(v, int | float | decimal.Decimal):
        return _num(float(v))
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt.UTC).replace(tzinfo=None)
        return v.isoformat()
    if isinstance(v, dt.date):
        return v.isoformat()
    if hasattr(v, "asDict"):
        return {k: _plain(x) for k, x in v.asDict().items()}
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if hasattr(v, "toJson"):  # a Spark VariantVal
        return _plain(json.loads(v.toJson()))
    return str(v)


def canonical(v) -> str:
    return json.dumps(_plain(v), sort_keys=True, ensure_ascii=False)


def canonical_rows(rows) -> Counter:
    return Counter(tuple(canonical(v) for v in r) for r in rows)


def diff(duck: Counter, spark: Counter, columns: list[str] | None = None, show: int = 2) -> str:
    """'' when equal, else what differs: the row counts and, for the first rows only one side has (sorted), the
    columns whose values differ."""
    if duck == spark:
        return ""
    only_d, only_s = sorted((duck - spark).elements()), sorted((spark - duck).elements())
    out = [f"{sum(duck.values())} DuckDB rows vs {sum(spark.values())} Spark rows, {len(only_d)} / {len(only_s)} unmatched"]
    for d, s in list(zip(only_d, only_s, strict=False))[:show]:
        cols = columns or [str(i) for i in range(len(d))]
        out.append("; ".join(f"{c}: DuckDB {a[:300]} Spark {b[:300]}" for c, a, b in zip(cols, d, s, strict=False)
                             if a != b))
    return "\n  ".join(out)
