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
SIDECAR_NAMES = {"manifest.json", "summary.json", "mask_assignments.json"}  # v4 companions (v4.companions)


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


class _Tolerant:
    """A decompressing reader that stops at the end of a cut-short stream instead of raising.

    ``truncated`` is then the decompressor's complaint; everything decodable before the cut is returned
    (pyarrow's zstd stream drops the block it was decoding when it hits the end, so that tail is re-read in
    ever smaller pieces: a few extra passes, only for a broken file)."""

    def __init__(self, path: Path, kind: str):
        self.path, self.kind = path, kind
        self.truncated: str | None = None
        self.pos = 0
        self._s = self._open()

    def _open(self):
        if self.kind == "gzip":
            return gzip.open(self.path, "rb")
        return pa.input_stream(str(self.path), compression="zstd")

    def read(self, n: int = -1) -> bytes:
        if self.truncated is not None:
            return b""
        if self.kind == "gzip":  # read1 pieces: GzipFile.read(n) drops what it decoded when the stream ends early
            parts, want = [], READ_BLOCK if n is None or n < 0 else n
            try:
                while want > 0 and (piece := self._s.read1(want)):
                    parts.append(piece)
                    want -= len(piece) if n is not None and n >= 0 else 0
            except (EOFError, OSError) as e:
                self.truncated = f"{type(e).__name__}: {e}"
            b = b"".join(parts)
        else:
            try:
                b = self._s.read() if n is None or n < 0 else self._s.read(n)
            except OSError as e:
                self.truncated = f"{type(e).__name__}: {e}"
                b = self._salvage()
        self.pos += len(b)
        return b

    def _salvage(self) -> bytes:
        out = b""
        for chunk in (4096, 64, 1):
            s = self._open()
            try:
                if self.pos + len(out):
                    s.read(self.pos + len(out))
                while b := s.read(chunk):
                    out += b
            except (OSError, EOFError):
                pass
            finally:
                s.close()
        return out

    def close(self) -> None:
        self._s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_binary(path: Path):
    """The decompressed bytes of ``path``; a cut-short ``.gz`` / ``.zst`` reads to its cut and sets ``.truncated``."""
    name = path.name.lower()
    if name.endswith(".gz"):
        return _Tolerant(path, "gzip")
    if name.endswith((".zst", ".zstd")):
        return _Tolerant(path, "zstd")
    return open(path, "rb", buffering=0)


def truncation(stream) -> str | None:
    """The complaint of a compressed input that ended early (None when it is whole or not compressed)."""
    t = getattr(stream, "truncated", None)
    return None if t is None else (
        f"the compressed input ends early ({t}), it was cut short: the records before the cut are kept; "
        "copy or download the file again to get the rest")


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
