"""Compaction's peak memory and time on one run of many small files (local disk).

    python bench/bench_compact.py --commits 40 --steps 5000

builds a warehouse (``--commits`` commits of ``--steps`` steps rows each, 300 incompressible characters of content a row), then
compacts it in a fresh child process and prints the child's peak RSS (``ru_maxrss``) and wall time. Run it
with ``PYTHONPATH`` pointing at another checkout to compare implementations on the same data.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

CHILD = """
import json, resource, sys, time
from shopsim_wh.store.warehouse import Warehouse
t0 = time.perf_counter()
with Warehouse(sys.argv[1]).writer(grace_s=0) as w:
    n = w.compact("r")
print(json.dumps({"files_replaced": n, "seconds": round(time.perf_counter() - t0, 2),
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))
"""


def build(root: str, commits: int, steps: int) -> int:
    from shopsim_wh.core.schema import to_arrow
    from shopsim_wh.store.warehouse import Warehouse

    with Warehouse(root).writer() as w:
        for c in range(commits):
            rows = [{"episode_id": f"task-{(c * 7919 + i // 20) % 100000:06d}__sample-000", "attempt": 1,
                     "agent_id": "main", "step_idx": i % 20, "content": os.urandom(150).hex()}
                    for i in range(steps)]
            w.commit([("steps", "r", to_arrow("steps", rows))])
        return sum(e.bytes for e in w.snap.files("steps"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=40)
    ap.add_argument("--steps", type=int, default=5000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        size = build(d + "/wh", a.commits, a.steps)
        base_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", CHILD, d + "/wh"], capture_output=True, text=True)
        res = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {"error": p.stderr[-1000:]}
        res.update(rows=a.commits * a.steps, input_bytes=size, wall_s=round(time.perf_counter() - t0, 2),
                   children_rss_before_mb=round(base_rss / 1024))
        print(json.dumps(res))


if __name__ == "__main__":
    main()
