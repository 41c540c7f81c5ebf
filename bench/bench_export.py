"""Export benchmark: `sft-action` over a synthetic warehouse in the real schema, three ways, in one run.

    python bench/bench_export.py              # 2,000 episodes x 15 steps (~30,000 decisions)
    python bench/bench_export.py --n 70000    # ~1,000,000 decisions

* export    shopsim_wh.export.export("sft-action", where="true"): the shipped path (sharded Parquet + manifest)
* copy      the same rows written by a plain DuckDB `COPY (SELECT * FROM export_sft_action) TO ... parquet` on a
            connection prepared the same way (scope + building blocks materialized): the floor
* naive     a Python loop over decisions that asks ir_context_json / ir_tools per decision and writes JSONL, run
            on the first --naive decisions and reported as a rate

Each method runs in its own process (peak RSS is that process's ru_maxrss). Prints rows/s, MB/s of output,
peak RSS and the ratios export/naive and export/copy.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export_harness  # noqa: E402  (bench/ is not a package)

OUT = Path(__file__).resolve().parent / "out" / "export"


def method_export(wh: Path, out: Path, _n: int) -> dict:
    from shopsim_wh.export import export

    t = time.perf_counter()
    res = export("sft-action", wh, out, where="true", shard_rows=250_000)
    return {"rows": res.rows + res.duplicates_removed, "seconds": time.perf_counter() - t}


def method_copy(wh: Path, out: Path, _n: int) -> dict:
    return export_harness.copy_floor("sft-action", wh, out)


def method_naive(wh: Path, out: Path, n: int) -> dict:
    from shopsim_wh.engines.db import connect

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


def _generate(wh: Path, n: int) -> None:
    from shopsim_wh.demo.shop import WarehouseSpec, generate

    generate(wh, n, WarehouseSpec(runs=1, coding_episodes=0))


if __name__ == "__main__":
    export_harness.main(__file__, METHODS, OUT, _generate, default_n=2000, naive_default=300, unit="rows",
                        what="shop episodes, 15 steps each")
