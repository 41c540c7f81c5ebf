"""Benchmark: shopsimrl-v4 ingest vs a naive baseline and a parse+compress floor (issue 3).

    .venv/bin/pip install pandas psutil   # the naive baseline needs pandas (not a package dependency)
    .venv/bin/python bench/bench_ingest.py                 # 500 and 5,000 episodes (a few minutes)
    .venv/bin/python bench/bench_ingest.py --with-50k      # adds 50,000 episodes (~4.5 GB input)
    .venv/bin/python bench/bench_ingest.py --sizes "" --runner-v4 2000   # only the runner-shape row
    .venv/bin/python bench/bench_ingest.py --sizes "" --runner-v4 10000,100000 --repeat 3 --no-naive \
        --workdir /tmp/bench-x   # issue 10's figures: export vs ingest at two sizes, in one run

``--runner-v4 N[,N...]`` adds the real shape: N episodes run by the runner (scripted model, embedded shop, ~4 steps
and ~46 KB per episode with reasoning and persona, many small fields; beyond 2,000 episodes the runner's
2,000-episode warehouse is copied under new sample ids) and re-emitted by ``export shopsimrl-v4 --format jsonl``
(the export is timed too, best of ``--repeat`` like the ingest, its runs interleaved with the ingest's: its
output MB/s and MB per CPU-second, to set against the ingest's input figures).

Generates realistic v4 files in the real ShopSimRL runtime's shape (``shopsim_wh.demo.shopsimrl_v4``: ~15 steps,
KB-sized Chinese observations and reasoning, tool schemas built from observation_state, Python-json
separators) and measures, each in a fresh subprocess (so peak RSS is its own):

* ingest: ``shopsim_wh.ingest.ingest`` into an empty warehouse (MB/s, episodes/s, peak RSS of the
  ingesting process and of its largest parse worker; files >= 64 MiB are parsed by two workers);
* naive: ``json.loads`` per line -> Python row dicts (episodes, steps, actions, observations,
  messages) -> pandas -> zstd Parquet, in chunks of 2,000 episodes so it fits in memory;
* floor: ``orjson.loads`` of every line plus zstd level-1 compression of the raw bytes, one core.

Each measurement runs ``--repeat`` times (default 2), the three kinds interleaved so that none always
runs first on cold memory (first-touch page faults are expensive on a VM and warm up as memory is
reused), and the best run of each is reported.

Prints the figures and the ratios ingest/naive and ingest/floor for every size, plus the CPU seconds
the ingest used (its process and the parse workers, imports included) and the input MB per CPU
second: wall-clock figures on a shared 2-core machine move with whatever else runs, the CPU cost
per MB much less, and ``2 x MB per CPU-s`` bounds what two idle cores could reach.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

INGEST = r"""
import json, resource, shutil, sys, time
import pyarrow as pa
from shopsim_wh.ingest import ingest
pa.array([""])  # pyarrow's one-time pandas probe; the naive baseline also imports pandas before its clock starts
src, wh = sys.argv[1], sys.argv[2]
shutil.rmtree(wh, ignore_errors=True)
t = time.perf_counter()
s = ingest([src], wh)
dt = time.perf_counter() - t
me, ch = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"seconds": dt, "episodes": s.episodes_landed, "peak_rss_mb": me.ru_maxrss / 1024,
                  "worker_peak_rss_mb": ch.ru_maxrss / 1024,
                  "cpu_s": me.ru_utime + me.ru_stime + ch.ru_utime + ch.ru_stime,
                  "load": open("/proc/loadavg").read().split()[0]}))
"""

NAIVE = r"""
import json, resource, shutil, sys, time, os
import pandas as pd
src, out = sys.argv[1], sys.argv[2]
shutil.rmtree(out, ignore_errors=True); os.makedirs(out)
t = time.perf_counter()
tables = {k: [] for k in ("episodes", "steps", "actions", "observations", "messages")}
n = part = 0
def flush():
    global part
    for k, rows in tables.items():
        if rows:
            pd.DataFrame(rows).to_parquet(f"{out}/{k}-{part}.parquet", compression="zstd")
            rows.clear()
    part += 1
