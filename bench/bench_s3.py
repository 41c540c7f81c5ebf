"""Object storage: how DuckDB reads an s3:// warehouse, and what writing one costs, on moto's loopback server.

    python bench/bench_s3.py build --episodes 5000         # starts moto, writes demo data locally and to s3://
    python bench/bench_s3.py read  --endpoint URL --lists F # one reader side (run under each DuckDB)

``all`` does both in one process for this project's DuckDB (fsspec/s3fs registered with the connection) and,
given ``--other-python`` (a scratch venv with DuckDB 1.5.x + ``duckdb-extension-httpfs``), runs the same read
queries there through httpfs against the same server and the same snapshot file lists. Each read side runs in
a fresh process: a cold full scan of ``steps`` (every column) and a one-episode lookup, best of 3 per
fresh connection. The file lists are plain JSON so the other side needs nothing of this package.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

QUERIES = {
    "full_scan_steps": "SELECT count(*), sum(length(CAST(COLUMNS(*) AS VARCHAR))) FROM read_parquet({files})",
    "one_episode_steps": "SELECT * FROM read_parquet({files}) WHERE episode_id = $ep",
}


def read_side(endpoint: str, lists: str) -> dict:
    import duckdb

    doc = json.load(open(lists))
    files = "[" + ", ".join("'" + f + "'" for f in doc["steps"]) + "]"
    out = {"duckdb": duckdb.__version__}
    for name, q in QUERIES.items():
        best = None
        for _ in range(3):
            con = duckdb.connect()  # cold: no metadata cache, no object cache
            mode = _attach_s3(con, endpoint)
            t0 = time.perf_counter()
            rows = con.execute(q.format(files=files), {"ep": doc["episode"]} if "$ep" in q else {}).fetchall()
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
            con.close()
        out[name] = {"seconds": round(best, 3), "rows": len(rows)}
    out["mode"] = mode
    return out


def _attach_s3(con, endpoint: str) -> str:
    import duckdb

    if duckdb.__version__.startswith("1."):
        host = endpoint.split("://", 1)[1]
        import duckdb_extension_httpfs  # the PyPI package ships the extension binary; LOAD it by path

        ext = f"{duckdb_extension_httpfs.__path__[0]}/extensions/v{duckdb.__version__}/httpfs.duckdb_extension"
        con.execute(f"LOAD '{ext}'")
        con.execute(f"CREATE SECRET (TYPE s3, KEY_ID 'test', SECRET 'test', REGION 'us-east-1', ENDPOINT '{host}', "
                    "URL_STYLE 'path', USE_SSL false)")
        return "httpfs"
    from shopsim_wh.store.storage import S3Store

    S3Store("s3://x").register(con)
    return "fsspec-s3fs"


def build(episodes: int, endpoint: str, work: str, local: bool = True, exports: bool = True) -> dict:
    from shopsim_wh.demo.shop import WarehouseSpec, demo_runs, generate
    from shopsim_wh.testing.s3server import make_bucket

    make_bucket("bench")
    url = f"s3://bench/wh-{episodes}"
    t0 = time.perf_counter()
    shape = WarehouseSpec(runs=demo_runs(), seed=11, repeats=2, coding_episodes=6)
    if local:
        generate(os.path.join(work, "local"), episodes, shape)
    t_local = time.perf_counter() - t0 if local else None
    t0 = time.perf_counter()
    generate(url, episodes, shape)
    t_s3 = time.perf_counter() - t0
    from shopsim_wh.store.warehouse import Warehouse

    wh = Warehouse(url)
    snap = wh.snapshot()
    steps = snap.files("steps")
    ep = wh.read("episodes", ["episode_id"], snap=snap).column("episode_id")[0].as_py()
    lists = os.path.join(work, "lists.json")
    json.dump({"steps": [wh.reader_path(e) for e in steps], "episode": ep}, open(lists, "w"))
    out = {"url": url, "lists": lists, "write_local_s": t_local and round(t_local, 2), "write_s3_s": round(t_s3, 2),
           "steps_files": len(steps), "steps_bytes": sum(e.bytes for e in steps), "steps_rows": sum(e.rows for e in steps)}
    for side, root in (("local", os.path.join(work, "local")), ("s3", url)):
        if side == "s3" or local:
            out[side] = _workload(root, os.path.join(work, f"export-{side}") if exports else None)
    return out


def _workload(root: str, out_dir: str) -> dict:
    """connect, run_metrics and the sft-action export on one side (the issue's per-size workload)."""
    from shopsim_wh.engines.db import connect
    from shopsim_wh.export import export

    t0 = time.perf_counter()
    con = connect(root)
    res = {"connect_s": round(time.perf_counter() - t0, 2)}
    t0 = time.perf_counter()
    con.execute("SELECT * FROM run_metrics").fetchall()
    res["run_metrics_s"] = round(time.perf_counter() - t0, 2)
    con.close()
    if out_dir:
        t0 = time.perf_counter()
        rows = export("sft-action", root, out_dir).rows
        res.update(sft_action_s=round(time.perf_counter() - t0, 2), sft_action_rows=rows)
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["all", "read"])
    ap.add_argument("--episodes", type=int, default=5000)
    ap.add_argument("--endpoint")
    ap.add_argument("--lists")
    ap.add_argument("--other-python", help="a python with DuckDB 1.5.x + duckdb-extension-httpfs")
    ap.add_argument("--s3-only", action="store_true", help="no local warehouse (write, connect, run_metrics on s3)")
    ap.add_argument("--no-export", action="store_true", help="skip the sft-action export")
    a = ap.parse_args()
    if a.cmd == "read":
        print(json.dumps(read_side(a.endpoint, a.lists)))
        return
    from shopsim_wh.testing.s3server import s3_server

    with s3_server() as env, tempfile.TemporaryDirectory() as work:
        os.environ.update(env)
        res = {"build": build(a.episodes, env["AWS_ENDPOINT_URL"], work, not a.s3_only, not a.no_export)}
        for label, py in (("this", sys.executable), ("other", a.other_python)):
            if not py:
                continue
            p = subprocess.run([py, __file__, "read", "--endpoint", env["AWS_ENDPOINT_URL"], "--lists",
                                res["build"]["lists"]], capture_output=True, text=True, env={**os.environ})
            res[label] = json.loads(p.stdout) if p.returncode == 0 else {"error": p.stderr[-1500:]}
        print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
