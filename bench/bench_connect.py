"""Benchmark of opening a warehouse: ``connect()`` with the shipped views created unbound (``WITH (DEFER_BINDING)``,
the default on DuckDB 2.0 and later) against the same views bound at ``CREATE`` (every DuckDB before 2.0, and a
database file), in the same process; then the exports layer (``install_exports``) both ways, and the first query
after each (where the deferred binding is paid).

    python bench/bench_connect.py                 # 400 shop episodes in 4 runs + 6 coding sessions
    python bench/bench_connect.py --episodes 5000 --repeat 21

The warehouse is generated once by shopsim_wh.demo.shop under bench/out/connect-<N>/. Figures are CPU seconds of
this process (``time.process_time``), best and median of --repeat fresh connections: every CLI command and most
library calls open one, so this is a fixed cost of each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from shopsim_wh.demo import shop as synth  # noqa: E402
from shopsim_wh.engines import db  # noqa: E402
from shopsim_wh.store.warehouse import Warehouse  # noqa: E402

FIRST_QUERY = "SELECT count(*) FROM run_metrics"


def cpu(step, repeat: int, setup=lambda: None) -> tuple[float, float]:
    """Best and median CPU seconds of ``step(setup())`` over ``repeat`` runs (``setup`` itself not timed)."""
    times = []
    for _ in range(repeat):
        arg = setup()
        t0 = time.process_time()
        step(arg)
        times.append(time.process_time() - t0)
    return min(times), statistics.median(times)


def measure(root: Path, repeat: int, defer: bool) -> dict[str, tuple[float, float]]:
    real = db.defers_binding  # _execute_all asks the module's function: bound at CREATE when it says False
    db.defers_binding = real if defer else (lambda: False)
    try:
        fresh = lambda: db.connect(root)  # noqa: E731
        return {"connect": cpu(lambda _: db.connect(root), repeat),
                "install_exports": cpu(db.install_exports, repeat, fresh),
                "first query": cpu(lambda con: con.execute(FIRST_QUERY).fetchall(), repeat, fresh)}
    finally:
        db.defers_binding = real


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=11)
    args = ap.parse_args()
    root = REPO / "bench" / "out" / f"connect-{args.episodes}"
    if not Warehouse(root).exists():
        print(f"generating {args.episodes:,} episodes under {root} ...", flush=True)
        synth.generate(root, args.episodes)
    if not db.defers_binding():
        sys.exit("this DuckDB has no CREATE VIEW ... WITH (DEFER_BINDING) (2.0 and later): nothing to compare")
    print(f"load average {os.getloadavg()[0]:.1f}; {args.episodes:,} episodes; CPU ms, best / median of {args.repeat}")
    bound = measure(root, args.repeat, defer=False)
    unbound = measure(root, args.repeat, defer=True)
    print(f"{'':18s} {'bound at CREATE':>22s} {'deferred':>22s} {'ratio (best)':>13s}")
    for key in bound:
        b, d = bound[key], unbound[key]
        print(f"{key:18s} {b[0] * 1000:10.1f} / {b[1] * 1000:9.1f} {d[0] * 1000:10.1f} / {d[1] * 1000:9.1f} "
              f"{b[0] / max(d[0], 1e-9):12.1f}x")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
