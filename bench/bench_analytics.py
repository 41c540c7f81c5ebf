"""Benchmark of the SQL analytics on synthetic warehouses, each figure beside a naive Python loop.

    python bench/bench_analytics.py            # 5,000 episodes (quick)
    python bench/bench_analytics.py --full     # also 1,000,000 episodes (15 steps each; ~5 min to generate once)

Warehouses are generated once by shopsim_wh.demo.shop and cached under bench/out/ (regenerated when the
generator's source changes). Timings use one warm connection (the query ran once before), best and median of
--repeat runs. The naive baselines read the same Parquet files with pyarrow and compute the same result in
plain Python loops over the rows (numpy only for the small solves).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from shopsim_wh.analytics.gate import GateOptions, gate  # noqa: E402
from shopsim_wh.demo import shop as synth  # noqa: E402
from shopsim_wh.engines.db import connect  # noqa: E402
from shopsim_wh.store.warehouse import Warehouse  # noqa: E402

OUT = REPO / "bench" / "out"
SIZES = {5_000: 4, 1_000_000: 10}  # episodes -> runs (the 1M warehouse has ten 100,000-episode runs)
BARE, TREATMENT = "synth-ckpt-a-bare", "synth-ckpt-a-skill"
TARGETS_MS = {("run_metrics", 5_000): 20, ("run_metrics", 1_000_000): 1000, ("gate", 1_000_000): 1000,
              ("ir_steps", 1_000_000): 100}


def generator_version() -> str:
    """Changes with the generator's source and with the declared schema (both shape the files)."""
    from shopsim_wh.core.schema import SCHEMA_VERSION, TABLES

    h = hashlib.sha256(repr((SCHEMA_VERSION, [(t, spec.column_names) for t, spec in TABLES.items()])).encode())
    for name in ("shop.py", "coding.py"):
        h.update((REPO / "shopsim_wh" / "demo" / name).read_bytes())
    return h.hexdigest()[:16]


def warehouse(n: int) -> Path:
    root = OUT / f"wh-{n}"
    marker = root / "synth.json"
    want = {"episodes": n, "runs": SIZES[n], "steps": 15, "seed": 0, "generator": generator_version()}
    if marker.exists() and json.loads(marker.read_text()) == want:
        return root
    shutil.rmtree(root, ignore_errors=True)
    t = time.perf_counter()
    synth.generate(root, n, synth.WarehouseSpec(runs=SIZES[n], steps=15, seed=0))
    print(f"generated {n:,} episodes in {time.perf_counter() - t:.1f} s -> {root}", flush=True)
    marker.write_text(json.dumps(want))
    return root


def timed(fn, repeat: int) -> tuple[float, float]:
    fn()  # warm
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1000, statistics.median(times) * 1000


