"""The child-process harness the export benchmarks share (bench_export.py, bench_export_rl.py).

Each method runs in its own process (``--child NAME``), so its peak RSS (ru_maxrss) is its own: the parent
stays small (it generates the synthetic warehouse in a child too; Linux carries a forking parent's pages into
the child's ru_maxrss), runs the methods, and prints rate, MB/s of output, peak RSS, CPU seconds (every thread)
with the load average before and after, and the ratios export/naive, export/copy and the CPU per unit of copy
over export (steadier than wall time on a shared machine). ``--sizes N,2N,4N`` runs only the shipped export at several warehouse
sizes and prints its peak RSS at each (memory must stay flat as the warehouse grows).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_s() -> float:
    """CPU seconds of this process (every thread, user + system) and of the children it waited for."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def loadavg() -> float:
    """The 1-minute load average (the machine is shared: every figure is read against it)."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def copy_floor(kind: str, wh: Path, out: Path) -> dict:
    """The plain-COPY floor of ``kind``: its view's rows written by one DuckDB ``COPY ... TO parquet`` on a
    connection prepared as the export prepares one batch (scope, building blocks materialized). With
    ``--copy-memory`` (env SHOPSIM_WH_BENCH_COPY_MEMORY) DuckDB is capped there and spills beside ``out``."""
    import os

    from shopsim_wh.engines.db import connect, install_exports
    from shopsim_wh.export.core import blocks_of, prepare
    from shopsim_wh.export.registry import get_kind

    t = time.perf_counter()
    con = connect(wh)
    if os.environ.get("SHOPSIM_WH_BENCH_COPY_MEMORY"):
        con.execute(f"SET temp_directory = '{out.parent / (out.name + '-spill')}'")
        con.execute(f"SET memory_limit = '{os.environ['SHOPSIM_WH_BENCH_COPY_MEMORY']}'")
    install_exports(con)
    con.execute("SET enable_progress_bar = false")
    con.execute("CREATE OR REPLACE TEMP TABLE export_scope AS SELECT run_id FROM runs")
    spec = get_kind(kind)
    prepare(con, spec, blocks_of(spec))  # the building blocks the export materializes, in one batch
    out.mkdir(parents=True)
    con.execute(f"COPY (SELECT * FROM {spec.view}) TO '{out / 'all.parquet'}' (FORMAT parquet, COMPRESSION zstd)")
    rows = con.execute(f"SELECT count(*) FROM '{out / 'all.parquet'}'").fetchone()[0]
    shutil.rmtree(out.parent / (out.name + "-spill"), ignore_errors=True)
    return {"rows": rows, "seconds": time.perf_counter() - t}


def _child(methods: dict[str, Callable], out_root: Path, name: str, wh: Path, n: int) -> None:
    out = out_root / name
    shutil.rmtree(out, ignore_errors=True)
    load0, cpu0 = loadavg(), cpu_s()
    r = methods[name](wh, out, n)
    r.update(method=name, bytes=size(out), peak_rss_mb=round(rss_mb(), 1), cpu_s=round(cpu_s() - cpu0, 2),
             load=[load0, loadavg()])
    shutil.rmtree(out, ignore_errors=True)
    print(json.dumps(r))


def _run(script: str, name: str, wh: Path, n: int, unit: str, out_root: Path) -> dict:
    p = subprocess.run([sys.executable, script, "--child", name, "--wh", str(wh), "--naive", str(n),
                        "--workdir", str(out_root)], capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{name} failed:\n{p.stderr[-3000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["rate"] = r[unit] / r["seconds"]
    r["mb_per_s"] = r["bytes"] / 1e6 / r["seconds"]
    return r


def main(script: str, methods: dict[str, Callable], out_root: Path, generate: Callable[[Path, int], None], *,
         default_n: int, naive_default: int, unit: str, what: str) -> None:
    """``unit``: the key of a method's result counted per second (``rows`` or ``episodes``)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=default_n, help=f"episodes in the synthetic warehouse ({what})")
    ap.add_argument("--naive", type=int, default=naive_default, help="what the naive loop exports (a rate sample)")
    ap.add_argument("--methods", default="export,copy,naive", help="comma-separated subset of export,copy,naive")
    ap.add_argument("--sizes", help="comma-separated warehouse sizes: export only, peak RSS at each")
    ap.add_argument("--copy-memory", help="cap DuckDB's memory for the COPY floor (e.g. 8GB; default: DuckDB's 80%% "
                    "of RAM), for warehouses whose plain COPY needs more than the machine has")
    ap.add_argument("--workdir", type=Path, default=out_root,
                    help=f"where the warehouses (cached by size), outputs and spills go (default: {out_root})")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--generate", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--wh", help=argparse.SUPPRESS)
    a = ap.parse_args()
    out_root = a.workdir
    if a.copy_memory:
        import os

        os.environ["SHOPSIM_WH_BENCH_COPY_MEMORY"] = a.copy_memory  # the children inherit it
    if a.child:
        _child(methods, out_root, a.child, Path(a.wh), a.naive)
        return
    if a.generate:
        generate(Path(a.wh), a.generate)
        return

    def warehouse(n: int) -> Path:
        wh = out_root / f"wh-{n}"
        if not wh.exists():  # in a child too: a child forked from a big parent would count its pages in ru_maxrss
            t = time.perf_counter()
            subprocess.run([sys.executable, script, "--generate", str(n), "--wh", str(wh)], check=True)
            print(f"generated {n:,} episodes in {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
        return wh

    if a.sizes:
        for n in (int(s) for s in a.sizes.split(",")):
            r = _run(script, "export", warehouse(n), a.naive, unit, out_root)
            print(f"{n:>9,} episodes: {r['rows']:>10,} rows in {r['seconds']:8.2f} s  {r['rate']:>9,.0f} {unit}/s  "
                  f"{r['mb_per_s']:6.2f} MB/s  peak RSS {r['peak_rss_mb']:.0f} MB  {r['cpu_s']:.1f} CPU s  "
                  f"load {r['load'][0]:.1f}-{r['load'][1]:.1f}", flush=True)
        return
    wh = warehouse(a.n)
    res = {}
    for name in a.methods.split(","):
        r = res[name] = _run(script, name, wh, a.naive, unit, out_root)
        print(f"{name:>7}: {r['episodes'] if 'episodes' in r else '':>9} episodes  {r['rows']:>10,} rows in "
              f"{r['seconds']:8.2f} s  {r['rate']:>9,.0f} {unit}/s  {r['mb_per_s']:6.2f} MB/s  "
              f"peak RSS {r['peak_rss_mb']:.0f} MB  {r['cpu_s']:.1f} CPU s  load {r['load'][0]:.1f}-{r['load'][1]:.1f}",
              flush=True)
    if "export" in res:
        e = res["export"]["rate"]
        ratios = [f"export / {m}: {e / res[m]['rate']:.2f}x {unit}/s" for m in ("naive", "copy") if m in res]
        if "copy" in res:  # CPU per unit: steadier than wall time on a shared machine
            c = res["export"]["cpu_s"] / res["export"][unit]
            ratios.append(f"CPU per {unit[:-1]} copy / export: {res['copy']['cpu_s'] / res['copy'][unit] / c:.2f}x")
        print(";  ".join(ratios) + "  (vs copy 1.0 = as fast as plain COPY)")
