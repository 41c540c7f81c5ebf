"""A killed ingest (SIGKILL mid-commit), re-run, lands everything exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from shopsim_wh.db import connect
from shopsim_wh.ingest import ingest, synth_v4

N_PER_FILE = 600
CHILD = """
import sys
from shopsim_wh.ingest import ingest
ingest(sys.argv[2:], sys.argv[1], flush_every=50)
"""


def test_kill_and_rerun_lands_everything_once(tmp_path):
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
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(wh), *files], env=env, cwd=repo)
    deadline = time.monotonic() + 60
    # kill once the second unit is being written: one unit committed (its runs file exists), the next
    # one half-written (more episodes parts than one unit's 12)
    while time.monotonic() < deadline and proc.poll() is None:
        if list((wh / "runs").glob("*/*.parquet")) and len(list((wh / "episodes").glob("*/*.parquet"))) >= 15:
            break
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
    assert sorted(per_run) == [(N_PER_FILE * 4,)] * 3
    assert con.execute("select count(*) from import_fidelity").fetchone() == (3 * N_PER_FILE,)
