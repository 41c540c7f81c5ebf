"""A killed ingest (SIGKILL mid-commit), re-run, lands everything exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shopsim_wh.demo import shopsimrl_v4 as synth_v4
from shopsim_wh.engines.db import connect
from shopsim_wh.ingest import ingest
from shopsim_wh.store.warehouse import Warehouse

N_PER_FILE = 600
CHILD = """
import sys
from shopsim_wh.ingest import IngestOptions, ingest, v4
parallel = sys.argv[1] == "parallel"
if parallel:  # every file through the worker processes, which stage Parquet themselves
    v4.PIPELINE_MIN_BYTES = 0
ingest(sys.argv[3:], sys.argv[2], IngestOptions(flush_every=50, **({"flush_bytes": 256 * 1024} if parallel else {})))
"""


@pytest.mark.parametrize("mode", ["serial", "parallel"])
def test_kill_and_rerun_lands_everything_once(tmp_path, mode):
    files = []
    for k in range(3):
        d = tmp_path / f"exp{k}"
        d.mkdir()
        synth_v4.write_file(d / "traces.jsonl", N_PER_FILE, steps=4, obs_words=60, think_words=40,
                             task_base=10_000 * (k + 1))
        files.append(str(d / "traces.jsonl"))
    wh = tmp_path / "wh"
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode, str(wh), *files], env=env, cwd=repo)
    deadline = time.monotonic() + 60
    # kill once the second unit is being written: one unit committed (its runs file exists), the next
    # one half-written (more episodes parts than one unit's 12)
    while time.monotonic() < deadline and proc.poll() is None:
        committed = list((wh / "runs").glob("*/*.parquet"))
        if mode == "serial" and committed and len(list((wh / "episodes").glob("*/*.parquet"))) >= 15:
            break
        if mode == "parallel" and committed and len(list((wh / "_staging").glob("*.parquet"))) >= 3:
            break  # the next unit's chunks are being staged by the workers
        time.sleep(0.002)
    assert proc.poll() is None, "ingest finished before it could be killed; make the input bigger"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    con = connect(wh)
    n_before = con.execute("select count(*) from episodes").fetchone()[0]
    runs_before = con.execute("select count(*) from runs").fetchone()[0]
    con.close()
    assert n_before == runs_before * N_PER_FILE  # whole units or nothing
    assert 1 <= runs_before < 3
    s = ingest(files, wh)
    assert s.units_read == 3 - runs_before
    con = connect(wh)
    assert con.execute("select count(*) from runs").fetchone() == (3,)
    assert con.execute("select count(*), count(distinct (run_id, episode_id)) from episode_attempts").fetchone() == (
        3 * N_PER_FILE, 3 * N_PER_FILE)
    per_run = con.execute("select count(*) from steps group by run_id").fetchall()
    want = [sum(len(json.loads(raw)["steps"]) for raw in Path(f).read_bytes().splitlines()) for f in files]
    assert sorted(per_run) == sorted((n,) for n in want)
    assert con.execute("select count(*) from import_fidelity").fetchone() == (3 * N_PER_FILE,)
    con.close()
    with Warehouse(wh).writer() as w:  # what the killed workers staged was never visible; vacuum removes it
        w.vacuum(force=True)
    assert not list((wh / "_staging").iterdir())
