"""How cost grows with work (issue 13): ingest, run_metrics, the gate and the sft-action export at several sizes.

    python bench/bench_scale.py                          # 10,000 episodes (a few minutes)
    python bench/bench_scale.py --sizes 10000,100000     # the growth from 10k to 100k
    python bench/bench_scale.py --sizes 10000,100000,1000000 --skip export   # 1M: hours here, see the README

For each size N, each measurement runs in a fresh subprocess (its peak RSS is its own) and reports time, bytes and
peak memory per episode, so a column that stays level as N grows is linear cost, and a flat peak RSS is streaming:

* ingest      ``shopsim_wh.ingest.ingest`` of one ShopSimRL v4 ``traces.jsonl`` of N episodes in the runner's shape
              (``synth_v4``: 4 steps, short observations, ~8 KB per episode) into an empty warehouse;
* run_metrics ``SELECT * FROM run_metrics`` on a fresh connection (views installed; connect time included) over a
              synthetic warehouse of N episodes in two paired runs (``analytics.synth``, 15 steps per episode);
* gate        the paired bare-vs-skill gate (bootstrap 1000) on the same warehouse, fresh connection;
* export      ``export("sft-action", where="true")`` of that warehouse (every decision of every episode).

The last column of the table is the ratio of the per-episode time to the smallest size's: ~1 means linear.
Warehouses and inputs are cached under --workdir (regenerated when the size or the generators change).
``--warehouse-uri`` points the analytics steps at another copy of the warehouse (e.g. an ``s3://`` one).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = ("ingest", "run_metrics", "gate", "export")
BARE, TREATMENT = "synth-ckpt-a-bare", "synth-ckpt-a-skill"

PRELUDE = r"""
import json, resource, sys, time
def done(t, **kw):
    r = resource.getrusage(resource.RUSAGE_SELF); c = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"seconds": time.perf_counter() - t, "peak_rss_mb": max(r.ru_maxrss, c.ru_maxrss) / 1024, **kw}))
"""
CODE = {
    "ingest": PRELUDE + r"""
from shopsim_wh.ingest import ingest
src, wh = sys.argv[1], sys.argv[2]
t = time.perf_counter()
s = ingest([src], wh)
done(t, episodes=s.episodes_landed)
""",
    "run_metrics": PRELUDE + r"""
from shopsim_wh.db import connect
t = time.perf_counter()
con = connect(sys.argv[1])
rows = con.execute("SELECT * FROM run_metrics").fetchall()
done(t, rows=len(rows))
""",
    "gate": PRELUDE + r"""
from shopsim_wh.analytics.gate import gate
from shopsim_wh.db import connect
t = time.perf_counter()
res = gate(connect(sys.argv[1]), sys.argv[2], sys.argv[3], bootstrap=1000)
done(t, pairs=res.n_pairs, decision=res.decision)
""",
    "export": PRELUDE + r"""
import shutil
from shopsim_wh.export import export
shutil.rmtree(sys.argv[2], ignore_errors=True)
t = time.perf_counter()
res = export("sft-action", sys.argv[1], sys.argv[2], where="true", shard_rows=500_000)
done(t, rows=res.rows)
""",
}


def size_of(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def child(step: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", CODE[step], *map(str, args)], capture_output=True, text=True,
                          cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"{step} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cached(path: Path, key: dict, make) -> Path:
    """``make(path)`` unless ``path`` holds what ``key`` describes already (a marker file beside it)."""
    marker = path.with_name(path.name + ".key.json")
    if path.exists() and marker.exists() and json.loads(marker.read_text()) == key:
        return path
    shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    t = time.perf_counter()
    make(path)
    print(f"  generated {path.name} in {time.perf_counter() - t:.0f} s", flush=True)
    marker.write_text(json.dumps(key))
    return path


def generator_key() -> str:
    import hashlib

    h = hashlib.sha256()
    for rel in ("analytics/synth.py", "analytics/synth_coding.py", "ingest/synth_v4.py", "schema.py"):
        h.update((REPO / "shopsim_wh" / rel).read_bytes())
    return h.hexdigest()[:16]


def generate(code: str, *args) -> None:
    """Run a generator in its own process: Linux children inherit their parent's peak RSS at fork, so a parent
    that generated a large warehouse would inflate every measured child's figure."""
    proc = subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"generation failed:\n{proc.stderr[-3000:]}")


def v4_input(work: Path, n: int) -> Path:
    code = ("import sys; from shopsim_wh.ingest import synth_v4; "
            "synth_v4.write_file(sys.argv[1], int(sys.argv[2]), steps=4, obs_words=60, think_words=40)")
    return cached(work / f"v4-{n}.jsonl", {"n": n, "gen": generator_key()}, lambda p: generate(code, p, n))


def analytics_warehouse(work: Path, n: int) -> Path:
    code = ("import sys; from shopsim_wh.analytics import synth; "
            "synth.generate(sys.argv[1], int(sys.argv[2]), runs=2, steps=15, seed=0, coding_episodes=0)")
    return cached(work / f"wh-{n}", {"n": n, "gen": generator_key()}, lambda p: generate(code, p, n))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000", help="comma-separated episode counts")
    ap.add_argument("--skip", default="", help=f"comma-separated steps to leave out ({', '.join(STEPS)})")
    ap.add_argument("--workdir", default="/tmp/shopsim-wh-bench-scale")
    ap.add_argument("--warehouse-uri", default=None,
                    help="run the analytics steps on this warehouse instead (same N; e.g. an s3:// copy)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    skip = {s for s in args.skip.split(",") if s}
    rows = []
    for n in sizes:
        print(f"{n:,} episodes", flush=True)
        if "ingest" not in skip:
            src = v4_input(work, n)
            wh = work / f"ingested-{n}"
            shutil.rmtree(wh, ignore_errors=True)
            r = child("ingest", src, wh)
            rows.append((n, "ingest", r, size_of(src), size_of(wh)))
            shutil.rmtree(wh, ignore_errors=True)
            print(f"  ingest {r}", flush=True)
        if not {"run_metrics", "gate", "export"} - skip:
            continue
        wh = args.warehouse_uri or str(analytics_warehouse(work, n))
        wh_bytes = size_of(Path(wh)) if "://" not in wh else 0
        for step, extra in (("run_metrics", ()), ("gate", (BARE, TREATMENT)), ("export", (work / f"export-{n}",))):
            if step in skip:
                continue
            r = child(step, wh, *extra)
            out_bytes = size_of(work / f"export-{n}") if step == "export" else 0
            rows.append((n, step, r, wh_bytes, out_bytes))
            print(f"  {step} {r}", flush=True)
        shutil.rmtree(work / f"export-{n}", ignore_errors=True)
    print(table(rows))


def table(rows: list[tuple]) -> str:
    first: dict[str, float] = {}
    lines = ["| step | episodes | seconds | µs per episode | bytes read per episode | bytes written per episode "
             "| peak RSS MB | per-episode time vs smallest |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n, step, r, read, written in rows:
        per = r["seconds"] / n * 1e6
        base = first.setdefault(step, per)
        lines.append(f"| {step} | {n:,} | {r['seconds']:.1f} | {per:,.0f} | {read / n:,.0f} | {written / n:,.0f} "
                     f"| {r['peak_rss_mb']:,.0f} | {per / base:.2f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
