"""Export benchmark for `preference` over a synthetic warehouse in the real schema, three ways, in one run.

    python bench/bench_export_rl.py             # 2,000 episodes (3 samples per task)
    python bench/bench_export_rl.py --n 100000  # the issue's size

* export  shopsim_wh.export.export("preference"): the shipped path (sharded Parquet + manifest)
* copy    the same rows written by a plain DuckDB `COPY (SELECT * FROM export_preference) TO ... parquet` on a
          connection prepared the same way (scope + building blocks materialized): the floor
* naive   a Python exporter that loops over episodes: per episode it reads the main agent's messages and
          reward, hashes the prefix and every state in Python, then pairs and writes JSONL; run on the first
          --naive episodes and reported as a rate

Rates are per input episode (the pairs a warehouse yields depend on its rewards); the output rows, MB/s of
output, peak RSS and CPU seconds (each method in its own process) are printed too, with the ratios
export/naive and export/copy (wall) and copy/export (CPU per episode). The export computes preference in batches
of 4,000 episodes (its `-- batch-episodes:` header; SHOPSIM_WH_EXPORT_BATCH_EPISODES overrides it). Shares bench/export_harness.py with bench_export.py.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export_harness  # noqa: E402  (bench/ is not a package)

OUT = Path(__file__).resolve().parent / "out" / "export_rl"


def method_export(wh: Path, out: Path, _n: int) -> dict:
    from shopsim_wh.export import export

    t = time.perf_counter()
    res = export("preference", wh, out, shard_rows=250_000)
    return {"rows": res.rows, "episodes": _episodes(wh), "seconds": time.perf_counter() - t}


def method_copy(wh: Path, out: Path, _n: int) -> dict:
    return {**export_harness.copy_floor("preference", wh, out), "episodes": _episodes(wh)}


def _episodes(wh: Path) -> int:
    from shopsim_wh.engines.db import connect

    return connect(wh).execute("SELECT count(*) FROM episodes").fetchone()[0]


def _h(m: tuple) -> str:
    role, content, calls = m
    return hashlib.md5(f"{role}\x1f{content}\x1f{calls}".encode()).hexdigest()


def method_naive(wh: Path, out: Path, n: int) -> dict:
    from shopsim_wh.engines.db import connect

    t = time.perf_counter()
    con = connect(wh)
    out.mkdir(parents=True)
    eps = con.execute("SELECT run_id, episode_id, task_id, reward FROM episodes WHERE status = 'completed' "
                      "AND reward IS NOT NULL ORDER BY 1, 2 LIMIT ?", [n]).fetchall()
    rollouts, decisions = defaultdict(list), defaultdict(list)
    for run, ep, task, reward in eps:  # one round trip per episode: the row-at-a-time way
        msgs = con.execute("SELECT role, content, tool_calls FROM messages WHERE run_id = ? AND episode_id = ? "
                           "AND agent_id = 'main' ORDER BY msg_idx", [run, ep]).fetchall()
        counts = con.execute("SELECT step_idx, prompt_msg_count FROM steps WHERE run_id = ? AND episode_id = ? "
                             "AND agent_id = 'main' ORDER BY step_idx", [run, ep]).fetchall()
        if not counts:
            continue
        hashes = [_h(m) for m in msgs]
        first = counts[0][1]
        prefix = hashlib.md5("".join(hashes[:first]).encode()).hexdigest()
        rollouts[(task, prefix)].append((reward, run, ep, msgs[:first], msgs[first:]))
        for _step, count in counts:
            state = hashlib.md5("".join(hashes[:count]).encode()).hexdigest()
            action = msgs[count] if count < len(msgs) else None
            decisions[(task, state)].append((reward, action, msgs[:count]))
    with open(out / "naive.jsonl", "w") as f:
        rows = 0
        for group in rollouts.values():
            best = sorted(group, key=lambda r: (-r[0], r[1], r[2]))
            worst = sorted(group, key=lambda r: (r[0], r[1], r[2]))
            for c, w in list(zip(best, worst, strict=True))[:8]:
                if c[0] - w[0] >= 0.5:
                    f.write(json.dumps({"level": "trajectory", "prompt": c[3], "chosen": c[4], "rejected": w[4],
                                        "margin": c[0] - w[0]}) + "\n")
                    rows += 1
        for group in decisions.values():
            values = defaultdict(list)
            for reward, action, prompt in group:
                values[json.dumps(action)].append((reward, prompt))
            if len(values) < 2:
                continue
            ranked = sorted(((sum(r for r, _ in v) / len(v), a, v[0][1]) for a, v in values.items()), reverse=True)
            for c, w in list(zip(ranked, ranked[::-1], strict=True))[:8]:
                if c[0] - w[0] >= 0.25:
                    f.write(json.dumps({"level": "step", "prompt": c[2], "chosen": c[1], "rejected": w[1],
                                        "margin": c[0] - w[0]}) + "\n")
                    rows += 1
    return {"rows": rows, "episodes": len(eps), "seconds": time.perf_counter() - t}


METHODS = {"export": method_export, "copy": method_copy, "naive": method_naive}


def _generate(wh: Path, n: int) -> None:
    from shopsim_wh.demo.shop import WarehouseSpec, generate

    generate(wh, n, WarehouseSpec(runs=1, repeats=3, coding_episodes=0))


if __name__ == "__main__":
    export_harness.main(__file__, METHODS, OUT, _generate, default_n=2000, naive_default=300, unit="episodes",
                        what="shop episodes, 3 samples per task")
