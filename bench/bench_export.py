"""Export benchmark: `sft-action` over a synthetic warehouse in the real schema, three ways, in one run.

    python bench/bench_export.py              # 2,000 episodes x 15 steps (~30,000 decisions)
    python bench/bench_export.py --n 70000    # ~1,000,000 decisions

* export    shopsim_wh.export.export("sft-action", where="true"): the shipped path (sharded Parquet + manifest)
* copy      the same rows written by a plain DuckDB `COPY (SELECT * FROM export_sft_action) TO ... parquet` on a
            connection prepared the same way (scope + building blocks materialized): the floor
* naive     a Python loop over decisions that asks ir_context_json / ir_tools per decision and writes JSONL, run
            on the first --naive-rows decisions and reported as a rate

Each method runs in its own process (peak RSS is that process's ru_maxrss). Prints rows/s, MB/s of output,
peak RSS and the ratios export/naive and export/copy.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out" / "export"


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def method_export(wh: Path, out: Path, _n: int) -> dict:
    from shopsim_wh.export import export

    t = time.perf_counter()
    res = export("sft-action", wh, out, where="true", shard_rows=250_000)
    return {"rows": res.rows + res.duplicates_removed, "seconds": time.perf_counter() - t}


def method_copy(wh: Path, out: Path, _n: int) -> dict:
    from shopsim_wh.db import connect
    from shopsim_wh.export.core import MATERIALIZED, _materialize

    t = time.perf_counter()
    con = connect(wh)
    con.execute("SET enable_progress_bar = false")
    con.execute("CREATE OR REPLACE TEMP TABLE export_scope AS SELECT run_id FROM runs")
    _materialize(con, MATERIALIZED)
    out.mkdir(parents=True)
    con.execute(f"COPY (SELECT * FROM export_sft_action) TO '{out / 'all.parquet'}' (FORMAT parquet, COMPRESSION zstd)")
    rows = con.execute(f"SELECT count(*) FROM '{out / 'all.parquet'}'").fetchone()[0]
    return {"rows": rows, "seconds": time.perf_counter() - t}


def method_naive(wh: Path, out: Path, n: int) -> dict:
    from shopsim_wh.db import connect

    t = time.perf_counter()
    con = connect(wh)
    out.mkdir(parents=True)
    steps = con.execute("""SELECT s.run_id, s.episode_id, s.agent_id, s.step_idx FROM steps AS s
                           JOIN episodes AS e USING (run_id, episode_id)
                           WHERE s.protocol_error IS NULL AND s.policy_failure IS NULL
                           ORDER BY 1, 2, 3, 4 LIMIT ?""", [n]).fetchall()
    with open(out / "naive.jsonl", "w") as f:
        for run, ep, agent, step in steps:
            prompt = con.execute("SELECT messages FROM ir_context_json(?, ?, ?, ?, NULL)", [run, ep, agent, step]).fetchone()[0]
            tools = [json.loads(r[0]) for r in con.execute("SELECT tool FROM ir_tools(?, ?, ?)", [run, ep, agent]).fetchall()]
            content, = con.execute("SELECT content FROM steps WHERE run_id = ? AND episode_id = ? AND agent_id = ? "
                                   "AND step_idx = ?", [run, ep, agent, step]).fetchone()
            calls = con.execute("SELECT call_id, tool_name, arguments FROM actions WHERE run_id = ? AND episode_id = ? "
                                "AND agent_id = ? AND step_idx = ? ORDER BY call_idx", [run, ep, agent, step]).fetchall()
            completion = [{"role": "assistant", "content": content, "tool_calls": [
                {"id": c[0], "type": "function", "function": {"name": c[1], "arguments": json.loads(c[2] or "{}")}}
                for c in calls]}]
            f.write(json.dumps({"prompt": json.loads(prompt), "completion": completion, "tools": tools}) + "\n")
    return {"rows": len(steps), "seconds": time.perf_counter() - t}


METHODS = {"export": method_export, "copy": method_copy, "naive": method_naive}


def child(name: str, wh: Path, n: int) -> None:
    out = OUT / name
    shutil.rmtree(out, ignore_errors=True)
    r = METHODS[name](wh, out, n)
    r.update(method=name, bytes=_size(out), peak_rss_mb=round(_rss_mb(), 1))
    print(json.dumps(r))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000, help="shop episodes (15 steps each) in the synthetic warehouse")
    ap.add_argument("--naive-rows", type=int, default=300, help="decisions the naive loop exports (a rate sample)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--wh", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, Path(a.wh), a.naive_rows)
        return
    from shopsim_wh.analytics.synth import generate

    wh = OUT / f"wh-{a.n}"
    if not wh.exists():
        t = time.perf_counter()
        generate(wh, a.n, runs=1, coding_episodes=0)
        print(f"generated {a.n} episodes in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    res = {}
    for name in ("export", "copy", "naive"):
        p = subprocess.run([sys.executable, __file__, "--child", name, "--wh", str(wh), "--naive-rows", str(a.naive_rows)],
                           capture_output=True, text=True, check=True)
        r = json.loads(p.stdout.strip().splitlines()[-1])
        r["rows_per_s"] = r["rows"] / r["seconds"]
        r["mb_per_s"] = r["bytes"] / 1e6 / r["seconds"]
        res[name] = r
        print(f"{name:>7}: {r['rows']:>9,} rows in {r['seconds']:7.2f} s  {r['rows_per_s']:>9,.0f} rows/s  "
              f"{r['mb_per_s']:6.1f} MB/s  peak RSS {r['peak_rss_mb']:.0f} MB")
    e = res["export"]["rows_per_s"]
    print(f"export / naive: {e / res['naive']['rows_per_s']:.1f}x rows/s;  export / copy: "
          f"{e / res['copy']['rows_per_s']:.2f}x rows/s (1.0 = as fast as plain COPY)")


if __name__ == "__main__":
    main()
