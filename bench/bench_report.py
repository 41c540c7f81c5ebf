"""Benchmark of `shopsim-wh report` on a synthetic warehouse, beside the baseline of one connect plus a
`run_metrics` query (the least any report over the views pays).

    python bench/bench_report.py                 # 5,000 shop episodes in 4 runs + 6 coding sessions
    python bench/bench_report.py --episodes 50000

The warehouse is generated once by shopsim_wh.demo.shop under bench/out/report-<N>/. Timings are the best of
--repeat fresh connections (the report owns its connection, as the CLI does); the gate section uses 1,000
bootstrap resamples.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from shopsim_wh.demo import shop as synth  # noqa: E402
from shopsim_wh.engines.db import connect  # noqa: E402
from shopsim_wh.report import ReportOptions, write_report  # noqa: E402
from shopsim_wh.store.warehouse import Warehouse  # noqa: E402


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=5_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    root = REPO / "bench" / "out" / f"report-{args.episodes}"
    if not Warehouse(root).exists():
        print(f"generating {args.episodes:,} episodes under {root} ...", flush=True)
        synth.generate(root, args.episodes)
    out = Path(tempfile.mkdtemp()) / "report.html"

    def baseline():
        connect(root).execute("SELECT * FROM run_metrics").fetchall()

    def report():
        write_report(connect(root), out, ReportOptions(gate=("synth-ckpt-a-bare", "synth-ckpt-a-skill")))

    base, rep = best(baseline, args.repeat), best(report, args.repeat)
    print(f"episodes {args.episodes:,}: connect + run_metrics {base * 1000:.0f} ms; report {rep * 1000:.0f} ms "
          f"({out.stat().st_size / 1e6:.2f} MB); ratio report / baseline {rep / base:.1f}x")


if __name__ == "__main__":
    main()
