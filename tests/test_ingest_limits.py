"""Issue 28: ingest memory is bounded by a maximum record size; corrupt archives and FIFOs are named as such.

Journeys through the installed CLI on bytes the code under test did not write (ShopSimRL records as raw JSON lines,
the third-party tau-bench fixture): a one-line decompression bomb and a record padded with spaces (serial,
compressed and parallel paths) land the records around them plus one ``record_too_large`` row, and the process
tree's peak RSS stays below the size of the line it skipped (measured by a wrapper process: its
``RUSAGE_CHILDREN``); whole-document inputs are capped; corrupt ``.gz`` / ``.zst`` say corrupt with the decoder's
message; a FIFO is named and refused without being opened. Sizes and rows are asserted, never seconds.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from shopsim_wh.ingest import _io
from shopsim_wh.ingest._io import TooLarge, iter_lines, split_lines

from . import shopsimrl_raw as raw
from .conftest import REPO
from .journeys import CLI, ok, shopsim

MiB = 1 << 20
BOMB = 256 * MiB  # the one line: small enough for CI (a second to write, a second to skip), far above the bound
TAU = REPO / "tests" / "fixtures" / "third_party" / "tau_bench" / "gpt-4o-airline.json"


def lines(n: int, first: int = 0) -> list[bytes]:
    """``n`` ShopSimRL records as the store appends them (``json.dumps(ensure_ascii=False)`` + newline)."""
    prov = raw.provenance(raw.NO_SKILLS)
    return [(json.dumps(raw.record(raw.job("test", t), prov, 1.0, {"r_type": 1.0}), ensure_ascii=False) + "\n")
            .encode() for t in range(first, first + n)]


def padded(rec: bytes, pad: bytes, n: int):
    """``rec`` (one line) with a member ``"pad"`` of ``n`` bytes of ``pad`` (a string's, or spaces between
    tokens): yields pieces, never the whole line."""
    body = rec.rstrip(b"\n")[:-1]
    if pad == b" ":
        yield body
        piece, left = b" " * MiB, n
    else:
        yield body + b', "pad": "'
        piece, left = pad * MiB, n
    while left:
        yield piece[:min(left, MiB)]
        left -= min(left, MiB)
    yield (b"}" if pad == b" " else b'"}') + b"\n"


def peak_rss(*args, cwd: Path, env: dict | None = None) -> tuple[subprocess.CompletedProcess, int]:
    """Run the CLI under a wrapper process; also return the peak RSS (bytes) of the CLI and its workers."""
    wrapper = ("import resource, subprocess, sys\nr = subprocess.run(sys.argv[1:])\n"
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, file=sys.stderr)\n"
               "sys.exit(r.returncode)")
    res = subprocess.run([sys.executable, "-c", wrapper, *CLI, *map(str, args)], capture_output=True, text=True,
                         timeout=300, cwd=cwd, env={**os.environ, "NO_COLOR": "1", **(env or {})})
    return res, int(res.stderr.strip().splitlines()[-1])


def sql(cwd: Path, query: str) -> list[dict]:
    return json.loads(ok(shopsim("sql", "-w", "wh", "--format", "json", query, cwd=cwd)).stdout)


def errors(cwd: Path) -> list[tuple]:
    return [(r["line"], r["byte_offset"], r["error_class"], r["message"]) for r in
            sql(cwd, "select line, byte_offset, error_class, message from ingest_errors order by line nulls last")]


def test_gz_bomb_is_one_row_and_costs_no_more_than_its_cap(tmp_path):
    """A 1 MB .gz that expands to one 256 MiB line between good records (the limit from the environment here)."""
    good = lines(6)
    with gzip.open(tmp_path / "traces.jsonl.gz", "wb", compresslevel=1) as g:
        g.writelines(good[:3])
        for piece in padded(good[3], b"x", BOMB):
            g.write(piece)
        g.writelines(good[4:])
    assert (tmp_path / "traces.jsonl.gz").stat().st_size < 2 * MiB
    res, peak = peak_rss("ingest", "-q", "-w", "wh", "traces.jsonl.gz", cwd=tmp_path,
                         env={"SHOPSIM_WH_MAX_RECORD_BYTES": "1MB"})
    ok(res)
    assert peak < BOMB, f"peak RSS {peak >> 20} MiB: the skipped line was held in memory"
    got = errors(tmp_path)
    size = sum(map(len, padded(good[3], b"x", BOMB))) - 1
    assert got == [(4, sum(map(len, good[:3])), "record_too_large", got[0][3])]
    assert f"holds {size} bytes, more than the maximum record size of {MiB} bytes" in got[0][3]
    assert [r["task_id"] for r in sql(tmp_path, "select task_id from episodes order by 1")] == [0, 1, 2, 4, 5]


def test_parallel_path_skips_a_record_of_spaces(tmp_path):
    """An uncompressed file past the parallel threshold: one record padded with 256 MiB of spaces (valid JSON), a
    bad line in the next chunk; the workers stream their byte ranges, the parent numbers the lines file-wide."""
    from shopsim_wh.ingest.v4 import PIPELINE_MIN_BYTES

    good = lines(8)
    with open(tmp_path / "traces.jsonl", "wb") as f:
        f.writelines(good[:3])
        f.writelines(padded(good[3], b" ", BOMB))
        f.writelines([good[4], b'{"schema_version": "shopsimrl-episode-v4", "episode_id": \n', *good[5:]])
    assert (tmp_path / "traces.jsonl").stat().st_size >= PIPELINE_MIN_BYTES
    res, peak = peak_rss("ingest", "-q", "-w", "wh", "--max-record-bytes", "1MiB", "traces.jsonl", cwd=tmp_path)
    ok(res)
    assert peak < BOMB, f"peak RSS {peak >> 20} MiB: the skipped line was held in memory"
    got = errors(tmp_path)
    assert [(g[0], g[2]) for g in got] == [(4, "record_too_large"), (6, "invalid_json")]
    assert got[0][1] == sum(map(len, good[:3])) and f"holds {BOMB + len(good[3]) - 1} bytes" in got[0][3]
    assert got[1][1] == sum(map(len, good[:3])) + BOMB + len(good[3]) + len(good[4])
    assert [r["task_id"] for r in sql(tmp_path, "select task_id from episodes order by 1")] == [0, 1, 2, 4, 5, 6, 7]
    runs = sql(tmp_path, "select provenance from runs")
    assert "parallel_fallback" not in runs[0]["provenance"]


def test_whole_document_readers_are_capped(tmp_path):
    """The tau-bench array (4 MB) read whole only under the cap; as JSONL it streams, one huge line skipped."""
    res = shopsim("ingest", "-w", "wh", "--output", "json", "--max-record-bytes", "1MB", "-f", "openai-messages",
                  TAU, cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["files"][0]["status"] == "no_valid_record"
    (row,) = errors(tmp_path)
    assert row[2] == "record_too_large" and "JSON array (read whole by the openai-messages reader)" in row[3]
    assert f"holds {TAU.stat().st_size} bytes" in row[3]

    elements = json.loads(TAU.read_text())
    body = [json.dumps(e).encode() + b"\n" for e in elements]
    huge = json.dumps({**elements[0], "task_id": 999, "pad": "y" * (3 * MiB)}).encode() + b"\n"
    (tmp_path / "tau.jsonl").write_bytes(b"".join([*body[:5], huge, *body[5:]]))
    ok(shopsim("ingest", "-q", "-w", "wh", "--max-record-bytes", "1MB", "-f", "openai-messages", "tau.jsonl",
               cwd=tmp_path))
    got = sql(tmp_path, "select line, byte_offset, error_class from ingest_errors where source_file like '%tau.jsonl'")
    assert got == [{"line": 6, "byte_offset": sum(map(len, body[:5])), "error_class": "record_too_large"}]
    n = sql(tmp_path, "select count(*) as n from episodes e join runs r using (run_id) "
                      "where r.source_file like '%tau.jsonl'")[0]["n"]
    assert n == len(elements)


def _zstd(data: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as s:
        s.write(data)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("kind", ["gz", "zst"])
def test_corrupt_archive_says_corrupt_with_the_decoders_message(tmp_path, kind):
    """A whole member / frame of good records, then a damaged one: the records before land, one corrupt_archive
    row and the unit's status carry the decoder's words; a file that is no archive at all, and an empty archive,
    are told apart."""
    good = b"".join(lines(5))
    if kind == "gz":  # a second member whose first deflate block has the invalid type 11
        data = gzip.compress(good, mtime=0) + gzip.compress(b"", mtime=0)[:10] + b"\xff" * 32
        decoder = "Error -3 while decompressing data: invalid block type"
    else:  # a second frame whose first block is garbage
        data = _zstd(good) + b"\x28\xb5\x2f\xfd\x00\x48" + b"\xff" * 32
        decoder = "ZSTD decompress failed: Data corruption detected"
    (tmp_path / f"traces.jsonl.{kind}").write_bytes(data)
    (tmp_path / f"notarchive.jsonl.{kind}").write_bytes(good)
    (tmp_path / f"empty.jsonl.{kind}").write_bytes(gzip.compress(b"") if kind == "gz" else _zstd(b""))
    res = ok(shopsim("ingest", "-w", "wh", "--output", "json", f"traces.jsonl.{kind}", f"notarchive.jsonl.{kind}",
                     f"empty.jsonl.{kind}", cwd=tmp_path))
    files = {Path(f["path"]).name: f for f in json.loads(res.stdout)["files"]}
    damaged = files[f"traces.jsonl.{kind}"]
    assert damaged["status"] == "corrupt_archive" and damaged["episodes"] == 5
    assert decoder in damaged["message"] and "is corrupt" in damaged["message"]
    assert files[f"notarchive.jsonl.{kind}"]["status"] == "corrupt_archive"
    assert "nothing in it could be decoded" in files[f"notarchive.jsonl.{kind}"]["message"]
    assert files[f"empty.jsonl.{kind}"]["status"] == "no_valid_record"
    rows = sql(tmp_path, "select source_file, line, byte_offset, error_class, message from ingest_errors "
                         "order by source_file")
    by_file = {Path(r["source_file"]).name: r for r in rows}
    assert len(rows) == 3
    assert by_file[f"traces.jsonl.{kind}"]["error_class"] == "corrupt_archive"
    assert by_file[f"traces.jsonl.{kind}"]["byte_offset"] == len(good)
    assert decoder in by_file[f"traces.jsonl.{kind}"]["message"]
    assert by_file[f"notarchive.jsonl.{kind}"]["error_class"] == "corrupt_archive"
    assert by_file[f"empty.jsonl.{kind}"]["error_class"] == "empty_file"
    text = shopsim("ingest", "-w", "wh2", f"traces.jsonl.{kind}", cwd=tmp_path)  # the text report names it too
    assert f"corrupt_archive  {tmp_path / f'traces.jsonl.{kind}'}" in ok(text).stdout


def test_fifo_and_devices_are_named_and_never_opened(tmp_path):
    fifo = tmp_path / "traces.jsonl"
    os.mkfifo(fifo)  # no writer: opening it would block
    res = shopsim("ingest", "-w", "wh", fifo, cwd=tmp_path, timeout=60)
    assert res.returncode == 2
    assert f"{fifo}: is a FIFO (named pipe): ingest reads regular files; copy it to a file first" in res.stderr
    assert "no such file" not in res.stderr
    res = shopsim("ingest", "-w", "wh", "/dev/null", cwd=tmp_path, timeout=60)
    assert res.returncode == 2 and "/dev/null: is a character device" in res.stderr
    d = tmp_path / "runs" / "r1"  # inside a directory a FIFO is no data file: the traces beside it land
    d.mkdir(parents=True)
    (d / "traces.jsonl").write_bytes(b"".join(lines(2)))
    os.mkfifo(d / "more.jsonl")
    ok(shopsim("ingest", "-q", "-w", "wh", tmp_path / "runs", cwd=tmp_path, timeout=60))
    assert sql(tmp_path, "select count(*) as n from episodes")[0]["n"] == 2


def test_bad_limit_is_a_usage_error(tmp_path):
    (tmp_path / "t.jsonl").write_bytes(b"".join(lines(1)))
    res = shopsim("ingest", "-w", "wh", "--max-record-bytes", "lots", "t.jsonl", cwd=tmp_path)
    assert res.returncode == 2 and "must be a positive number of bytes such as 1048576, 64MB" in res.stderr
    res = shopsim("ingest", "-w", "wh", "t.jsonl", cwd=tmp_path, env={"SHOPSIM_WH_MAX_RECORD_BYTES": "0"})
    assert res.returncode == 2 and "$SHOPSIM_WH_MAX_RECORD_BYTES must be a positive number" in res.stderr
    assert not (tmp_path / "wh").exists()


def reference(data: bytes, cap: int) -> list[tuple]:
    """What the line iterators must yield, computed the plain way (the whole input in memory)."""
    out, off = [], 0
    parts = data.split(b"\n")
    for i, part in enumerate(parts, start=1):
        terminated = i < len(parts)
        line = part[:-1] if part.endswith(b"\r") else part
        if len(part) > cap:
            out.append((i, off, ("too_large", len(part)), terminated))
        elif line.strip():
            out.append((i, off, line, terminated))
        off += len(part) + 1
    return out


def seen(items) -> list[tuple]:
    return [(n, o, ("too_large", x.size) if type(x) is TooLarge else x, t) for n, o, x, t in items]


class Pieces:
    """A stream that returns at most ``k`` bytes per read (as a pipe or a decompressor may)."""

    def __init__(self, data: bytes, k: int):
        self.data, self.k = data, k

    def read(self, n: int) -> bytes:
        b, self.data = self.data[:min(n, self.k)], self.data[min(n, self.k):]
        return b


@pytest.mark.parametrize("block", [7, 16, 64])
def test_line_iterators_skip_long_lines_exactly(monkeypatch, block):
    """Lines at, just over and far over the cap, in and across read blocks, CRLF, blank lines, and a too-long
    unterminated tail: iter_lines (streamed) and split_lines (in memory) agree with the plain split."""
    monkeypatch.setattr(_io, "READ_BLOCK", block)
    cap = 10
    cases = [b"a" * 10 + b"\nb" * 3 + b"\n" + b"c" * 11 + b"\n\n  \n" + b"d" * 100 + b"\r\n" + b"e" * 9 + b"\r\nf",
             b"x" * 10 + b"\r\n" + b"y" * 40, b"\n" * 5 + b"z" * 25, b"q" * 11, b""]
    for data in cases:
        want = reference(data, cap)
        if want and want[-1][2][0] == "too_large" and not want[-1][3]:
            want[-1] = (*want[-1][:3], False)
        counter = []
        got = seen(iter_lines(Pieces(data, block), None, cap, counter))
        assert got == want, data
        assert counter == [data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0), len(data)]
        assert seen(split_lines(data, cap)) == want