with open(src, "rb") as f:
    for line in f:
        if not line.strip():
            continue
        r = json.loads(line)
        eid = r["episode_id"]
        fin = r.get("final") or {}
        reset = r.get("reset") or {}
        tables["episodes"].append({"episode_id": eid, "task_id": r["job"]["task_id"], "status": r["status"],
            "reward": fin.get("reward"), "reward_detail": json.dumps(fin.get("reward_detail")),
            "instruction": reset.get("task_instruction"), "persona": json.dumps(reset.get("user_persona")),
            "reset": json.dumps(reset)})
        for i, s in enumerate(r["steps"]):
            m = s.get("model") or {}
            usage = m.get("usage") or {}
            tables["steps"].append({"episode_id": eid, "step_idx": i, "observation": s.get("observation"),
                "tools": json.dumps(s["tools"]), "reasoning": m.get("reasoning"), "content": m.get("content"),
                "tokens_in": usage.get("prompt_tokens"), "tokens_out": usage.get("completion_tokens")})
            for j, tc in enumerate(m.get("tool_calls") or []):
                tables["actions"].append({"episode_id": eid, "step_idx": i, "call_idx": j, "call_id": tc.get("call_id"),
                    "tool_name": tc.get("name"), "arguments": tc.get("raw_arguments"), "action": s.get("action")})
            env = s.get("environment") or {}
            tables["observations"].append({"episode_id": eid, "step_idx": i, "content": env.get("observation"),
                "observation_state": json.dumps(env.get("observation_state")), "reward": env.get("reward"),
                "payload": json.dumps({k: v for k, v in env.items() if k not in ("observation", "observation_state", "goal")})})
        for j, m in enumerate(r["conversation"]):
            tables["messages"].append({"episode_id": eid, "msg_idx": j, "role": m["role"], "content": m.get("content"),
                "reasoning_content": m.get("reasoning_content"), "tool_calls": json.dumps(m.get("tool_calls"))})
        n += 1
        if n % 2000 == 0:
            flush()
flush()
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "episodes": n, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

FLOOR = r"""
import json, sys, time
import orjson, pyarrow as pa
src = sys.argv[1]
codec = pa.Codec("zstd", compression_level=1)
tp = tc = 0.0
with open(src, "rb") as f:
    while True:
        block = f.read(64 << 20)
        if not block:
            break
        t = time.perf_counter()
        for line in block.split(b"\n"):
            if line:
                try:
                    orjson.loads(line)
                except orjson.JSONDecodeError:
                    pass  # a line cut at the block edge
        tp += time.perf_counter() - t
        t = time.perf_counter()
        codec.compress(block)
        tc += time.perf_counter() - t
print(json.dumps({"seconds": tp + tc, "parse_s": tp, "compress_s": tc}))
"""


EXPORT_V4 = r"""
import json, resource, shutil, sys, threading, time
from pathlib import Path
from shopsim_wh.export import export
wh, out = sys.argv[1], Path(sys.argv[2])
shutil.rmtree(out, ignore_errors=True)
rss = []  # VmRSS (MB) once a second: does the peak grow along the run?
def sample():
    while True:
        with open("/proc/self/status") as f:
            rss.append(next(int(l.split()[1]) // 1024 for l in f if l.startswith("VmRSS")))
        time.sleep(1)
threading.Thread(target=sample, daemon=True).start()
t = time.perf_counter()
r = export("shopsimrl-v4", wh, out, format="jsonl", shard_rows=10**9, include_reasoning=True, include_persona=True)
dt = time.perf_counter() - t
me = resource.getrusage(resource.RUSAGE_SELF)
fifths = [max(rss[i * len(rss) // 5:(i + 1) * len(rss) // 5] or [0]) for i in range(5)]
print(json.dumps({"seconds": dt, "episodes": r.rows, "bytes": sum(s["bytes"] for s in r.shards),
                  "file": str(out / r.shards[0]["file"]), "peak_rss_mb": me.ru_maxrss / 1024, "rss_by_fifth": fifths,
                  "cpu_s": me.ru_utime + me.ru_stime, "load": open("/proc/loadavg").read().split()[0]}))
"""


RUNNER_BASE = 2000  # episodes the runner really runs; a larger --runner-v4 N replicates them (see REPLICATE)

