"""The CLI as a user runs it: real subprocesses, real warehouse."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from .helpers import write_config

CLI = [sys.executable, "-m", "shopsim_wh.cli.main"]


@pytest.fixture(scope="module")
def demo_wh(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    cfg = write_config(tmp / "c.yaml", tasks={"sample_size": 4})
    out = subprocess.run([*CLI, "run", str(cfg), "-w", str(tmp / "wh")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "run t: planned 4, completed 4" in out.stdout
    return tmp / "wh"


def _cli(*args, env=None):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, env=env)


def test_sql_formats(demo_wh, tmp_path):
    q = "select episode_id, reward from episodes order by episode_id"
    rows = json.loads(_cli("sql", q, "-w", str(demo_wh), "--format", "json").stdout)
    assert len(rows) == 4 and set(rows[0]) == {"episode_id", "reward"}
    csv_out = _cli("sql", q, "-w", str(demo_wh), "--format", "csv").stdout.splitlines()
    assert csv_out[0] == "episode_id,reward" and len(csv_out) == 5
    table = _cli("sql", q, "-w", str(demo_wh)).stdout
    assert "(4 rows)" in table
    out = _cli("sql", q, "-w", str(demo_wh), "--format", "parquet", "--out", str(tmp_path / "x.parquet"))
    assert out.returncode == 0 and pq.read_table(tmp_path / "x.parquet").num_rows == 4


def test_sql_binds_parameters(demo_wh):
    out = _cli("sql", "select count(*) as n from episodes where episode_id = $e", "-w", str(demo_wh),
               "-p", "e=x' or '1'='1", "--format", "json")
    assert json.loads(out.stdout) == [{"n": 0}]


def test_tables_and_summarize(demo_wh):
    out = _cli("tables", "-w", str(demo_wh)).stdout
    assert "episodes" in out and "steps" in out and " 4" in out
    assert "paired_deltas(bare_run, treatment_run)" in out and "table macro" in out
    out = _cli("summarize", "-w", str(demo_wh)).stdout
    assert "coverage 1.000" in out and "termination:" in out


def test_warehouse_defaults_to_env_var(demo_wh):
    import os

    env = {**os.environ, "SHOPSIM_WH_HOME": str(demo_wh)}
    out = _cli("sql", "select count(*) n from runs", "--format", "json", env=env)
    assert json.loads(out.stdout) == [{"n": 1}]


def test_errors_say_what_to_do(tmp_path):
    out = _cli("sql", "select 1", "-w", str(tmp_path / "none"))
    assert out.returncode != 0 and "shopsim-wh run" in out.stderr
    out = _cli("run", str(tmp_path / "missing.yaml"))
    assert out.returncode == 2 and "not found" in out.stderr
    out = _cli("sql", "select * from nope", "-w", str(tmp_path / "none"))
    assert out.returncode != 0


def test_a_bad_query_gets_a_message_not_a_traceback(demo_wh):
    out = _cli("sql", "select * from nope", "-w", str(demo_wh))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "nope does not exist" in out.stderr and "shopsim-wh tables" in out.stderr
