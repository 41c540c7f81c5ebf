"""Input plumbing: expanding paths, opening (``.gz`` / ``.zst``) inputs, hashing, line iteration."""

from __future__ import annotations

import glob
import gzip
import hashlib
import os
import re
import stat
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa

from ..core.errors import IngestError

READ_BLOCK = 8 * 1024 * 1024
DATA_SUFFIXES = (".jsonl", ".json", ".ndjson")
COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd")
# Files that live beside a v4 traces.jsonl and describe the run rather than hold records.
SIDECAR_NAMES = {"manifest.json", "summary.json", "mask_assignments.json"}  # v4 companions (v4.companions)
# The longest record ingest holds in memory: a JSONL line, or an input read as one JSON document. A longer line
# is one ``record_too_large`` row and is skipped while streaming (never held whole); docs/ingest.md "Bad input".
DEFAULT_MAX_RECORD_BYTES = 64 * 1024 * 1024
MAX_RECORD_ENV = "SHOPSIM_WH_MAX_RECORD_BYTES"
_SIZE = re.compile(r"\s*(\d+)\s*([kmg]i?b?|b)?\s*", re.I)


def parse_size(text: str | int, what: str = "size") -> int:
    """``1048576``, ``64MB``, ``64MiB``, ``512k`` -> bytes (K/M/G are powers of 1024); IngestError otherwise."""
    if isinstance(text, int) and not isinstance(text, bool):
        n = text
    elif isinstance(text, str) and (m := _SIZE.fullmatch(text)):
        n = int(m.group(1)) * 1024 ** " kmg".index((m.group(2) or " ")[0].lower().replace("b", " "))
    else:
        n = 0
    if n < 1:
        raise IngestError(f"{what} must be a positive number of bytes such as 1048576, 64MB or 1GB, not {text!r}")
    return n


def max_record_bytes(value: str | int | None = None) -> int:
    """The maximum record size: ``value`` (``IngestOptions(max_record_bytes=)``, ``--max-record-bytes``), else
    ``$SHOPSIM_WH_MAX_RECORD_BYTES``, else :data:`DEFAULT_MAX_RECORD_BYTES`."""
    if value is not None:
        return parse_size(value, "the maximum record size (--max-record-bytes)")
    if env := os.environ.get(MAX_RECORD_ENV, "").strip():
        return parse_size(env, f"${MAX_RECORD_ENV}")
    return DEFAULT_MAX_RECORD_BYTES


class TooLarge:
    """In place of a line longer than the maximum record size: its size, never its bytes."""

    __slots__ = ("size", "partial")

    def __init__(self, size: int, partial: bool = False):
        self.size, self.partial = size, partial  # partial: the input ended (or was cut) inside the line

    def __len__(self) -> int:
        return self.size

    def message(self, limit: int, what: str = "record") -> str:
        seen = f"{'at least ' if self.partial else ''}{self.size} bytes"
        return (f"this {what} holds {seen}, more than the maximum record size of {limit} bytes: skipped unread; "
                f"raise --max-record-bytes (or ${MAX_RECORD_ENV}) if such records are real, or fix the producer")


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
                raise IngestError(f"{s}: {_not_a_file(p)}")
    return out


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_a_file(p: Path) -> str:
    """Why ``p`` (neither a directory nor a regular file) is no input: what it is, from ``stat`` (never opened,
    so a FIFO with no writer cannot block)."""
    try:
        mode = p.stat().st_mode
    except OSError:
        return "no such file or directory"
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return f"is {kind}: ingest reads regular files; copy it to a file first (e.g. cat {p} > trace.jsonl)"


