"""Runner throughput on Ray (1, 2 and 4 local workers) against the single-process runner, in the same run.

    python bench/bench_ray.py [--episodes 160] [--workers 1,2,4] [--concurrency 8] [--latency-ms 0] [--repeat 5]

Every run uses the embedded servers (each Ray worker starts its own, in process) and a fresh warehouse on
local disk. Ray starts once with as many logical CPUs as the largest worker count (on a 2-core machine 4
workers share 2 cores), then a warm-up run starts the worker processes, so the figures are throughput, not
process start-up (the warm-up time is printed apart). Each configuration runs ``--repeat`` times, in turns
(single process, 1, 2, 4 workers, then again), so load from other processes falls on all alike; prints the
best and the median wall time, episodes/s (of the best) and the ratios to the single-process runner (best to
best, median to median), and checks that each Ray run stored the same canonical rows as the single-process one.
``--latency-ms`` makes each scripted model answer take that long (a remote model's latency): the runner then
waits on the model instead of burning CPU. Ray runs task workers at nice 15 (``RAY_worker_niceness``); on a
machine shared with other work that starves them against the single-process runner at nice 0, so the bench
starts Ray with niceness 0 unless ``RAY_worker_niceness`` is set (``--ray-niceness 15`` keeps Ray's default).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from shopsim_wh.core.config import Config
from shopsim_wh.ops.check import canonical_rows
from shopsim_wh.rollout import runner


def config(n: int, concurrency: int, latency_ms: int, executor: str = "local", workers: int | None = None,
           name: str = "bench-ray") -> Config:
    extra = {"scripted_policy": {"latency_ms": latency_ms}} if latency_ms else {}
    return Config.model_validate({
        "experiment": {"name": name, "seed": 1},
        "tasks": {"split": "train", "sample_size": n, "repeats": 1},
        "model": {"name": "scripted-strong", "checkpoint_id": "bench", "send_seed": True, "extra_body": extra},
        "runtime": {"concurrency": concurrency, "max_steps": 30, "executor": executor, "ray_workers": workers},
    })


def timed_run(cfg: Config, root: Path) -> tuple[float, runner.RunResult]:
    t0 = time.perf_counter()
    res = runner.run(cfg, str(root))
    wall = time.perf_counter() - t0
    if res.completed != len(runner.plan(cfg).jobs) or res.fatal:
        raise SystemExit(f"{cfg.runtime.executor} run did not complete: {res}")
    return wall, res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=160)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--concurrency", type=int, default=8, help="episodes in flight per process")
    ap.add_argument("--latency-ms", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ray-niceness", type=int, default=0, help="nice value of Ray's task workers (Ray's default: 15)")
    args = ap.parse_args()
    os.environ.setdefault("RAY_worker_niceness", str(args.ray_niceness))
    workers = [int(w) for w in args.workers.split(",")]
    from shopsim_wh.rollout.ray_executor import LOOPBACK_ENV

    for key, value in LOOPBACK_ENV.items():  # before Ray is imported: the local cluster on 127.0.0.1
        os.environ.setdefault(key, value)
    n, c, lat = args.episodes, args.concurrency, args.latency_ms
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        runner.run(config(8, c, lat, name="warm"), str(d / "warm-local"))  # the embedded catalog, built once
        import ray

        t0 = time.perf_counter()
        ray.init(num_cpus=max(workers), include_dashboard=False, log_to_driver=False)
        t1 = time.perf_counter()
        runner.run(config(4 * max(workers), c, lat, "ray", max(workers), name="warm"), str(d / "warm-ray"))
        print(f"(Ray start {t1 - t0:.1f} s, worker warm-up {time.perf_counter() - t1:.1f} s: not counted below)")
        setups = [("single process", config(n, c, lat))] + [(f"ray, {w} worker(s)", config(n, c, lat, "ray", w))
                                                           for w in workers]
        walls: dict[str, list[float]] = {label: [] for label, _ in setups}
        rows: dict[str, dict] = {}
        for i in range(args.repeat):
            for label, cfg in setups:
                root = d / f"{label.replace(' ', '').replace(',', '')}-{i}"
                walls[label].append(timed_run(cfg, root)[0])
                rows.setdefault(label, canonical_rows(root, "bench-ray"))
        ray.shutdown()
    print(f"{n} episodes, concurrency {c} per process, model latency {lat} ms, {os.cpu_count()} cores, "
          f"{args.repeat} repeats, Ray workers at nice {os.environ['RAY_worker_niceness']}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'executor':<22}{'best s':>8}{'median s':>10}{'episodes/s':>12}{'vs single':>11}{'(median)':>10}")
    best0, med0 = min(walls["single process"]), statistics.median(walls["single process"])
    for label, _ in setups:
        best, med = min(walls[label]), statistics.median(walls[label])
        same = "" if label == "single process" else \
            "  same rows" if rows[label] == rows["single process"] else "  ROWS DIFFER from the single-process run"
        print(f"{label:<22}{best:>8.2f}{med:>10.2f}{n / best:>12.1f}{best0 / best:>10.2f}x{med0 / med:>9.2f}x{same}")


if __name__ == "__main__":
    main()
