"""Benchmark: runaway user queries stop at their limits (issue 28).

    .venv/bin/python bench/bench_query_limits.py                      # timeout 5 s, memory cap 1GB
    .venv/bin/python bench/bench_query_limits.py --timeout 10 --memory 2GB

Builds a small warehouse (the demo-data generator), then runs ``shopsim-wh sql`` in a fresh subprocess for a
trivial query (the baseline: start-up, views, one row) and for each runaway query, and prints per query the exit
code, the wall time against the time limit (target: at most the limit plus 2 s beyond the baseline's start-up)
and the process's peak RSS against the memory cap (target: under the cap plus 300 MB), with both as ratios to
the baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNAWAY = {
    "recursive CTE without end": "with recursive r(n) as (select 1 union all select n + 1 from r) select count(*) from r",
    "1e8 x 1e8 cross join": "select count(*) from range(100000000) a, range(100000000) b",
    "string_agg of 1 MB strings": "select length(string_agg(repeat('x', 1000000), ',')) from range(20000)",
    "group by 100M keys (spills)": "select count(*) from (select range % 100000000 k, count(*) from range(200000000) group by 1)",
}


def _mb(size: str) -> float:
    units = {"KB": 1e-3, "MB": 1.0, "GB": 1e3}
    return float(size[:-2]) * units[size[-2:].upper()]


_WRAP = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
         "sys.stdout.write(r.stderr); print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def _run(wh: Path, query: str, timeout: float, memory: str) -> tuple[int, float, float, str]:
    """(exit code, wall s, peak RSS MB, last stderr line) of one fresh ``shopsim-wh sql`` process (a wrapper
    process reports the peak of its only child)."""
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", _WRAP, sys.executable, "-m", "shopsim_wh.cli.main", "sql", "-w",
                          str(wh), "-f", "csv", "--timeout", str(timeout), "--memory-limit", memory, query],
                         capture_output=True, text=True, timeout=timeout + 120)
    wall = time.perf_counter() - t0
    *lines, last = res.stdout.strip().splitlines()
    code, peak_kb = (int(x) for x in last.split())
    return code, wall, peak_kb / 1024, (lines or [""])[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--memory", default="1GB")
    args = ap.parse_args()
    from shopsim_wh.demo.shop import WarehouseSpec, generate

    with tempfile.TemporaryDirectory(prefix="shopsim-limits-") as tmp:
        wh = Path(tmp) / "wh"
        generate(wh, 200, WarehouseSpec(runs=2, seed=1, repeats=1, coding_episodes=0))
        code, base_wall, base_rss, _ = _run(wh, "select count(*) from episodes", args.timeout, args.memory)
        assert code == 0, "the baseline query failed"
        cap = _mb(args.memory)
        print(f"machine: {os.cpu_count()} cores; time limit {args.timeout:g} s, memory cap {args.memory}")
        print(f"baseline (select count(*) from episodes): {base_wall:.2f} s, peak {base_rss:.0f} MB\n")
        print(f"{'query':<28} {'exit':>4} {'wall s':>7} {'over limit s':>12} {'wall/base':>9} {'peak MB':>8} "
              f"{'cap+300':>8} {'peak/base':>9}  message")
        for name, q in RUNAWAY.items():
            code, wall, rss, err = _run(wh, q, args.timeout, args.memory)
            over = wall - base_wall - args.timeout
            print(f"{name:<28} {code:>4} {wall:>7.2f} {over:>12.2f} {wall / base_wall:>9.2f} {rss:>8.0f} "
                  f"{cap + 300:>8.0f} {rss / base_rss:>9.2f}  {err[:70]}")


if __name__ == "__main__":
    main()
