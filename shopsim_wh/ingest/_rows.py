"""Column buffers that turn reader rows into Arrow tables of the declared schemas."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import orjson
import pyarrow as pa

from ..core.schema import SCHEMA_VERSION, TABLES, TS

_LINEAGE = ("load_id", "schema_version")


def jdump(obj) -> str | None:
    """JSON text for a JSON column (None stays NULL)."""
    if obj is None:
        return None
    return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS).decode()


def canonical(obj) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


def tool_schema_hash(name, description, parameters) -> str:
    return hashlib.sha256(canonical({"name": name, "description": description, "parameters": parameters})).hexdigest()


def tools_set_hash(hashes) -> str:
    return hashlib.sha256(",".join(sorted(hashes)).encode()).hexdigest()


class TableBuffer:
    """Rows of one table. ``add(row_dict)`` for convenience; hot paths append tuples in column order
    (:attr:`cols`, lineage columns excluded) to :attr:`tuples`, transposed at flush in C."""

    def __init__(self, name: str):
        self.name = name
        self.spec = TABLES[name]
        self.cols = [c for c in self.spec.column_names if c not in _LINEAGE]
        self.data: dict[str, list] = {c: [] for c in self.cols}
        self._first = self.data[self.cols[0]]
        self.tuples: list[tuple] = []

    @property
    def n(self) -> int:
        return len(self._first) + len(self.tuples)

    def add(self, row: dict) -> None:
        data = self.data
        if not row.keys() <= data.keys():
            raise KeyError(f"table {self.name!r} has no column(s) {sorted(row.keys() - data.keys())}")
        get = row.get
        for c, lst in data.items():
            lst.append(get(c))

    def flush(self, load_id: str) -> pa.Table | None:
        n = self.n
        if not n:
            return None
        if self.tuples:
            if len(self.tuples[0]) != len(self.cols):
                raise ValueError(f"table {self.name!r}: rows of {len(self.tuples[0])} values, {len(self.cols)} columns")
            for c, col in zip(self.cols, zip(*self.tuples, strict=True), strict=True):
                self.data[c].extend(col)
            self.tuples.clear()
        arrays = []
        for f in self.spec.arrow_schema:
            if f.name == "load_id":
                arrays.append(pa.array([load_id] * n, pa.string()))
            elif f.name == "schema_version":
                arrays.append(pa.array([SCHEMA_VERSION] * n, pa.int16()))
            else:
                values = self.data[f.name]
                if len(values) != n:
                    raise ValueError(f"table {self.name!r}: column {f.name!r} has {len(values)} values for {n} rows")
                arrays.append(_array(values, f.type))
        for lst in self.data.values():
            lst.clear()  # in place: bound appenders stay valid
        return pa.Table.from_arrays(arrays, schema=self.spec.arrow_schema)


def _array(values: list, type_: pa.DataType) -> pa.Array:
    if type_ == TS:
        if all(v is None or isinstance(v, str) for v in values):
            return _ts_column(pa.chunked_array([pa.array(values, pa.string())]))
        return pa.array([_ts(v) for v in values], type_)
    return pa.array(values, type_)


def _ts_column(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """ISO-8601 strings -> timestamp[us, UTC]; unparseable values become NULL (never a failed batch)."""
    try:
        return col.cast(TS)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.chunked_array([pa.array([_ts(v) for v in col.to_pylist()], TS)])


def _ts(v):
    if v is None or isinstance(v, datetime):
        return v
    if isinstance(v, (int, float)):
        return datetime.fromtimestamp(v / 1000 if v > 1e11 else v).astimezone()
    s = str(v)
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    try:
        d = datetime.fromisoformat(s)
    except ValueError:
        return None
    if d.tzinfo is None:
        d = d.replace(tzinfo=UTC)
    return d


class Sink:
    """One buffer per table; ``flush()`` returns ``[(table, arrow_table), ...]``."""

    def __init__(self, load_id: str):
        self.load_id = load_id
        self.buffers: dict[str, TableBuffer] = {}
        self.bytes_hint = 0

    def buffer(self, table: str) -> TableBuffer:
        b = self.buffers.get(table)
        if b is None:
            b = self.buffers[table] = TableBuffer(table)
        return b

    def add(self, table: str, row: dict) -> None:
        self.buffer(table).add(row)

    def rows(self, table: str) -> int:
        b = self.buffers.get(table)
        return b.n if b else 0

    def flush(self) -> list[tuple[str, pa.Table]]:
        out = []
        for name, b in self.buffers.items():
            t = b.flush(self.load_id)
            if t is not None:
                out.append((name, t))
        self.bytes_hint = 0
        return out
