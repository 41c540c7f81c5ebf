"""How cost grows with work (issue 13): ingest, run_metrics, the gate and the sft-action export at several sizes.

    python bench/bench_scale.py                          # 10,000 episodes (a few minutes)
    python bench/bench_scale.py --sizes 10000,100000     # the growth from 10k to 100k
    python bench/bench_scale.py --sizes 10000,100000,1000000 --skip export   # 1M: hours here (docs/performance.md)

For each size N, each measurement runs in a fresh subprocess (its peak RSS is its own) and reports time, bytes and
peak memory per episode, so a column that stays level as N grows is linear cost, and a flat peak RSS is streaming:

* ingest      ``shopsim_wh.ingest.ingest`` of one ShopSimRL v4 ``traces.jsonl`` of N episodes in the runner's shape
              (``synth_v4``: 4 steps, short observations, ~20 KB per episode; above 20,020 episodes the
              records of 20,020 tasks repeated under new task ids, see ``write_v4``) into an empty warehouse;
* run_metrics ``SELECT * FROM run_metrics`` on a fresh connection (views installed; connect time included) over a
              synthetic warehouse of N episodes in two paired runs (``analytics.synth``, 15 steps per episode);
* gate        the paired bare-vs-skill gate (bootstrap 1000) on the same warehouse, fresh connection;
* export      ``export("sft-action", where="true")`` of that warehouse (every decision of every episode); with
              ``--export-where 'task_id % 10 = 0'`` ~10% of its episodes (a second table then gives the CPU per
              exported episode: for warehouses whose whole export is longer than there is time for)

"peak RSS" is the largest of the measured process and its children (ingest's two parse workers); "own peak RSS"
is the measured process alone (for ingest, the one that merges the chunks and commits).
The "vs smallest" column is the ratio of the per-episode time to the smallest size's: ~1 means linear.
Warehouses and inputs are cached under --workdir (regenerated when the size or the generators change).

Object storage: ``--s3-loopback`` starts moto's server on loopback (as the tests do) and runs every step against
``s3://bench-scale``; ``--warehouse-uri s3://bucket/prefix`` does the same against a real bucket (endpoint and
credentials from the AWS environment). Ingest then writes into ``<uri>/ingested-N`` (the input file stays local;
deleted after), the analytics steps read ``<uri>/wh-N`` (generated there unless it has a snapshot already) and
the export writes its files to local disk. Bytes are the objects' sizes.

    python bench/bench_scale.py --sizes 10000,100000 --s3-loopback
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = ("ingest", "run_metrics", "gate", "export")
BARE, TREATMENT = "synth-ckpt-a-bare", "synth-ckpt-a-skill"

PRELUDE = r"""
import json, resource, sys, time
def stats(t):
    r = resource.getrusage(resource.RUSAGE_SELF); c = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime  # imports included; steady under a shared machine's load
    return {"seconds": time.perf_counter() - t, "cpu_seconds": cpu,
            "peak_rss_mb": max(r.ru_maxrss, c.ru_maxrss) / 1024, "own_rss_mb": r.ru_maxrss / 1024}
def done(t, **kw):
    print(json.dumps({**stats(t), **kw}))
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
from shopsim_wh.engines.db import connect
t = time.perf_counter()
con = connect(sys.argv[1])
rows = con.execute("SELECT * FROM run_metrics").fetchall()
done(t, rows=len(rows))
""",
    "gate": PRELUDE + r"""
from shopsim_wh.analytics.gate import GateOptions, gate
from shopsim_wh.engines.db import connect
t = time.perf_counter()
res = gate(connect(sys.argv[1]), sys.argv[2], sys.argv[3], GateOptions(bootstrap=1000))
done(t, pairs=res.n_pairs, decision=res.decision)
""",
    "export": PRELUDE + r"""
