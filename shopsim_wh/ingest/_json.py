"""Strict JSON record parsing: one exception class per kind of bad input.

The fast path is ``orjson.loads``. Anything orjson rejects is classified by a slow path; anything
orjson accepts but might have altered silently (duplicate keys keep the last value, integers beyond
int64 become floats) is re-checked with Python's parser and strict hooks. The trigger for that
re-check is cheap: the re-serialised record is not the same length as the input, or the input holds
a run of 19+ digits.
"""

from __future__ import annotations

import json
import math
import re

import orjson

BOM = b"\xef\xbb\xbf"
MESSAGE_CAP = 500
DEFAULT_MAX_FIELD_BYTES = 8 * 1024 * 1024
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_LONG_DIGITS = re.compile(rb"\d{19,}")
_DIGIT_MAP = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))  # digits -> "0", others -> " "
_NINETEEN = b"0" * 19


def has_long_digit_run(data: bytes) -> bool:
    """True when ``data`` holds a run of digits that may be an integer outside int64.

    Cheap first pass (19 consecutive digits anywhere); 19-digit runs that fit int64 (e.g. 63-bit seeds)
    do not count, so such records stay on the fast path."""
    if data.translate(_DIGIT_MAP).find(_NINETEEN) < 0:
        return False
    for m in _LONG_DIGITS.finditer(data):
        digits = m.group()
        neg = m.start() > 0 and data[m.start() - 1:m.start()] == b"-"
        if len(digits) > 19 or int(digits) > (INT64_MAX + 1 if neg else INT64_MAX):
            return True
    return False
_NONFINITE = re.compile(rb"(?<![\w\"])-?(NaN|Infinity)(?![\w\"])")


class RecordError(Exception):
    """A record that cannot be used; ``error_class`` is the ingest_errors class."""

    def __init__(self, error_class: str, message: str, at: int | None = None):
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        self.at = at  # byte position inside the record, when known


def cap(msg: str, n: int = MESSAGE_CAP) -> str:
    return msg if len(msg) <= n else msg[: n - 1] + "…"


class _Dup(Exception):
    pass


def _pairs(pairs):
    d = dict(pairs)
    if len(d) != len(pairs):
        seen = set()
        for k, _ in pairs:
            if k in seen:
                raise _Dup(k)
            seen.add(k)
    return d


def _int(s: str):
    v = int(s)
    if v < INT64_MIN or v > INT64_MAX:
        raise RecordError("huge_number", f"integer {s[:40]}{'…' if len(s) > 40 else ''} ({len(s)} digits) does not fit in int64; "
                          "store it as a string in the producer")
    return v


def _float(s: str):
    v = float(s)
    if math.isinf(v):
        raise RecordError("huge_number", f"number {s[:40]} overflows a 64-bit float")
    return v


def _const(s: str):
    raise RecordError("non_finite_number", f"{s} is not valid JSON (non-finite number); write null or a string instead")


def strict_python_parse(data: bytes | str):
    """Python's parser with strict hooks (slow path); raises RecordError."""
    try:
        return json.loads(data, object_pairs_hook=_pairs, parse_int=_int, parse_float=_float, parse_constant=_const)
    except _Dup as e:
        raise RecordError("duplicate_key", f"duplicate key {str(e.args[0])[:80]!r} in one object "
                          "(parsers disagree on which value wins); fix the producer") from None
    except RecursionError:
        raise RecordError("too_deep", "nesting too deep to parse (RecursionError)") from None
    except RecordError:
        raise
    except ValueError as e:
        raise RecordError("invalid_json", cap(f"invalid JSON: {e}")) from None


def _classify(data: bytes, err: Exception) -> RecordError:
    nul = data.find(b"\x00")
    if nul >= 0:
        return RecordError("nul_byte", f"raw NUL byte at byte {nul} of the record (not allowed in JSON text)", nul)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as u:
        return RecordError("invalid_utf8", f"invalid UTF-8 at byte {u.start} of the record: {u.reason}; "
                           "re-encode the file as UTF-8", u.start)
    msg = str(err)
    if "depth limit" in msg or "recursion" in msg.lower():
        return RecordError("too_deep", "nesting deeper than 1024 levels (orjson depth limit / RecursionError)")
    if "infinity" in msg or _NONFINITE.search(data):
        try:
            strict_python_parse(text)
        except RecordError as e:
            if e.error_class in ("non_finite_number", "huge_number", "too_deep", "duplicate_key"):
                return e
    return RecordError("invalid_json", cap(f"invalid JSON: {msg}"))


def parse_record(data: bytes, max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES, check_exact: bool = True):
    """Parse one JSON record. Returns ``(obj, bom)``; ``bom`` is True when a BOM was stripped.

    Raises :class:`RecordError` for every rejected input class.
    """
    bom = False
    if data.startswith(BOM):
        data = data[3:]
        bom = True
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise _classify(data, e) from None
    if check_exact:
        stripped = data.strip()
        compact = orjson.dumps(obj)
        if (len(compact) != len(stripped) and not _same_as_python_dumps(obj, stripped, compact)) \
                or has_long_digit_run(stripped):
            obj = strict_python_parse(stripped)
    if len(data) > max_field_bytes:
        check_oversized(obj, max_field_bytes)
    return obj, bom


def _same_as_python_dumps(obj, stripped: bytes, compact: bytes) -> bool:
    """True when ``stripped`` is ``compact`` (orjson's re-serialisation of what it parsed) plus spaces between
    tokens - Python ``json.dumps`` spacing (``", "`` / ``": "``), as the ShopSimRL store writes - i.e. nothing was
    lost in parsing (no duplicate key). Space counts only (memchr speed): string contents are serialised alike
    in both, so the extra bytes must all be spaces; a dropped duplicate member removes at least 5 bytes that are
    not all spaces. (As with the compact check, a number respelled longer by orjson could mask a drop; the
    digit-run check covers the numbers that matter.)"""
    n = len(stripped) - len(compact)
    return n > 0 and n == stripped.count(b" ") - compact.count(b" ")


def check_oversized(obj, limit: int) -> None:
    stack = [(obj, "$")]
    while stack:
        o, path = stack.pop()
        if isinstance(o, str):
            if len(o) > limit // 4 and len(o.encode()) > limit:
                raise RecordError("oversized_field", f"field {path[:200]} holds {len(o.encode())} bytes "
                                  f"(limit {limit}); raise max_field_bytes or trim the producer's output")
        elif isinstance(o, dict):
            stack.extend((v, f"{path}.{k}") for k, v in o.items())
        elif isinstance(o, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(o))
