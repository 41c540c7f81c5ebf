"""The export strategies against each other on the same warehouse, same bytes out (docs/performance.md).

    .venv/bin/python bench/bench_export_strategies.py                  # 10,000 runner episodes, 3 runs each
    .venv/bin/python bench/bench_export_strategies.py --n 20000 --repeat 2

A record kind (``shopsimrl-v4``, JSONL, reasoning and persona included) is exported from a runner-written
warehouse by each strategy (shopsim_wh/export/plan.py), each forced in its own process: ``file-groups`` (the plan's
choice there), ``records`` with the base-row copy (what a compacted warehouse gets) and ``spill`` (what the kind
would cost without the record path). The same warehouse is then compacted (``shopsim-wh compact``), where the plan
falls back to ``records`` with the copy. Every leg must write the same shard bytes (sha256); the ratios are CPU
seconds (every thread) against the ``records`` copy in the same run, interleaved, best of ``--repeat``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from bench_ingest import runner_warehouse  # noqa: E402

CHILD = r"""
import json, resource, sys, time
from shopsim_wh.export import batches, explain, export, groups
wh, out, force = sys.argv[1], sys.argv[2], sys.argv[3]
if force == "records":
    groups.GROUP_FACTOR = 0  # no group fits a batch: the base-row copy
elif force == "spill":
    batches.direct = lambda *a: False
opts = dict(format="jsonl", include_reasoning=True, include_persona=True, where="true")
plan = explain("shopsimrl-v4", wh, **opts)
t = time.perf_counter()
r = export("shopsimrl-v4", wh, out, **opts)
me = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"strategy": plan.strategy, "batches": plan.n_batches, "seconds": time.perf_counter() - t,
                  "cpu_s": me.ru_utime + me.ru_stime, "peak_rss_mb": me.ru_maxrss / 1024,
                  "rows": r.rows, "bytes": sum(s["bytes"] for s in r.shards),
                  "sha256": [s["sha256"] for s in r.shards]}))
"""


def leg(wh: Path, out: Path, force: str) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", CHILD, str(wh), str(out), force], env=env, cwd=REPO,
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{force} failed:\n{res.stderr[-3000:]}")
    shutil.rmtree(out, ignore_errors=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10000, help="runner episodes in the warehouse (default 10000)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "shopsim-wh-bench-strategies")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    fresh = runner_warehouse(a.work, a.n)
    compacted = a.work / f"compacted-{a.n}"
    if not compacted.exists():
        shutil.copytree(fresh, compacted.with_suffix(".tmp"))
        subprocess.run([str(Path(sys.executable).parent / "shopsim-wh"), "compact", "-w",
                        str(compacted.with_suffix(".tmp")), "--quiet"], check=True, capture_output=True)
        compacted.with_suffix(".tmp").rename(compacted)
    legs = [("fresh", fresh, "default"), ("fresh", fresh, "records"), ("fresh", fresh, "spill"),
            ("compacted", compacted, "default"), ("compacted", compacted, "spill")]
    best: dict[tuple, dict] = {}
    for _ in range(a.repeat):
        for shape, wh, force in legs:
            r = leg(wh, a.work / "out", force)
            key = (shape, force)
            if key not in best or r["cpu_s"] < best[key]["cpu_s"]:
                best[key] = r
    digests = {k: v["sha256"] for k, v in best.items()}
    same = len({json.dumps(d) for d in digests.values()}) == 1
    base = best[("fresh", "records")]["cpu_s"]
    print(f"export shopsimrl-v4 (jsonl, reasoning and persona) of {a.n} runner episodes, "
          f"{best[('fresh', 'default')]['bytes'] / 1e6:.0f} MB; best of {a.repeat}, CPU s of every thread")
    print(f"{'warehouse':<10} {'strategy':<21} {'batches':>7} {'CPU s':>7} {'wall s':>7} {'peak MB':>8} "
          f"{'CPU x records+copy':>19}")
    for (shape, force), r in best.items():
        label = r["strategy"] if force == "default" else f"{r['strategy']} (forced)"
        print(f"{shape:<10} {label:<21} {r['batches']:>7} {r['cpu_s']:>7.1f} {r['seconds']:>7.1f} "
              f"{r['peak_rss_mb']:>8.0f} {r['cpu_s'] / base:>18.2f}x")
    print(f"same shard bytes in every leg: {'yes' if same else 'NO'}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