class _Tolerant:
    """A decompressing reader that stops at the end of a cut-short or corrupt stream instead of raising.

    ``truncated`` (the stream ends early) or ``corrupt`` (the decoder refuses the data: bad header, bad block,
    checksum mismatch) is then the decompressor's complaint; everything decodable before it is returned
    (pyarrow's zstd stream drops the block it was decoding when it fails, so that tail is re-read in
    ever smaller pieces: a few extra passes, only for a broken file)."""

    def __init__(self, path: Path, kind: str):
        self.path, self.kind = path, kind
        self.truncated: str | None = None
        self.corrupt: str | None = None
        self.pos = 0
        self._s = self._open()

    def _broken(self, e: BaseException) -> None:
        msg = f"{type(e).__name__}: {e}"
        if isinstance(e, EOFError) or str(e).startswith("Truncated compressed stream"):
            self.truncated = msg
        else:  # zlib.error, gzip.BadGzipFile, "ZSTD decompress failed: ..."
            self.corrupt = msg

    def _open(self):
        if self.kind == "gzip":
            return gzip.open(self.path, "rb")
        return pa.input_stream(str(self.path), compression="zstd")

    def read(self, n: int = -1) -> bytes:
        if self.truncated is not None or self.corrupt is not None:
            return b""
        if self.kind == "gzip":  # read1 pieces: GzipFile.read(n) drops what it decoded when the stream ends early
            parts, want = [], READ_BLOCK if n is None or n < 0 else n
            try:
                while want > 0 and (piece := self._s.read1(want)):
                    parts.append(piece)
                    want -= len(piece) if n is not None and n >= 0 else 0
            except (EOFError, OSError, zlib.error) as e:
                self._broken(e)
                if isinstance(e, zlib.error):  # the failing read1 dropped what it had decoded before the damage
                    parts.append(self._salvage(sum(map(len, parts))))
            b = b"".join(parts)
        else:
            try:
                b = self._s.read() if n is None or n < 0 else self._s.read(n)
            except OSError as e:
                self._broken(e)
                b = self._salvage()
        self.pos += len(b)
        return b

    def _salvage(self, got: int = 0) -> bytes:
        """What decodes after ``pos`` + ``got`` before the failure, re-read in ever smaller pieces (skipping ``pos`` a
        block at a time: memory stays at one block)."""
        out = bytearray()
        for chunk in (4096, 64, 1):
            s = self._open()
            try:
                left = self.pos + got + len(out)
                while left > 0 and (b := s.read(min(left, READ_BLOCK))):
                    left -= len(b)
                while b := s.read(chunk):
                    out += b
            except (OSError, EOFError, zlib.error):
                pass
            finally:
                s.close()
        return bytes(out)

    def close(self) -> None:
        self._s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_binary(path: Path):
    """The decompressed bytes of ``path``; a cut-short (corrupt) ``.gz`` / ``.zst`` reads to its cut (to the damage)
    and sets ``.truncated`` (``.corrupt``)."""
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


def damage(stream) -> tuple[str, str] | None:
    """``(error_class, message)`` of a compressed input that is cut short (``truncated_file``) or that its decoder
    refuses (``corrupt_archive``, with the decoder's message); None when it is whole or not compressed."""
    if (c := getattr(stream, "corrupt", None)) is not None:
        tool = "gzip -t" if stream.kind == "gzip" else "zstd -t"
        kept = ("the records decoded before the damage are kept, the rest is unreadable" if stream.pos
                else "nothing in it could be decoded")
        return "corrupt_archive", (
            f"the {'.gz' if stream.kind == 'gzip' else '.zst'} archive is corrupt, its decoder says {c!r} after "
            f"{stream.pos} decoded bytes: {kept}; check the file with `{tool}` and ingest an intact copy at the "
            "same path (it replaces this run)")
    return None if (t := truncation(stream)) is None else ("truncated_file", t)


def read_head(path: Path, n: int = 65536) -> bytes:
    return probe_head(path, n)[0]


def probe_head(path: Path, n: int = 65536) -> tuple[bytes, tuple[str, str] | None]:
    """The first ``n`` decompressed bytes and the input's :func:`damage` when it shows there already."""
    with open_binary(path) as f:
        out = b""
        while len(out) < n:
            chunk = f.read(n - len(out))
            if not chunk:
                break
            out += chunk
        return out, damage(f)


