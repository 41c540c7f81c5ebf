"""`doctor` finds every kind of damage for real (files deleted, truncated, orphaned, duplicated; an old-schema
file; a lock held by the leftover child of a killed writer; unreachable servers; a missing catalog), prints the
command that fixes each, exits 1, and is clean again once those commands ran. Also `runs list|rm`, `vacuum`,
`compact` on the same warehouse."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow as pa
import pyarrow.parquet as pq

from shopsim_wh.ops.doctor import doctor, writer_pid
from shopsim_wh.store.maintenance import compact, list_runs, remove_run, vacuum
from shopsim_wh.store.warehouse import Snapshot, Warehouse, stage_parquet

from .catalog_support import BARE, PLACEBO, PLACEBO_BARE, SKILL, cli, cli_in_process, warehouse_copy
from .conftest import free_port
from .helpers import write_config

HOLD_LOCK = textwrap.dedent("""
    import os, signal, sys, time
    from shopsim_wh.store.warehouse import Warehouse
    with Warehouse(sys.argv[1]).writer():
        child = os.fork()
        if child == 0:  # a worker the writer started: it inherits the locked file (not the test's pipes)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            time.sleep(120)
            os._exit(0)
        print(child, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # the writer dies; its child keeps the lock
""")


def _file(wh: Warehouse, table: str, run_id: str):
    return wh.abspath(wh.snapshot().files(table, run_id)[0])


def _old_schema_file(wh: Warehouse, run_id: str) -> None:
    """An ingest_errors file as shopsim-wh before byte_offset existed wrote it: schema version 3, one column less."""
    data = pa.table({"source_file": ["old.jsonl"], "line": [1], "error_class": ["invalid_json"],
                     "message": ["bad"], "load_id": ["old"], "schema_version": pa.array([3], pa.int16())})
    with wh.writer() as w:
        entry = w._place("ingest_errors", run_id, stage_parquet(wh.staging_dir, data))
        entry.schema_version = 3
        tables = {t: list(es) for t, es in w.snap.tables.items()}
        tables.setdefault("ingest_errors", []).append(entry)
        w._publish(Snapshot(tables=tables, pending_delete=list(w.snap.pending_delete)))


class _NotFound(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_doctor_finds_each_problem_with_its_fix_and_is_clean_after_the_fixes(tmp_path):
    root = warehouse_copy(tmp_path / "wh")
    clean = cli_in_process("doctor", "-w", str(root))
    assert clean.exit_code == 0 and "no findings" in clean.output, clean.output

    wh = Warehouse(root)
    _file(wh, "steps", BARE).unlink()
    steps_skill = _file(wh, "actions", SKILL)
    os.truncate(steps_skill, steps_skill.stat().st_size // 2)
    twice = pq.read_table(_file(wh, "episodes", PLACEBO))
    with wh.writer() as w:
        w.commit([("episodes", PLACEBO, twice.slice(0, 3))])
    _old_schema_file(wh, PLACEBO_BARE)
    holder = subprocess.run([sys.executable, "-c", HOLD_LOCK, str(root)], capture_output=True, text=True, timeout=60)
    child = int(holder.stdout.split()[0])
    # after the holder opened its writer: opening a writer removes the leftovers of a killed one
    (wh.staging_dir / "part-dead.parquet").write_bytes(b"PAR1 half a file")
    (root / "steps" / "run_id=synth-coding" / "part-orphan.parquet").write_bytes(b"PAR1")
    live = ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=live.serve_forever, daemon=True).start()
    dead = free_port()
    cfg = write_config(tmp_path / "c.yaml", model={"base_url": f"http://127.0.0.1:{dead}/v1"},
                       environment={"url": f"http://127.0.0.1:{live.server_address[1]}"},
                       output={"warehouse": str(root), "catalog": str(tmp_path / "bi.duckdb")})
    try:
        res = cli("doctor", "--config", str(cfg), "--format", "json")
        assert res.returncode == 1, res.stderr
        found = json.loads(res.stdout)["findings"]
        codes = {f["code"]: f for f in found}
        assert set(codes) == {"file_missing", "file_size", "duplicate_episode", "schema_old", "orphan_staging",
                              "orphan_file", "stale_lock", "server_unreachable", "catalog_stale"}, found
        # the environment answers (404 is an answer), the model server does not
        assert [f["path"] for f in found if f["code"] == "server_unreachable"] == [f"http://127.0.0.1:{dead}/v1/models"]
        assert f"shopsim-wh runs rm {BARE}" in codes["file_missing"]["fix"]
        assert f"shopsim-wh runs rm {SKILL}" in codes["file_size"]["fix"]
        assert codes["duplicate_episode"]["run_id"] == PLACEBO and "3 episode attempt(s)" in codes["duplicate_episode"]["message"]
        assert codes["schema_old"]["fix"] == f"shopsim-wh compact --run {PLACEBO_BARE}"
        assert "shopsim-wh vacuum" in codes["orphan_staging"]["fix"] and "fuser" in codes["stale_lock"]["fix"]
        assert codes["catalog_stale"]["fix"].startswith("shopsim-wh catalog")
    finally:
        live.shutdown()
        os.kill(child, signal.SIGKILL)  # the fix doctor printed: stop the holder (its pid, printed by the writer)

    deadline = time.monotonic() + 30
    while writer_pid(wh)[0] and time.monotonic() < deadline:
        time.sleep(0.05)
    # the fixes doctor printed: vacuum, runs rm + land again, compact
    assert vacuum(root, force=True)["removed_files"] >= 2
    for run_id in (BARE, SKILL, PLACEBO):
        remove_run(root, run_id)
    assert compact(root, [PLACEBO_BARE])["files_replaced"] > 0
    assert doctor(root) == []


def test_runs_list_rm_vacuum_compact(tmp_path):
    root = warehouse_copy(tmp_path / "wh")
    wh = Warehouse(root)
    listed = json.loads(cli_in_process("runs", "list", "-w", str(root), "--format", "json").output)["runs"]
    assert {r["run_id"] for r in listed} == wh.snapshot().run_ids()
    assert {r["run_id"]: r["episodes"] for r in listed} == {
        r: sum(e.rows for e in wh.snapshot().files("episodes", r)) for r in wh.snapshot().run_ids()}
    files = [wh.abspath(e) for t in wh.snapshot().tables for e in wh.snapshot().files(t, PLACEBO)]
    out = cli_in_process("runs", "rm", PLACEBO, "-w", str(root))
    assert out.exit_code == 0 and "shopsim-wh vacuum" in out.output, out.output
    assert PLACEBO not in wh.snapshot().run_ids() and all(f.exists() for f in files)  # kept for older readers
    missing = cli("runs", "rm", PLACEBO, "-w", str(root))
    assert missing.returncode == 2 and BARE in missing.stderr and "runs list" in missing.stderr
    assert vacuum(root)["removed_files"] == 0  # inside the grace period
    assert vacuum(root, grace_s=0)["removed_files"] == len(files) and not any(f.exists() for f in files)
    assert PLACEBO not in {r.run_id for r in list_runs(root)}

    loads = pq.read_table(_file(wh, "loads", BARE))
    with wh.writer() as w:  # two more small loads files for the bare run
        w.commit([("loads", BARE, loads)])
        w.commit([("loads", BARE, loads)])
    before = len(wh.snapshot().files("loads", BARE))
    assert compact(root, [BARE])["files_replaced"] == before == 3
    after = wh.snapshot().files("loads", BARE)
    assert len(after) == 1 and after[0].rows == 3 * loads.num_rows
