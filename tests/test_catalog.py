"""The BI catalog file: opened read-only by another process from another directory, every view answers as
connect() does, every object is described, a refresh is atomic for readers and a catalog pins its snapshot."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from shopsim_wh.core.config import load_config
from shopsim_wh.core.schema import TABLES
from shopsim_wh.engines.catalog import build_catalog, catalog_snapshot
from shopsim_wh.ops.doctor import check_catalogs
from shopsim_wh.store.maintenance import remove_run
from shopsim_wh.store.warehouse import Warehouse

from .catalog_support import PLACEBO, cli, cli_in_process, warehouse_copy

READER = textwrap.dedent("""
    import json, sys, duckdb
    con = duckdb.connect(sys.argv[1], read_only=True)
    views = [r[0] for r in con.execute(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal AND schema_name = 'main' ORDER BY 1").fetchall()]
    counts = {v: con.execute(f'SELECT count(*) FROM "{v}"').fetchone()[0] for v in views}
    undocumented = con.execute(
        "SELECT table_name || '.' || column_name FROM duckdb_columns() WHERE schema_name = 'main' "
        "AND table_name IN (SELECT unnest(?)) AND coalesce(comment, '') = ''", [views + ['catalog_info']]).fetchall()
    undocumented += con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal AND schema_name = 'main' "
                                "AND coalesce(comment, '') = ''").fetchall()
    undocumented += con.execute("SELECT DISTINCT function_name FROM duckdb_functions() WHERE schema_name = 'main' "
                                "AND NOT internal AND function_type IN ('macro', 'table_macro') "
                                "AND coalesce(comment, '') = ''").fetchall()
    try:
        con.execute("CREATE TABLE t (x INT)")
        writable = True
    except duckdb.Error:
        writable = False
    macro = con.execute("SELECT count(*) FROM paired_deltas('synth-ckpt-a-bare', 'synth-ckpt-a-skill')").fetchone()[0]
    print(json.dumps({"counts": counts, "undocumented": [u[0] for u in undocumented], "writable": writable,
                      "pairs": macro}))
""")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A warehouse copy and its catalog, written by the CLI into a directory of its own."""
    tmp = tmp_path_factory.mktemp("catalog")
    root = warehouse_copy(tmp / "wh")
    out = tmp / "bi" / "shop.duckdb"
    res = cli("catalog", "-w", str(root), "--out", str(out), "--format", "json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["path"] == str(out) and info["snapshot_version"] == Warehouse(root).snapshot().version
    return root, out


def test_catalog_opens_read_only_from_another_directory_and_every_view_answers(built, tmp_path):
    root, out = built
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "reader.py").write_text(READER)
    read = subprocess.run([sys.executable, "reader.py", str(out)], cwd=elsewhere, capture_output=True, text=True,
                          timeout=120)
    assert read.returncode == 0, read.stderr
    got = json.loads(read.stdout)
    snap = Warehouse(root).snapshot()  # the staging views read exactly the snapshot's files: its row counts
    assert {t: got["counts"][f"stg_{t}"] for t in TABLES} == {t: sum(e.rows for e in snap.files(t)) for t in TABLES}
    assert got["counts"]["episodes"] > 0 and got["counts"]["run_metrics"] == 5 and got["pairs"] > 100
    assert got["undocumented"] == [] and got["writable"] is False
    assert [p.name for p in out.parent.iterdir()] == ["shop.duckdb"]  # no temporary file or WAL left


def test_refresh_is_atomic_for_readers_and_a_catalog_pins_its_snapshot(built, tmp_path):
    root, built_out = built
    out = tmp_path / "shop.duckdb"
    shutil.copy(built_out, out)  # a catalog file works wherever it is: its views name absolute paths
    first = catalog_snapshot(out)
    remove_run(root, PLACEBO)
    assert check_catalogs(root, Warehouse(root).snapshot(), [out])[0].code == "catalog_stale"
    stop, ready = tmp_path / "stop", tmp_path / "ready"
    loop = textwrap.dedent(f"""
        import json, os, time, duckdb
        seen, errors, opens = set(), [], 0
        while True:
            done = os.path.exists({str(stop)!r})
            try:
                con = duckdb.connect({str(out)!r}, read_only=True)
                seen.add(con.execute("SELECT value FROM catalog_info WHERE key = 'snapshot_version'").fetchone()[0])
                con.execute("SELECT count(*) FROM runs").fetchone()
                con.close()
                opens += 1
                if opens == 1:
                    open({str(ready)!r}, "w").close()
            except Exception as exc:
                errors.append(repr(exc))
            if done:
                break
            time.sleep(0.05)
        print(json.dumps({{"seen": sorted(seen), "errors": errors, "opens": opens}}))
    """)
    reader = subprocess.Popen([sys.executable, "-c", loop], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and reader.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        second = build_catalog(root, out)
    finally:
        stop.touch()
        stdout, stderr = reader.communicate(timeout=60)
    got = json.loads(stdout)
    assert got["errors"] == [], got["errors"][:3]
    assert got["opens"] > 1 and str(second.snapshot_version) in got["seen"]
    assert second.snapshot_version > first == int(min(got["seen"], key=int))
    assert catalog_snapshot(out) == second.snapshot_version
    assert check_catalogs(root, Warehouse(root).snapshot(), [out]) == []
    import duckdb

    con = duckdb.connect(str(out), read_only=True)
    assert PLACEBO not in {r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()}
    assert [p.name for p in tmp_path.iterdir() if "tmp" in p.name or p.name.endswith(".wal")] == []


def test_run_refreshes_the_configured_catalog(tmp_path):
    from .helpers import write_config

    out = tmp_path / "dash" / "shop.duckdb"
    cfg = write_config(tmp_path / "c.yaml", tasks={"sample_size": 2},
                       output={"warehouse": str(tmp_path / "wh"), "catalog": str(out)})
    res = cli_in_process("run", str(cfg))
    assert res.exit_code == 0, res.output
    import duckdb

    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT run_id, planned FROM run_metrics").fetchall() == [("t", 2)]
    assert catalog_snapshot(out) == Warehouse(tmp_path / "wh").snapshot().version
    from shopsim_wh.ops.doctor import doctor

    assert doctor(tmp_path / "wh", load_config(cfg)) == []  # a fresh runner warehouse is clean, catalog included
