"""Benchmark: ingest of a decompression bomb at the default maximum record size (issue 28).

    .venv/bin/python bench/bench_ingest_bomb.py                  # a 1 GiB line in a ~1.3 MB .gz (~15 s)
    .venv/bin/python bench/bench_ingest_bomb.py --line-mib 256   # smaller

Writes ``bomb/traces.jsonl.gz``: N good ShopSimRL records, one record whose string field holds ``--line-mib`` MiB
(a single line, streamed into gzip, never built in memory) and N more; and ``plain/traces.jsonl.gz``: the same
2N good records without it. Each is ingested by the installed ``shopsim-wh ingest`` at the default cap (64 MiB,
``SHOPSIM_WH_MAX_RECORD_BYTES`` unset) in a fresh wrapper process whose ``RUSAGE_CHILDREN`` is the peak RSS of the
CLI and everything it started. Prints both peaks, their difference, the wall time, and what landed (episodes, the
``record_too_large`` row). Target: the bomb under 500 MB peak RSS, close to the baseline.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MiB = 1 << 20
EXE = shutil.which("shopsim-wh", path=str(Path(sys.executable).parent)) or "shopsim-wh"
WRAPPER = ("import resource, subprocess, sys\nr = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\nsys.exit(r.returncode)")


def record(i: int) -> bytes:
    """A small ShopSimRL-shaped record (the synthetic generator's, one step)."""
    from shopsim_wh.demo import shopsimrl_v4 as synth_v4

    rec = synth_v4.record(i, spec=synth_v4.RecordSpec(steps=1, obs_words=8, think_words=8))
    return json.dumps(rec, ensure_ascii=False).encode()


def write(path: Path, good: int, line_mib: int) -> None:
    path.parent.mkdir(parents=True)
    with gzip.open(path, "wb", compresslevel=6) as g:
        for i in range(good):
            g.write(record(i) + b"\n")
        if line_mib:
            g.write(record(good)[:-1] + b', "pad": "')
            block = b"x" * MiB
            for _ in range(line_mib):
                g.write(block)
            g.write(b'"}\n')
        for i in range(good + 1, 2 * good + 1):
            g.write(record(i) + b"\n")


def ingest(path: Path, wh: Path) -> tuple[int, float]:
    env = {k: v for k, v in os.environ.items() if k != "SHOPSIM_WH_MAX_RECORD_BYTES"}
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", WRAPPER, EXE, "ingest", "-q", "-w", str(wh), str(path)],
                         capture_output=True, text=True, env=env)
    if res.returncode:
        raise SystemExit(f"ingest of {path} exited {res.returncode}: {res.stderr}")
    return int(res.stdout.strip().splitlines()[-1]), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--line-mib", type=int, default=1024, help="size of the one line (MiB), default 1024")
    ap.add_argument("--good", type=int, default=200, help="good records before and after it (each)")
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args()
    work = a.workdir or Path(tempfile.mkdtemp(prefix="bench-bomb-"))
    try:
        t0 = time.perf_counter()
        write(work / "bomb" / "traces.jsonl.gz", a.good, a.line_mib)
        write(work / "plain" / "traces.jsonl.gz", a.good, 0)
        gen = time.perf_counter() - t0
        base, base_s = ingest(work / "plain" / "traces.jsonl.gz", work / "wh-plain")
        bomb, bomb_s = ingest(work / "bomb" / "traces.jsonl.gz", work / "wh-bomb")
        from shopsim_wh.engines.db import connect

        con = connect(work / "wh-bomb")
        episodes = con.execute("select count(*) from episodes").fetchone()[0]
        rows = con.execute("select error_class, line, message from ingest_errors").fetchall()
        con.close()
        size = (work / "bomb" / "traces.jsonl.gz").stat().st_size
        print(f"bomb: {size / 1e6:.1f} MB .gz holding a {a.line_mib} MiB line between 2 x {a.good} records "
              f"(written in {gen:.1f} s)")
        print(f"baseline ingest ({2 * a.good} records): peak RSS {base / MiB:.0f} MiB, {base_s:.1f} s")
        print(f"bomb ingest (default cap):          peak RSS {bomb / MiB:.0f} MiB, {bomb_s:.1f} s "
              f"(+{(bomb - base) / MiB:.0f} MiB over the baseline; target < 500 MB: "
              f"{'met' if bomb < 500e6 else 'MISSED'})")
        print(f"landed: {episodes} episodes; error rows: {[(c, line) for c, line, _ in rows]}")
    finally:
        if a.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
