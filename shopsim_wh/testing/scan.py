"""Secret / private-data scanner: find canary strings in everything a run or an ingest wrote.

A raw ``grep`` cannot see into zstd-compressed Parquet pages, gzip / zstd files or ``\\uXXXX``-escaped JSON, so
this decodes: every Parquet file is read column by column (nested values walked, key-value metadata
included), ``.gz`` / ``.zst`` content is decompressed and scanned as what it holds, JSON / JSONL is parsed and
its strings walked (and its raw text searched too), and anything else is searched as bytes and as UTF-8 text.

    hits = scan_paths([warehouse_root, log_file], ["sk-canary-...", "goalsig-..."],
                      allow={"episodes.purchase_asin"})
    assert hits == []

``allow`` names columns (``column`` or ``table.column``; the table is the Hive directory above
``run_id=...``) where a needle may legitimately appear (outcome columns). Each :class:`Hit` says where.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

GZIP_MAGIC, ZSTD_MAGIC, PARQUET_MAGIC = b"\x1f\x8b", b"\x28\xb5\x2f\xfd", b"PAR1"


@dataclass(frozen=True)
class Hit:
    path: str
    where: str  # column, JSON path, "text" or "bytes"
    needle: str
    excerpt: str

    def __str__(self) -> str:
        return f"{self.path} [{self.where}]: {self.needle!r} in {self.excerpt!r}"


def _excerpt(text: str, needle: str) -> str:
    i = text.find(needle)
    return text[max(0, i - 40): i + len(needle) + 40]


class Needles:
    """The canaries, found fast: a regex over their distinct short prefixes finds candidate positions, a set
    lookup per needle length confirms (thousands of goal tokens sharing a prefix cost one pass)."""

    def __init__(self, needles: Iterable[str]):
        if isinstance(needles, Needles):
            needles = needles.items
        self.items = sorted({n for n in needles if n}, key=len, reverse=True)
        self.set = set(self.items)
        self.bset = {n.encode() for n in self.items}
        self.lengths = sorted({len(n) for n in self.items}, reverse=True)
        self.blengths = sorted({len(n) for n in self.bset}, reverse=True)
        k = min((len(n) for n in self.items), default=0)
        k = min(k, 6)
        prefixes = sorted({n[:k] for n in self.items})
        self.rx = re.compile("|".join(map(re.escape, prefixes))) if prefixes else None
        self.brx = re.compile(b"|".join(re.escape(p.encode()) for p in prefixes)) if prefixes else None

    def found(self, text: str) -> list[str]:
        if self.rx is None:
            return []
        out = []
        for m in self.rx.finditer(text):
            i = m.start()
            out += [text[i:i + n] for n in self.lengths if text[i:i + n] in self.set]
        return list(dict.fromkeys(out))

    def found_bytes(self, data: bytes) -> list[str]:
        if self.brx is None:
            return []
        out = []
        for m in self.brx.finditer(data):
            i = m.start()
            out += [data[i:i + n].decode() for n in self.blengths if data[i:i + n] in self.bset]
        return list(dict.fromkeys(out))


def scan_text(text: str, needles: Iterable[str], path: str = "<text>", where: str = "text") -> list[Hit]:
    """Hits of each needle in one string (a captured stderr, a log, an error message)."""
    nd = needles if isinstance(needles, Needles) else Needles(needles)
    return [Hit(path, where, n, _excerpt(text, n)) for n in nd.found(text)]


def _walk(value, where: str) -> Iterator[tuple[str, str]]:
    """(where, string) for every string (and bytes, decoded) inside a nested value."""
    stack = [(value, where)]
    while stack:
        v, w = stack.pop()
        if isinstance(v, str):
            yield w, v
        elif isinstance(v, (bytes, bytearray)):
            yield w, bytes(v).decode("utf-8", "replace")
        elif isinstance(v, dict):
            stack.extend((x, f"{w}.{k}") for k, x in v.items())
            stack.extend((k, f"{w}.<key>") for k in v if isinstance(k, str))
        elif isinstance(v, (list, tuple)):
            stack.extend((x, w) for x in v)


def _table_of(path: str) -> str:
    parts = Path(path).parts
    for i, part in enumerate(parts):
        if part.startswith("run_id=") and i:
            return parts[i - 1]
    return Path(path).parent.name


def _scan_parquet(data: bytes, path: str, needles: list[str], allow: set[str]) -> list[Hit]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(io.BytesIO(data))
    hits: list[Hit] = []
    meta = pf.schema_arrow.metadata or {}
    for k, v in meta.items():
        hits += scan_text(k.decode("utf-8", "replace") + "=" + v.decode("utf-8", "replace"), needles, path, "metadata")
    table_name = _table_of(path)
    tab = pf.read()
    for name in tab.column_names:
        if name in allow or f"{table_name}.{name}" in allow:
            continue
        for w, s in _walk(tab.column(name).to_pylist(), name):
            if needles.rx is not None and needles.rx.search(s):
                hits += scan_text(s, needles, path, w)
    return hits


def _scan_json(text: str, path: str, needles: list[str]) -> list[Hit] | None:
    """Strings of a JSON document or JSONL lines (None when it is neither)."""
    try:
        docs = [json.loads(text)]
    except (ValueError, RecursionError):
        try:
            docs = [json.loads(line) for line in text.splitlines() if line.strip()]
        except (ValueError, RecursionError):  # not JSON (or a depth bomb): the caller searches the text
            return None
    hits: list[Hit] = []
    for doc in docs:
        for w, s in _walk(doc, "$"):
            if needles.rx is not None and needles.rx.search(s):
                hits += scan_text(s, needles, path, w)
    return hits


def scan_bytes(data: bytes, path: str, needles: Iterable[str], allow: Iterable[str] = ()) -> list[Hit]:
    """Hits in one file's bytes, decoded by what they are (see the module docstring)."""
    needles, allow = (needles if isinstance(needles, Needles) else Needles(needles)), set(allow)
    if data.startswith(GZIP_MAGIC):
        try:
            return scan_bytes(gzip.decompress(data), path + "!gunzip", needles, allow)
        except (OSError, EOFError):
            pass  # a torn archive: scan what is there as bytes
    if data.startswith(ZSTD_MAGIC):
        import pyarrow as pa

        try:
            with pa.input_stream(pa.py_buffer(data), compression="zstd") as s:
                return scan_bytes(s.read(), path + "!unzstd", needles, allow)
        except (OSError, ValueError):
            pass
    if data.startswith(PARQUET_MAGIC) and data.endswith(PARQUET_MAGIC) and len(data) > 8:
        return _scan_parquet(data, path, needles, allow)
    raw_hits = [Hit(path, "bytes", n, "") for n in needles.found_bytes(data)]
    text = data.decode("utf-8", "replace")
    if text.lstrip()[:1] in ("{", "["):
        found = _scan_json(text, path, needles)
        if found is not None:
            return _dedupe(found + [h for h in raw_hits if not any(f.needle == h.needle for f in found)])
    return _dedupe(scan_text(text, needles, path) or raw_hits)


def _dedupe(hits: list[Hit]) -> list[Hit]:
    return list(dict.fromkeys(hits))


def scan_paths(paths: Iterable[str | os.PathLike], needles: Iterable[str], allow: Iterable[str] = ()) -> list[Hit]:
    """Hits in every file under the given files / directories (recursively)."""
    needles, allow = Needles(needles), set(allow)
    hits: list[Hit] = []
    for p in paths:
        p = Path(p)
        files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
        for f in files:
            hits += scan_bytes(f.read_bytes(), str(f), needles, allow)
    return hits


def count_files(paths: Iterable[str | os.PathLike]) -> int:
    """How many files :func:`scan_paths` would read (for reports)."""
    return sum(1 if Path(p).is_file() else sum(1 for f in Path(p).rglob("*") if f.is_file()) for p in paths)
