"""What a new user hit, and the exit codes of docs/cli.md: the real entry point (`main()`, in process to keep the
suite fast; tests/test_tutorial.py and test_cli_startup.py run it as subprocesses), real servers on loopback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from shopsim_wh.cli import exits

from .conftest import free_port, serve_asgi
from .helpers import write_config

CLI = [sys.executable, "-m", "shopsim_wh.cli.main"]


@pytest.fixture
def _cli(capfd, monkeypatch):
    """shopsim-wh ARGS through main(), as the console script calls it: (returncode, stdout, stderr)."""
    from shopsim_wh.cli.main import main

    def call(*args):
        monkeypatch.setattr(sys, "argv", ["shopsim-wh", *map(str, args)])
        capfd.readouterr()
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)

    return call


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The cookbook's synthetic warehouse, small, built by the command a user would run."""
    wh = tmp_path_factory.mktemp("demo") / "wh"
    out = subprocess.run([*CLI, "demo-data", "-w", str(wh), "--episodes", "300", "--format", "json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return wh, json.loads(out.stdout)


def test_demo_data_builds_every_run_the_cookbook_names(demo, _cli):
    import re

    from .conftest import REPO

    wh, doc = demo
    named = set(re.findall(r"'(synth-[a-z0-9-]+)'", (REPO / "docs" / "sql_cookbook.md").read_text()))
    assert named and named <= set(doc["runs"]), named - set(doc["runs"])
    # a cookbook query (paired deltas of the planted skill) has rows on it, and no absent-run note
    out = _cli("sql", "-w", wh, "--format", "json",
               "SELECT count(*) AS n FROM paired_deltas('synth-ckpt-a-bare', 'synth-ckpt-a-skill')")
    assert out.returncode == 0 and json.loads(out.stdout)[0]["n"] > 0 and "note:" not in out.stderr


def test_a_query_naming_absent_runs_says_so(demo, _cli):
    wh, _ = demo
    out = _cli("sql", "-w", wh, "SELECT count(*) FROM episodes WHERE run_id = 'demo'")
    assert out.returncode == 0 and "(1 row)" in out.stdout
    assert "no run 'demo'" in out.stderr and "synth-ckpt-a-bare" in out.stderr
    out = _cli("sql", "-w", wh, "SELECT * FROM paired_deltas('synth-ckpt-z-bare', 'synth-ckpt-a-skill')")
    assert "no run 'synth-ckpt-z-bare'" in out.stderr and "demo-data" in out.stderr
    assert "synth-ckpt-a-skill'" not in out.stderr.split("its runs")[0]


def test_gate_exit_codes_and_json(demo, _cli):
    wh, _ = demo
    out = _cli("gate", "-w", wh, "--bare", "synth-ckpt-a-bare", "--treatment", "synth-ckpt-a-skill", "--format", "json",
               "--bootstrap", 200)
    assert out.returncode == exits.OK, out.stderr
    assert json.loads(out.stdout)["decision"] == "pass"
    out = _cli("gate", "-w", wh, "--bare", "synth-ckpt-b-bare", "--treatment", "synth-ckpt-b-placebo", "--quiet",
               "--bootstrap", 200)
    assert out.returncode == exits.FAILED and out.stdout == ""


def test_summarize_json_and_an_unknown_experiment(demo, _cli):
    wh, doc = demo
    out = _cli("summarize", "-w", wh, "--experiment", "synth-ckpt-a-bar")
    assert out.returncode == exits.USAGE and "Traceback" not in out.stderr
    assert "'synth-ckpt-a-bar'" in out.stderr and "synth-ckpt-a-bare" in out.stderr and "--experiment" in out.stderr
    runs = json.loads(_cli("summarize", "-w", wh, "--format", "json").stdout)["runs"]
    assert sorted(r["run_id"] for r in runs) == sorted(doc["runs"])
    assert all(0 <= r["reward_mean"] <= 1 for r in runs if r["reward_mean"] is not None)


def test_sql_parquet_prints_no_warning(demo, tmp_path, _cli):
    import warnings

    wh, _ = demo
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # DuckDB's UserWarning from db.fetch_arrow would fail the command
        out = _cli("sql", "-w", wh, "--format", "parquet", "--out", tmp_path / "e.parquet",
                   "SELECT episode_id, reward FROM episodes WHERE run_id = $r", "-p", "r=synth-ckpt-a-bare")
    assert out.returncode == 0 and "Warning" not in out.stderr, out.stderr
    assert out.stdout.startswith("wrote 60 rows")


def test_run_plan_tables_json_and_resume_without_an_empty_bar(tmp_path, _cli):
    cfg = write_config(tmp_path / "c.yaml", tasks={"sample_size": 2})
    plan = json.loads(_cli("plan", cfg, "--format", "json").stdout)
    assert plan["episodes"] == 2 and plan["experiment"] == "t" and len(plan["fingerprint"]) == 32
    first = _cli("run", cfg, "-w", tmp_path / "wh")
    assert first.returncode == exits.OK and "2/2" in first.stderr and "run t: planned 2" in first.stdout
    again = _cli("run", cfg, "-w", tmp_path / "wh", "--format", "json")
    assert again.returncode == exits.OK
    doc = json.loads(again.stdout)
    assert (doc["skipped"], doc["attempted"], doc["summary"]["completed"]) == (2, 0, 2)
    assert "resuming: 2 episode(s)" in again.stderr and "0/0" not in again.stderr
    tables = json.loads(_cli("tables", "-w", tmp_path / "wh", "--format", "json").stdout)
    rels = {r["name"]: r for r in tables["relations"]}
    assert rels["runs"]["rows"] == 1 and rels["episodes"]["rows"] == 2 and rels["episodes"]["kind"] in ("view", "table")
    assert {"name": "paired_deltas", "kind": "table_macro", "parameters": ["bare_run", "treatment_run"]} in tables["macros"]


class Overloaded:
    """A model server that answers every request 503: episodes fail, the server is reachable."""

    async def __call__(self, scope, receive, send):
        await send({"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b'{"error": {"message": "overloaded"}}'})


def test_a_run_with_failed_episodes_exits_1(tmp_path, _cli):
    with serve_asgi(Overloaded()) as url:
        cfg = write_config(tmp_path / "c.yaml", tasks={"sample_size": 2}, model={"base_url": url + "/v1", "max_retries": 0})
        out = _cli("run", cfg, "-w", tmp_path / "wh", "--format", "json")
    assert out.returncode == exits.FAILED, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["completed"], doc["failed"], doc["unreachable"]) == (0, 2, {})
    assert "2 episode(s) failed" in out.stderr and "run the same command again" in out.stderr


def test_a_server_that_refuses_exits_3_and_is_named(tmp_path, _cli):
    dead = f"http://127.0.0.1:{free_port()}"
    cfg = write_config(tmp_path / "m.yaml", tasks={"sample_size": 6},
                       model={"base_url": dead + "/v1", "max_retries": 0})
    out = _cli("run", cfg, "-w", tmp_path / "wh", "--concurrency", 1)
    assert out.returncode == exits.UNREACHABLE, out.stderr
    assert f"model server at {dead}/v1 (model.base_url)" in out.stderr and "running and listening" in out.stderr
    assert "stopped after 1 episode(s)" in out.stderr  # down from the start: no 6 x retries
    cfg = write_config(tmp_path / "e.yaml", experiment={"name": "e"}, environment={"url": dead})
    out = _cli("run", cfg, "-w", tmp_path / "wh")
    assert out.returncode == exits.UNREACHABLE and f"environment server at {dead}" in out.stderr
    assert "environment.url" in out.stderr and "Traceback" not in out.stderr


def test_usage_errors_exit_2(tmp_path, _cli):
    assert _cli("run", "--no-such-option").returncode == exits.USAGE
    out = _cli("tables", "--format", "xml", "-w", tmp_path)
    assert out.returncode == exits.USAGE and "text, json" in out.stderr


def test_locked_and_interrupted_codes(tmp_path):
    from shopsim_wh.core.errors import WarehouseLockedError
    from shopsim_wh.store.warehouse import Warehouse

    wh = Warehouse(tmp_path / "wh")
    with wh.writer():
        with pytest.raises(WarehouseLockedError) as info, wh.writer(timeout_s=0):
            pass
    assert exits.code_for(info.value) == exits.LOCKED == 4
    assert exits.code_for(KeyboardInterrupt()) == exits.INTERRUPTED == 130
    assert exits.code_for(ValueError("a bug")) is None  # not ours: the traceback stays
    assert [c for c, _ in exits.EXIT_CODES] == [0, 1, 2, 3, 4, 130]


def test_warehouse_help_mentions_a_config_only_where_one_is_read():
    from typer.testing import CliRunner

    from shopsim_wh.cli.main import app

    runner = CliRunner()
    for cmd in (["sql"], ["tables"], ["summarize"], ["gate"], ["ingest"], ["demo-data"]):
        text = runner.invoke(app, [*cmd, "--help"], terminal_width=200).output
        assert "--warehouse" in text and "output.warehouse" not in text, cmd
    assert "output.warehouse" in runner.invoke(app, ["run", "--help"], terminal_width=200).output


def test_ingest_json_and_quiet(tmp_path, _cli):
    from .conftest import REPO

    src = REPO / "tests" / "fixtures" / "third_party" / "atif_login-trace"
    out = _cli("ingest", src, "-w", tmp_path / "wh", "--output", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["units_read"] >= 1 and doc["episodes_landed"] >= 1 and doc["warehouse"] == str(tmp_path / "wh")
    again = _cli("ingest", src, "-w", tmp_path / "wh", "--quiet")  # the same file twice adds nothing, says nothing
    assert again.returncode == 0 and again.stdout == "" and "━" not in again.stderr