def once(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


# ---------------------------------------------------------------------------------------------- naive baselines


def rows(root: Path, table: str, run_id: str | None = None, columns=None):
    wh = Warehouse(root)
    for entry in wh.snapshot().files(table, run_id):
        for row in pq.read_table(wh.abspath(entry), columns=columns).to_pylist():
            row["run_id"] = entry.run_id
            yield row


def final(episodes):
    last = {}
    for e in episodes:
        key = (e["run_id"], e["episode_id"])
        if key not in last or e["attempt"] > last[key]["attempt"]:
            last[key] = e
    return last.values()


def naive_run_metrics(root: Path) -> dict:
    out: dict = {}
    per_run = defaultdict(list)
    for e in final(rows(root, "episodes")):
        per_run[e["run_id"]].append(e)
    for run, eps in per_run.items():
        done = [e for e in eps if e["status"] == "completed"]
        rewards = [e["reward"] for e in done if e["reward"] is not None]
        tasks = defaultdict(lambda: [0, 0])
        comp = defaultdict(list)
        for e in done:
            opt = 1.0 if e["r_option"] is None else e["r_option"]
            hard = e["r_type"] * e["r_att"] * opt * e["r_price"] if e["r_type"] is not None else None
            comp["r_hard"].append(hard)
            comp["r_success"].append(None if e["reward"] is None else float(hard == 1))
            for c in ("r_type", "r_att", "r_option", "r_price", "total_actions", "model_steps", "tokens_in",
                      "tokens_out", "duration_s"):
                comp[c].append(e[c])
            if e["task_id"] is not None:
                tasks[e["task_id"]][0] += 1
                tasks[e["task_id"]][1] += int(hard == 1)
        k = max((t[0] for t in tasks.values()), default=0)
        m = {c: statistics.fmean([v for v in vs if v is not None]) if any(v is not None for v in vs) else None
             for c, vs in comp.items()}
        m["reward_mean"] = statistics.fmean(rewards) if rewards else None
        m["reward_sem"] = statistics.stdev(rewards) / math.sqrt(len(rewards)) if len(rewards) > 1 else None
        m["pass_at_1"] = statistics.fmean([c / n for n, c in tasks.values()]) if tasks else None
        m["pass_at_k"] = statistics.fmean([
            0.0 if c == 0 else 1.0 if n - c < k else 1 - math.comb(n - c, k) / math.comb(n, k) for n, c in tasks.values()
        ]) if tasks and k > 1 else None
        ends = defaultdict(int)
        for e in eps:
            ends["error" if e["status"] == "failed" else e["termination_reason"]] += 1
        m["shares"] = {r: n / len(eps) for r, n in ends.items()}
        m["protocol_error_rate"] = sum(e["protocol_errors"] for e in eps) / max(1, sum(e["model_steps"] for e in eps))
        m["invalid_action_rate"] = sum(e["invalid_actions"] for e in eps) / max(1, sum(e["total_actions"] for e in eps))
        out[run] = m
    return out


def naive_eval_summary(root: Path) -> dict:
    """The figures eval_summary adds to run_metrics (components, policy failures, tokens, endings, errors)."""
    eps = {(e["run_id"], e["episode_id"]): e for e in final(rows(root, "episodes"))}
    done = {k for k, e in eps.items() if e["status"] == "completed" and e["done"] is not False}
    out: dict = defaultdict(lambda: {"components": defaultdict(list), "policy_failures": 0,
                                     "tokens": defaultdict(int), "ends": defaultdict(int), "errors": defaultdict(int)})
    for k, e in eps.items():
        o = out[k[0]]
        if k not in done:
            o["errors"][e["error_type"] or "unknown"] += 1
            continue
        o["ends"][e["termination_reason"] or "unknown"] += 1
        for c, v in json.loads(e["reward_detail"] or "{}").items():
            if c.startswith("r_") and isinstance(v, (int, float)) and not isinstance(v, bool):
                o["components"][c].append(v)
    last = {k: e["attempt"] for k, e in eps.items()}
    for s in rows(root, "steps", columns=["episode_id", "attempt", "policy_failure", "tokens_in", "tokens_out"]):
        k = (s["run_id"], s["episode_id"])
        if k in done and s["attempt"] == last[k]:
            o = out[k[0]]
            o["policy_failures"] += s["policy_failure"] is not None
            o["tokens"]["prompt_tokens"] += s["tokens_in"] or 0
            o["tokens"]["completion_tokens"] += s["tokens_out"] or 0
    return {r: {**o, "components": {c: statistics.fmean(v) for c, v in o["components"].items()}}
            for r, o in out.items()}


def naive_gate(root: Path, bare: str, treatment: str, bootstrap: int = 1000) -> list[float]:
    def completed(run):
        return {(e["task_id"], e["sample_id"]): e for e in final(rows(root, "episodes", run))
                if e["status"] == "completed" and e["reward"] is not None}

    b, t = completed(bare), completed(treatment)
    skills = defaultdict(set)
    for s in rows(root, "skills_selected", treatment, ["episode_id", "attempt", "skill_id"]):
        skills[s["episode_id"]].add(s["skill_id"])
    keys = sorted(set(b) & set(t))
    names = sorted(set().union(*(skills[t[k]["episode_id"]] for k in keys)))
    k = len(names)
    xtx, xty, xs, ys = np.zeros((k, k)), np.zeros(k), [], []
    for key in keys:
        x = [1.0 if n in skills[t[key]["episode_id"]] else 0.0 for n in names]
        y = t[key]["reward"] - b[key]["reward"]
        for i in range(k):
            xty[i] += x[i] * y
            for j in range(k):
                xtx[i, j] += x[i] * x[j]
        xs.append(x)
        ys.append(y)
    beta = np.linalg.solve(xtx, xty)
    x, y = np.array(xs), np.array(ys)
    boots = [np.linalg.lstsq(x[idx], y[idx], rcond=None)[0]
             for idx in (np.random.default_rng([0, r]).integers(0, len(y), len(y)) for r in range(bootstrap))]
    np.quantile(np.array(boots), [0.025, 0.975], axis=0)
    return list(beta)


def naive_ir_steps(root: Path, run_id: str, episode_id: str) -> list[dict]:
    def of(table):
        return [r for r in rows(root, table, run_id) if r["episode_id"] == episode_id]

    eps = of("episodes")
    attempt = max(e["attempt"] for e in eps)
    steps = [s for s in of("steps") if s["attempt"] == attempt]
    acts = [a for a in of("actions") if a["attempt"] == attempt]
    obs = [o for o in of("observations") if o["attempt"] == attempt]
    out = []
    for s in sorted(steps, key=lambda s: (s["seq"], s["agent_id"])):
        calls = sorted([a for a in acts if a["agent_id"] == s["agent_id"] and a["step_idx"] == s["step_idx"]],
                       key=lambda a: a["call_idx"])
        answers = [o for o in obs if o["agent_id"] == s["agent_id"] and o["step_idx"] == s["step_idx"]]
        pairs = [(c, next((o for o in answers if o["call_id"] == c["call_id"]), None)) for c in calls]
        out.append({"step": s, "calls": pairs, "loose": [o for o in answers if not calls]})
    return out


# ---------------------------------------------------------------------------------------------- main


def bench(n: int, repeat: int, naive: bool) -> list[tuple]:
    root = warehouse(n)
    t = time.perf_counter()
    con = connect(root)
    print(f"\n{n:,} episodes: connect (views installed) {1000 * (time.perf_counter() - t):.0f} ms", flush=True)
    episode = con.execute("SELECT episode_id FROM episodes WHERE run_id = ? ORDER BY episode_id LIMIT 1 OFFSET ?",
                          [TREATMENT, n // SIZES[n] // 2]).fetchone()[0]
    pairs = con.execute("SELECT count(*) FROM paired_deltas(?, ?)", [BARE, TREATMENT]).fetchone()[0]
    runs_n = con.execute("SELECT count(*) FROM episodes WHERE run_id = ?", [BARE]).fetchone()[0]
    cases = [
        ("run_metrics", "SELECT * FROM run_metrics (all runs)",
         lambda: con.execute("SELECT * FROM run_metrics").fetchall(), lambda: naive_run_metrics(root)),
        ("eval_summary", "SELECT * FROM eval_summary (all runs: summary.json figures)",
         lambda: con.execute("SELECT * FROM eval_summary").fetchall(), lambda: naive_eval_summary(root)),
        ("gate", f"gate {BARE} vs {TREATMENT} ({runs_n:,} episodes each, {pairs:,} pairs, bootstrap 1000)",
         lambda: gate(con, BARE, TREATMENT, GateOptions(bootstrap=1000)),
         lambda: naive_gate(root, BARE, TREATMENT)),
        ("ir_steps", f"ir_steps WHERE run_id/episode_id = one episode ({episode})",
         lambda: con.execute("SELECT * FROM ir_steps WHERE run_id = ? AND episode_id = ?", [TREATMENT, episode]).fetchall(),
         lambda: naive_ir_steps(root, TREATMENT, episode)),
    ]
    out = []
    for name, label, fn, slow in cases:
        best, med = timed(fn, repeat)
        base = once(slow) if naive else None
        target = TARGETS_MS.get((name, n))
        out.append((n, name, label, best, med, base, target))
        ratio = f"{base / best:8.1f}x" if base else "       -"
        tgt = f"target < {target} ms: {'ok' if best < target else 'MISSED'}" if target else ""
        print(f"  {name:<12} sql best {best:8.1f} ms  median {med:8.1f} ms | naive python "
              f"{(f'{base:10.0f} ms' if base else '         -')} | {ratio}  {tgt}", flush=True)
        print(f"  {'':<12} {label}", flush=True)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="also the 1,000,000-episode warehouse")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per query (after one warm-up)")
    ap.add_argument("--no-naive", action="store_true", help="skip the naive Python baselines")
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    results = []
    for n in ([5_000, 1_000_000] if args.full else [5_000]):
        results += bench(n, args.repeat, not args.no_naive)
    (OUT / "bench_analytics.json").write_text(json.dumps(
        [dict(zip(("episodes", "name", "what", "sql_best_ms", "sql_median_ms", "naive_ms", "target_ms"), r,
                  strict=True)) for r in results], indent=1))


if __name__ == "__main__":
    main()