REPLICATE = r"""
import sys
import duckdb
from shopsim_wh.engines.db import fetch_arrow
from shopsim_wh.store.warehouse import Warehouse
from shopsim_wh.core.schema import TABLES
src, dst, copies = Warehouse(sys.argv[1]), Warehouse(sys.argv[2]), int(sys.argv[3])
snap = src.snapshot()
con = duckdb.connect()
con.execute("SET memory_limit = '1GB'")
tables = {t: src.read(t, TABLES[t].arrow_schema.names, snap=snap).drop_columns(["run_id"])
          for t in snap.tables if snap.files(t)}
run_ids = sorted({e.run_id for es in snap.tables.values() for e in es})
assert len(run_ids) == 1, run_ids
ep = tables["episodes"]
con.register("ep", ep)
width = con.execute("SELECT max(sample_id) + 1 FROM ep").fetchone()[0]
with dst.writer() as w:
    for k in range(copies):
        con.execute("CREATE OR REPLACE TABLE ids AS SELECT episode_id, "
                    f"printf('task-%06d__sample-%03d', task_id, sample_id + {k * width}) AS new_id, "
                    f"sample_id + {k * width} AS new_sample FROM ep")
        batch = []
        for name, t in tables.items():
            if "episode_id" not in t.column_names:
                if k == 0:
                    batch.append((name, run_ids[0], t))
                continue
            con.register("t", t)
            extra = ", i.new_sample AS sample_id" if name == "episodes" else ""
            batch.append((name, run_ids[0], fetch_arrow(
                con, f"SELECT t.* REPLACE (i.new_id AS episode_id{extra}) FROM t JOIN ids AS i USING (episode_id)")))
            con.unregister("t")
        w.commit(batch)
"""


