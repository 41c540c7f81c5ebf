"""Real processes: `shopsim-wh sim serve` over loopback HTTP (both dialects) and SIGKILL-then-resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from shopsim_wh.engines.db import connect
from shopsim_wh.store.warehouse import Warehouse

from .conftest import free_port
from .helpers import write_config

CLI = [sys.executable, "-m", "shopsim_wh.cli.main"]


@pytest.fixture(scope="module")
def sim_url():
    port = free_port()
    proc = subprocess.Popen([*CLI, "sim", "serve", "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "/healthz").status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError(f"sim serve did not come up: {proc.stdout.read().decode()[-2000:]}")
        time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.mark.parametrize("dialect", ["shop_env", "pi-slime"])
def test_full_path_over_real_http(tmp_path, sim_url, dialect):
    cfg = write_config(tmp_path / "c.yaml", experiment={"name": f"http-{dialect}"}, tasks={"sample_size": 5},
                       model={"base_url": sim_url + "/v1"}, environment={"url": sim_url, "dialect": dialect})
    wh = tmp_path / "wh"
    out = subprocess.run([*CLI, "run", str(cfg), "--warehouse", str(wh)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr + out.stdout
    assert "5 completed" in out.stdout and "reward" in out.stdout
    con = connect(wh)
    assert con.execute("select count(*), count(*) filter (where status = 'completed' and done) from episodes").fetchone() == (5, 5)
    fidelity = con.execute("select observation_fidelity, environment_dialect from runs").fetchone()
    assert fidelity == (("canonical" if dialect == "shop_env" else "parsed_text"), dialect)
    # shop_env names the page type; without observation_state (pi-slime) it is read from the page title
    pages = {r[0] for r in con.execute("select distinct page from steps").fetchall()}
    assert {"search_home", "search_results", "product_detail"} <= pages and None not in pages and "unknown" not in pages
    states = {r[0] for r in con.execute("select distinct json_extract_string(observation_state, '$.observation_version') from steps").fetchall()}
    assert states == {"shopping-observation-v7" if dialect == "shop_env" else "parsed-text"}
    primary = con.execute("select primary_reward from runs").fetchone()[0]
    assert primary == ("r_strict" if dialect == "shop_env" else "r_loose")
    assert con.execute("select sum(reward) from episodes").fetchone()[0] > 0
    assert httpx.get(sim_url + "/v1/stats").json()["active_leases"] == 0


def _table_rows(wh: Path, table: str, drop: set[str]) -> list[tuple]:
    con = connect(wh)
    cols = [r[0] for r in con.execute(f"describe {table}").fetchall() if r[0] not in drop]
    # the server's session id (payload.idx, e.g. slot-3-17) names the slot the episode happened to get: scheduling,
    # like the timings; everything else in the payload must be equal
    sel = [f"json_remove({c}, '$.idx') AS {c}" if c == "payload" else c for c in cols]
    return sorted(con.execute(f"select {', '.join(sel)} from {table}").fetchall(), key=repr)


def test_sigkill_mid_run_then_resume_equals_an_uninterrupted_run(tmp_path):
    # 30 ms per model call (as a real server would take) keeps the run long enough to kill it mid-way (at 8 of 40
    # episodes: 40 leave enough to resume; 80 cost 24 CPU s against 17)
    sections = dict(experiment={"name": "resume"}, tasks={"sample_size": 20, "repeats": 2}, runtime={"concurrency": 4},
                    model={"extra_body": {"scripted_policy": {"latency_ms": 30}}})
    cfg = write_config(tmp_path / "c.yaml", **sections)
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    proc = subprocess.Popen([*CLI, "run", str(cfg), "--warehouse", str(killed)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:  # kill once some but not all episodes are committed
        n = sum(e.rows for e in Warehouse(killed).snapshot().files("episodes"))
        if n >= 8 or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    committed = sum(e.rows for e in Warehouse(killed).snapshot().files("episodes"))
    assert 0 < committed < 40, "the kill must land mid-run"
    out = subprocess.run([*CLI, "run", str(cfg), "--warehouse", str(killed)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"{committed} episode(s) already completed are skipped" in out.stderr  # diagnostics go to stderr
    out = subprocess.run([*CLI, "run", str(cfg), "--warehouse", str(clean)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    timing = {"started_at", "finished_at", "duration_s", "latency_ms", "load_id", "occurred_at", "created_at"}
    for table in ("episodes", "steps", "actions", "observations", "messages", "agents", "tools", "skills_selected"):
        a, b = _table_rows(killed, table, timing), _table_rows(clean, table, timing)
        assert a == b, f"{table} differs after kill + resume"
    con = connect(killed)
    assert con.execute("select count(*), count(distinct episode_id), max(attempt) from episode_attempts").fetchone() == (40, 40, 1)