def read_capped(stream, limit: int, on_bytes=None) -> bytes | TooLarge:
    """All of ``stream`` when it holds at most ``limit`` bytes; else a :class:`TooLarge` with its size, the rest
    read and dropped a block at a time (a whole-document input: memory stays at the limit)."""
    parts, n = [], 0
    while block := stream.read(min(READ_BLOCK, limit + 1 - n) if n <= limit else READ_BLOCK):
        if on_bytes is not None:
            on_bytes(len(block))
        n += len(block)
        if n <= limit:
            parts.append(block)
        elif parts:
            parts = []
    return b"".join(parts) if n <= limit else TooLarge(n)


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


def split_lines(data: bytes, max_line: int = DEFAULT_MAX_RECORD_BYTES) -> Iterator[tuple[int, int, bytes, bool]]:
    """The lines of bytes already in memory, as :func:`iter_lines` yields them (no stream copies)."""
    start = line_no = 0
    find, n = data.find, len(data)
    while start < n:
        nl = find(b"\n", start)
        end = n if nl < 0 else nl
        line_no += 1
        if end - start > max_line:
            yield line_no, start, TooLarge(end - start), nl >= 0
        else:
            line = data[start:end - 1] if end > start and data[end - 1] == 13 else data[start:end]
            if line and not line.isspace():
                yield line_no, start, line, nl >= 0
        start = end + 1


def iter_lines(stream, on_bytes=None, max_line: int = DEFAULT_MAX_RECORD_BYTES,
               counter: list | None = None) -> Iterator[tuple[int, int, bytes | TooLarge, bool]]:
    """Yield ``(line_no, byte_offset, line, terminated)`` from a binary stream, 1-based lines.

    ``line`` excludes the ``\\n`` (and a trailing ``\\r``); ``terminated`` is False only for a last
    line without newline (a possibly torn write). Blank lines are skipped (still counted). A line longer than
    ``max_line`` comes as a :class:`TooLarge` (its size): once it passes the limit its bytes are dropped up to
    its newline, so memory holds at most ``max_line`` + one read block. ``counter`` (``[lines, bytes]``), when
    given, ends as the stream's line count (a last line without newline included) and byte count.
    """
    buf = b""
    offset = line_no = 0  # offset of buf[0] in the stream; lines before it
    skip = -1  # while dropping a too-long line: its bytes so far
    total = 0
    while True:
        block = stream.read(READ_BLOCK)
        if on_bytes is not None and block:
            on_bytes(len(block))
        if not block:
            break
        total += len(block)
        if skip >= 0:
            nl = block.find(b"\n")
            if nl < 0:
                skip += len(block)
                continue
            line_no += 1
            yield line_no, offset, TooLarge(skip + nl), True
            offset += skip + nl + 1
            skip, block = -1, block[nl + 1:]
        buf = buf + block if buf else block
        cut = buf.rfind(b"\n") + 1  # the complete lines in buf end here
        if cut:
            whole = buf if cut == len(buf) else buf[:cut]
            for no, off, line, _ in split_lines(whole, max_line):
                yield line_no + no, offset + off, line, True
            line_no += whole.count(b"\n")
            offset += cut
            buf = buf[cut:]
        if len(buf) > max_line:  # the line being read is already too long: drop it up to its newline
            skip, buf = len(buf), b""
    if skip >= 0:  # the input ended inside a too-long line
        line_no += 1
        yield line_no, offset, TooLarge(skip, partial=True), False
    else:
        for no, off, line, terminated in split_lines(buf, max_line):  # a last line without newline
            yield line_no + no, offset + off, line, terminated
        line_no += buf.count(b"\n") + (1 if buf and not buf.endswith(b"\n") else 0)
    if counter is not None:
        counter[:] = [line_no, total]