import shutil
from shopsim_wh.export import export
shutil.rmtree(sys.argv[2], ignore_errors=True)
t = time.perf_counter()
res = export("sft-action", sys.argv[1], sys.argv[2], where=sys.argv[3], shard_rows=500_000)
m = stats(t)  # the export's figures; then, not counted, the episodes it wrote
import duckdb
eps = duckdb.connect().execute(f"SELECT count(DISTINCT (run_id, episode_id)) FROM read_parquet('{sys.argv[2]}/**/*.parquet')").fetchone()[0]
print(json.dumps({**m, "rows": res.rows, "episodes_out": eps}))
""",
}


def size_of(path: Path | str) -> int:
    if "://" in str(path):
        return sum(size for _, size in objects(str(path)))
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def child(step: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", CODE[step], *map(str, args)], capture_output=True, text=True,
                          cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"{step} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    # the result, not DuckDB's progress bar: a long query draws one on stdout (no newline before the result)
    return json.loads(proc.stdout[proc.stdout.rindex('{"seconds"'):].splitlines()[0])


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


V4 = {"steps": 4, "obs_words": 60, "think_words": 40}
POOL = 20_020  # distinct records a large input repeats (a multiple of 7 x 11: write_file's error pattern repeats too)
POOL_BASE, TASK_BASE = 9_000_000, 1_000_000  # 7-digit task ids both: every form of the id in a line has 7 digits


def write_v4(path: str, n: int) -> None:
    """``synth_v4.write_file`` of ``n`` records, streamed; above :data:`POOL` episodes in a tenth of the time: the
    records of :data:`POOL` tasks are made once and repeated with each copy's task id put in (episode id, call
    ids, ``idx``, ``task_id``, goal), so every episode is distinct by id while the content, and so the bytes
    per episode, stays the generator's. Copies ``POOL`` apart share content: beyond zstd's window and Parquet's
    dictionary page, so they compress no better than distinct ones."""
    from shopsim_wh.demo import shopsimrl_v4 as synth_v4

    if n <= POOL:
        synth_v4.write_file(path, n, **V4)
        return
    pool = []
    for j in range(POOL):
        b = synth_v4.line(synth_v4.record(POOL_BASE + j, spec=synth_v4.RecordSpec(
            protocol_error_at=3 if j % 7 == 0 else None, length_failure=j % 11 == 5, **V4)))
        pool.append(b.split(str(POOL_BASE + j).encode()))
    with open(path, "wb") as f:
        for t in range(n):
            f.write(str(TASK_BASE + t).encode().join(pool[t % POOL]))


def v4_input(work: Path, n: int) -> Path:
    code = "import sys; from bench.bench_scale import write_v4; write_v4(sys.argv[1], int(sys.argv[2]))"
    key = {"n": n, "gen": generator_key(), **({"pool": POOL} if n > POOL else {})}
    return cached(work / f"v4-{n}.jsonl", key, lambda p: generate(code, p, n))


def analytics_warehouse(work: Path, n: int, uri: str | None = None) -> str:
    code = ("import sys; from shopsim_wh.analytics import synth; "
            "synth.generate(sys.argv[1], int(sys.argv[2]), synth.WarehouseSpec(runs=2, steps=15, seed=0, coding_episodes=0))")
    if uri is None:
        return str(cached(work / f"wh-{n}", {"n": n, "gen": generator_key()}, lambda p: generate(code, p, n)))
    from shopsim_wh.store.warehouse import Warehouse

    url = f"{uri.rstrip('/')}/wh-{n}"
    if Warehouse(url).store.current() is None:  # object storage: no marker; an existing snapshot is reused
        t = time.perf_counter()
        generate(code, url, n)
        print(f"  generated {url} in {time.perf_counter() - t:.0f} s", flush=True)
    return url


def objects(url: str):
    """(key, size) of every object under an s3:// prefix."""
    from shopsim_wh.store.storage import S3Store

    store = S3Store(url)
    for page in store.client.get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=store.prefix + "/"):
        yield from ((o["Key"], o["Size"]) for o in page.get("Contents", []))


def remove(target: Path | str) -> None:
    if "://" not in str(target):
        shutil.rmtree(target, ignore_errors=True)
        return
    from shopsim_wh.store.storage import S3Store

    store, keys = S3Store(str(target)), [k for k, _ in objects(str(target))]
    for i in range(0, len(keys), 1000):
        store.client.delete_objects(Bucket=store.bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})


