"""Input plumbing: expanding paths, opening (``.gz`` / ``.zst``) inputs, hashing, line iteration."""

from __future__ import annotations

import glob
import gzip
import hashlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa

from ..errors import IngestError

READ_BLOCK = 8 * 1024 * 1024
DATA_SUFFIXES = (".jsonl", ".json", ".ndjson")
COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd")
# Files that live beside a v4 traces.jsonl and describe the run rather than hold records.
SIDECAR_NAMES = {"manifest.json", "summary.json"}


def base_suffix(path: Path) -> str:
    """The data suffix once compression suffixes are removed (``x.jsonl.gz`` -> ``.jsonl``)."""
    name = path.name.lower()
    for c in COMPRESSED_SUFFIXES:
        if name.endswith(c):
            name = name[: -len(c)]
            break
    return os.path.splitext(name)[1]


def is_candidate(path: Path) -> bool:
    return base_suffix(path) in DATA_SUFFIXES and path.name not in SIDECAR_NAMES


def expand_paths(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Files as given, directories recursively (data files only), globs; sorted, deduplicated."""
    out: list[Path] = []
    seen: set[Path] = set()

    def add(p: Path) -> None:
        rp = p.resolve()
        if rp not in seen:
            seen.add(rp)
            out.append(rp)

    for raw in paths:
        s = str(raw)
        matches = [Path(m) for m in sorted(glob.glob(s, recursive=True))] if glob.has_magic(s) else [Path(s)]
        if not matches:
            raise IngestError(f"no file matches {s!r}")
        for p in matches:
            if p.is_dir():
                for f in sorted(p.rglob("*")):
                    if f.is_file() and is_candidate(f):
                        add(f)
            elif p.is_file():
                add(p)
            else:
                raise IngestError(f"{s}: no such file or directory")
    return out


class _PyArrowReader:
    """File-like wrapper over a pyarrow input stream (zstd)."""

    def __init__(self, path: Path):
        self._s = pa.input_stream(str(path), compression="zstd")

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            return self._s.read()
        return self._s.read(n)

    def close(self) -> None:
        self._s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_binary(path: Path):
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rb")
    if name.endswith((".zst", ".zstd")):
        return _PyArrowReader(path)
    return open(path, "rb", buffering=0)


def read_head(path: Path, n: int = 65536) -> bytes:
    with open_binary(path) as f:
        out = b""
        while len(out) < n:
            chunk = f.read(n - len(out))
            if not chunk:
                break
            out += chunk
        return out


def sha256_files(paths: Iterable[Path]) -> str:
    """sha256 over the raw bytes of one file; over (name, length, bytes) of each when several."""
    paths = list(paths)
    h = hashlib.sha256()
    for i, p in enumerate(paths):
        if i:  # companions (e.g. Claude Code subagent files) are framed by their name
            h.update(b"\0" + p.name.encode() + b"\0" + str(p.stat().st_size).encode() + b"\0")
        with open(p, "rb", buffering=0) as f:
            while True:
                b = f.read(READ_BLOCK)
                if not b:
                    break
                h.update(b)
    return h.hexdigest()


def split_lines(data: bytes) -> Iterator[tuple[int, int, bytes, bool]]:
    """The lines of bytes already in memory, as :func:`iter_lines` yields them (no stream copies)."""
    start = line_no = 0
    find, n = data.find, len(data)
    while start < n:
        nl = find(b"\n", start)
        end = n if nl < 0 else nl
        line_no += 1
        line = data[start:end - 1] if end > start and data[end - 1] == 13 else data[start:end]
        if line and not line.isspace():
            yield line_no, start, line, nl >= 0
        start = end + 1


def iter_lines(stream, on_bytes=None) -> Iterator[tuple[int, int, bytes, bool]]:
    """Yield ``(line_no, byte_offset, line, terminated)`` from a binary stream, 1-based lines.

    ``line`` excludes the ``\\n`` (and a trailing ``\\r``); ``terminated`` is False only for a last
    line without newline (a possibly torn write). Blank lines are skipped (still counted).
    """
    buf = b""
    offset = line_no = 0  # offset of buf[0] in the stream; lines before it
    while True:
        block = stream.read(READ_BLOCK)
        if on_bytes is not None and block:
            on_bytes(len(block))
        if not block:
            break
        buf = buf + block if buf else block
        cut = buf.rfind(b"\n") + 1  # the complete lines in buf end here
        if not cut:
            continue
        whole = buf if cut == len(buf) else buf[:cut]
        for no, off, line, _ in split_lines(whole):
            yield line_no + no, offset + off, line, True
        line_no += whole.count(b"\n")
        offset += cut
        buf = buf[cut:]
    for no, off, line, terminated in split_lines(buf):  # a last line without newline
        yield line_no + no, offset + off, line, terminated
