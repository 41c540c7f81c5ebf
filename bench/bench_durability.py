"""Faults at scale: every crash point of the runner job (first, second, last occurrence) with power loss, then
seeded SIGKILL storms during runs and resumes; prints what survived beside the uninterrupted baseline.

    python bench/bench_durability.py [--kills 50] [--episodes 8] [--seed 1]

The soak (bench/soak) can call the same functions: ``shopsim_wh.testing.faults.crash_matrix(base, config, work)``
and ``faults.kill_storm(config, warehouse, kills, seed)``; each returns results whose ``ok`` is the verdict and
whose reports (``shopsim_wh.ops.check.CheckReport``) carry lost / duplicated / unexpected / partial counts.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from shopsim_wh.testing import faults


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    os.environ["SHOPSIM_WH_GRACE_S"] = "0"  # vacuum deletes at the next writer's open: its points are reached
    with faults.scratch(Path("/tmp")) as d:
        base = d / "base"
        t0 = time.perf_counter()
        faults.run_job(faults.write_job(d / "earlier.yaml", name="earlier"), base)
        cfg = faults.write_job(d / "job.yaml")
        t = time.perf_counter()
        faults.fork_call(lambda: faults.run_job(cfg, d / "baseline"))
        baseline_s = time.perf_counter() - t
        results = faults.crash_matrix(base, cfg, d / "matrix")
        bad = [r for r in results if not r.ok]
        per_case = sum(r.seconds for r in results) / max(1, len(results))
        print(f"crash points: {len({r.point for r in results})} of {len(faults.RUNNER_POINTS)} runner points, "
              f"{len(results)} cases (first/second/last), power-loss resume each; failed {len(bad)}")
        print(f"  per case {per_case:.2f} s vs {baseline_s:.2f} s for one uninterrupted job "
              f"({per_case / baseline_s:.2f}x: crash run + check + resume + check)")
        for r in bad:
            print(f"  FAILED {r.point}:{r.occurrence} exit {r.exit_code}\n{r.after_resume.summary()}")
        storm_cfg = faults.write_job(d / "storm.yaml", name="storm", episodes=args.episodes, concurrency=4)
        t = time.perf_counter()
        kills = resumes = 0
        reports = []
        seed = args.seed
        while kills < args.kills:
            wh = d / f"storm-{seed}"
            res = faults.kill_storm(storm_cfg, wh, kills=min(10, args.kills - kills), seed=seed)
            kills, resumes, seed = kills + res.kills, resumes + res.resumes, seed + 1
            reports += res.reports
            if not res.ok:
                print(f"  FAILED storm seed {seed - 1}: {res.reports[-1].summary()}")
            if res.kills == 0:
                break
        lost = sum(len(r.lost) for r in reports)
        dup = sum(len(r.duplicated) for r in reports)
        unexpected = sum(len(r.unexpected) + len(r.partial) for r in reports)
        print(f"SIGKILLs: {kills} during runs and resumes ({resumes} starts, {time.perf_counter() - t:.1f} s); "
              f"checks {len(reports)}: lost {lost}, duplicated {dup}, unexpected/partial {unexpected}")
        print(f"total {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