@contextmanager
def object_storage(loopback: bool, uri: str | None):
    """Yield the s3:// root to use (None: local disk); with ``loopback``, moto's server for the duration."""
    if not loopback:
        yield uri
        return
    from shopsim_wh.testing.s3server import make_bucket, s3_server

    with s3_server() as env:
        os.environ.update(env)  # the measured children inherit it
        make_bucket("bench-scale")
        yield "s3://bench-scale"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000", help="comma-separated episode counts")
    ap.add_argument("--skip", default="", help=f"comma-separated steps to leave out ({', '.join(STEPS)})")
    ap.add_argument("--workdir", default="/tmp/shopsim-wh-bench-scale")
    ap.add_argument("--warehouse-uri", default=None,
                    help="an s3://bucket/prefix to ingest into and read from instead of local disk (see above)")
    ap.add_argument("--s3-loopback", action="store_true", help="start moto's server on loopback and use it")
    ap.add_argument("--export-where", default="true", help="the export's --where (default: every decision); "
                    "e.g. 'task_id %% 10 = 0' exports ~10%% of the episodes of any size: does the cost per "
                    "exported episode grow with the warehouse?")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    skip = {s for s in args.skip.split(",") if s}
    with object_storage(args.s3_loopback, args.warehouse_uri) as uri:
        print(table(measure(work, sizes, skip, uri, args.export_where)))


def measure(work: Path, sizes: list[int], skip: set[str], uri: str | None, where: str = "true") -> list[tuple]:
    rows = []
    for n in sizes:
        print(f"{n:,} episodes", flush=True)
        if "ingest" not in skip:
            src = v4_input(work, n)
            wh = f"{uri.rstrip('/')}/ingested-{n}" if uri else work / f"ingested-{n}"
            remove(wh)
            r = child("ingest", src, wh)
            rows.append((n, "ingest", r, size_of(src), size_of(wh)))
            remove(wh)
            print(f"  ingest {r} read {rows[-1][3]:,} B, wrote {rows[-1][4]:,} B", flush=True)
        if not {"run_metrics", "gate", "export"} - skip:
            continue
        wh = analytics_warehouse(work, n, uri)
        wh_bytes = size_of(wh)
        for step, extra in (("run_metrics", ()), ("gate", (BARE, TREATMENT)), ("export", (work / f"export-{n}", where))):
            if step in skip:
                continue
            r = child(step, wh, *extra)
            out_bytes = size_of(work / f"export-{n}") if step == "export" else 0
            rows.append((n, step, r, wh_bytes, out_bytes))
            print(f"  {step} {r} read {wh_bytes:,} B, wrote {out_bytes:,} B", flush=True)
        shutil.rmtree(work / f"export-{n}", ignore_errors=True)
    return rows


def table(rows: list[tuple]) -> str:
    first: dict[str, float] = {}
    lines = ["| step | episodes | seconds | µs per episode | bytes read per episode | bytes written per episode "
             "| peak RSS MB | measured process's own peak RSS MB | per-episode time vs smallest | CPU seconds "
             "| CPU µs per episode |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n, step, r, read, written in rows:
        per = r["seconds"] / n * 1e6
        base = first.setdefault(step, per)
        lines.append(f"| {step} | {n:,} | {r['seconds']:.1f} | {per:,.0f} | {read / n:,.0f} | {written / n:,.0f} "
                     f"| {r['peak_rss_mb']:,.0f} | {r['own_rss_mb']:,.0f} | {per / base:.2f}x | {r['cpu_seconds']:.1f} "
                     f"| {r['cpu_seconds'] / n * 1e6:,.0f} |")
    exports = [(n, r) for n, step, r, _, _ in rows if step == "export"]
    if exports:  # per exported episode: what a --export-where selection is compared by
        lines += ["", "| export: warehouse episodes | rows | episodes exported | CPU seconds "
                  "| CPU µs per exported episode | peak RSS MB |", "| ---: | ---: | ---: | ---: | ---: | ---: |"]
        lines += [f"| {n:,} | {r['rows']:,} | {r['episodes_out']:,} | {r['cpu_seconds']:.1f} "
                  f"| {r['cpu_seconds'] / max(r['episodes_out'], 1) * 1e6:,.0f} | {r['peak_rss_mb']:,.0f} |"
                  for n, r in exports]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