def runner_warehouse(work: Path, n: int) -> Path:
    """A warehouse of n runner episodes: up to RUNNER_BASE run by the runner (scripted model, embedded shop),
    beyond that the RUNNER_BASE-episode warehouse copied ceil(n / RUNNER_BASE) times with new sample ids (the same
    rows under new episode ids: a 100,000-episode run takes the runner hours here). Cached in ``work``."""
    wh = work / f"runner-wh-{n}"
    if wh.exists():
        return wh
    base = min(n, RUNNER_BASE)
    src = work / f"runner-wh-{base}"
    if not src.exists():
        from shopsim_wh.core.config import Config
        from shopsim_wh.rollout import runner

        t = time.perf_counter()
        per = min(base, 200)
        cfg = Config.model_validate({
            "experiment": {"name": f"bench-v4-{base}", "seed": 1},
            "tasks": {"split": "train", "sample_size": per, "repeats": -(-base // per)},
            "model": {"name": "scripted-strong", "checkpoint_id": "bench", "send_seed": True},
            "runtime": {"concurrency": 16, "max_steps": 30}})
        runner.run(cfg, str(src.with_suffix(".tmp")))
        src.with_suffix(".tmp").rename(src)
        print(f"  (ran {base} runner episodes in {time.perf_counter() - t:.1f}s)", file=sys.stderr)
    if n > base:
        t = time.perf_counter()
        tmp = wh.with_suffix(".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run([sys.executable, "-c", REPLICATE, str(src), str(tmp), str(-(-n // base))],
                       env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO, check=True)
        tmp.rename(wh)
        print(f"  (replicated {base} runner episodes {-(-n // base)} times in {time.perf_counter() - t:.1f}s)",
              file=sys.stderr)
    return wh


def runner_v4(work: Path, n: int) -> tuple[Path, dict]:
    """The runner-shape v4 file of n episodes (runner warehouse cached in ``work``) and the export's figures."""
    wh = runner_warehouse(work, n)
    exp = run(EXPORT_V4, str(wh), str(work / f"runner-v4-{n}"))
    return Path(exp["file"]), exp


def run(code: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"measurement failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def best(a: dict | None, b: dict) -> dict:
    """The faster of two runs of the same measurement."""
    return b if a is None or b["seconds"] < a["seconds"] else a


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="500,5000", help="comma-separated episode counts")
    ap.add_argument("--with-50k", action="store_true", help="also run 50,000 episodes")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--runner-v4", default="", help="also runner-shape rows of N episodes, comma-separated (see above)")
    ap.add_argument("--workdir", default="/tmp/shopsim-wh-bench")
    ap.add_argument("--no-naive", action="store_true", help="skip the pandas baseline")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each measurement (best is reported)")
    a = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from shopsim_wh.demo import shopsimrl_v4 as synth_v4

    sizes = [int(s) for s in a.sizes.split(",") if s]
    if a.with_50k and 50000 not in sizes:
        sizes.append(50000)
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    print(f"{'episodes':>9} {'MB':>8} | {'ingest MB/s':>11} {'ep/s':>8} {'peak MB':>8} {'worker MB':>9} "
          f"{'cpu s':>6} {'MB/cpu-s':>8} | {'naive MB/s':>10} {'peak MB':>8} | {'floor MB/s':>10} | "
          f"{'x naive':>7} {'/ floor':>7}")
    runner_sizes = [int(s) for s in str(a.runner_v4).split(",") if s.strip() and int(s)]
    rows = [(str(n), n) for n in sizes] + [("runner-v4", n) for n in runner_sizes]
    exports: dict[int, tuple[dict, tuple[float, float]]] = {}
    for label, n in rows:
        if label == "runner-v4":
            src, exported = runner_v4(work, n)
        else:
            src = work / f"v4real-{n}-{a.steps}.jsonl"  # the real runtime's record shape (issue 9)
            if not src.exists():
                t = time.perf_counter()
                synth_v4.write_file(src, n, steps=a.steps)
                print(f"  (generated {src.name} in {time.perf_counter() - t:.1f}s)", file=sys.stderr)
        mb = src.stat().st_size / 1e6
        ing = naive = floor = None
        for i in range(max(1, a.repeat)):
            if label == "runner-v4" and i:  # the export is timed like the ingest (best of --repeat), interleaved
                exported = best(exported, runner_v4(work, n)[1])  # with the ingest of its output (same bytes)
            ing = best(ing, run(INGEST, str(src), str(work / f"wh-{n}")))
            naive = None if a.no_naive else best(naive, run(NAIVE, str(src), str(work / f"naive-{n}")))
            floor = best(floor, run(FLOOR, str(src)))
        ing_mbs = mb / ing["seconds"]
        if label == "runner-v4":
            exports[n] = (exported, (ing_mbs, src.stat().st_size / ing["cpu_s"]))
        naive_mbs = mb / naive["seconds"] if naive else float("nan")
        floor_mbs = mb / floor["seconds"]
        print(f"{label:>9} {mb:>8.0f} | {ing_mbs:>11.1f} {ing['episodes'] / ing['seconds']:>8.0f} {ing['peak_rss_mb']:>8.0f} "
              f"{ing['worker_peak_rss_mb']:>9.0f} {ing['cpu_s']:>6.1f} {mb / ing['cpu_s']:>8.0f} | "
              f"{naive_mbs:>10.1f} {naive['peak_rss_mb'] if naive else float('nan'):>8.0f} | {floor_mbs:>10.1f} | "
              f"{ing_mbs / naive_mbs:>7.2f} {ing_mbs / floor_mbs:>7.2f}", flush=True)
        if label == "runner-v4":
            report(n, *exports[n], ing)


def report(n: int, exported: dict, ingested: tuple[float, float], ing: dict) -> None:
    """The export's figures at n runner episodes, and against the ingest of its output (load at each one's end)."""
    mbs = exported["bytes"] / 1e6 / exported["seconds"]
    print(f"runner-v4 export: {n} episodes, {exported['bytes'] / 1e6:.0f} MB "
          f"({exported['bytes'] / 1e3 / max(1, exported['episodes']):.1f} KB/episode) written in "
          f"{exported['seconds']:.1f} s = {mbs:.1f} MB/s, cpu {exported['cpu_s']:.1f} s = "
          f"{exported['bytes'] / 1e6 / exported['cpu_s']:.0f} MB/cpu-s, peak RSS {exported['peak_rss_mb']:.0f} MB "
          f"(by fifth of the run: {', '.join(map(str, exported['rss_by_fifth']))}) "
          f"(load {exported['load']}; compare with the ingest MB/s and MB/cpu-s of the runner-v4 row, "
          f"load {ing['load']})", flush=True)
    # the target: export at least as fast as ingest reads it back (1.0 or more)
    print(f"runner-v4 export / ingest at {n}: {mbs / ingested[0]:.2f}x the MB/s, "
          f"{exported['bytes'] / exported['cpu_s'] / ingested[1]:.2f}x the MB per CPU-second", flush=True)


if __name__ == "__main__":
    main()
