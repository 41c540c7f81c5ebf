"""Exit codes and messages at the seams, through the installed CLI (issue 27, item 7).

Nothing landed exits 2 in every output mode and says what was read; a re-ingest of the same bytes exits 0; a
writer waiting for the warehouse lock names the holder at once and keeps its bound; `runs list` hides
partitions without an episode unless `--all`; a missing optional extra names its pip line; the exit-code table
of docs/cli.md is the code's, and a model server answering 401 gives the code docs/reliability.md promises.
Inputs are third-party files (tests/fixtures/third_party) and files written here; servers are real loopback
HTTP servers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import tomllib

import pytest

from shopsim_wh.cli import exits
from shopsim_wh.testing.servers import serve_asgi

from .conftest import REPO
from .helpers import write_config
from .journeys import CLI, ok, shopsim

THIRD = REPO / "tests" / "fixtures" / "third_party"
CLAUDE = THIRD / "claude_code_cclogviewer" / "example.jsonl"  # one Claude Code session: one episode
TASKS = THIRD / "shopsim_tasks" / "dev_first3.jsonl"  # ShopSimulator task records: JSON lines, but no trace
MODES = ([], ["-q"], ["--output", "json"])


def _documented_table() -> dict[int, str]:
    """docs/cli.md's exit-code table, as a reader sees it."""
    text = (REPO / "docs" / "cli.md").read_text()
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \| (.+) \|$", section, re.M)}


def test_the_documented_exit_codes_are_the_codes_of_the_code():
    table = _documented_table()
    assert table == dict(exits.EXIT_CODES)
    constants = {name: v for name, v in vars(exits).items() if name.isupper() and isinstance(v, int)}
    assert set(table) == set(constants.values()) == {0, 1, 2, 3, 4, 130}, constants
    assert "ingest" in table[exits.USAGE] and "401" in table[exits.USAGE] and "pip install" in table[exits.USAGE]
    assert "already ingested" in table[exits.OK] and "pid" in table[exits.LOCKED]
    epilog = ok(shopsim("--help")).stdout
    assert all(re.search(rf"\b{code} {re.escape(exits.SHORT[code])}", " ".join(epilog.split())) for code in table)


class Refuses401:
    """A model server that answers every chat completion with 401 (a bad key), once ``release`` is set."""

    def __init__(self, hold: bool = False):
        self.seen, self.release = threading.Event(), threading.Event()
        if not hold:
            self.release.set()

    async def __call__(self, scope, receive, send):
        import asyncio

        self.seen.set()
        await asyncio.get_running_loop().run_in_executor(None, self.release.wait, 120)
        await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b'{"error": {"message": "invalid api key"}}'})


def _run_config(tmp_path, model_url: str, name: str = "t"):
    return write_config(tmp_path / f"{name}.yaml", experiment={"name": name, "seed": 3}, tasks={"sample_size": 4},
                        model={"base_url": model_url + "/v1", "api_key_env": "SHOPSIM_J_KEY", "max_retries": 0},
                        runtime={"concurrency": 1}, output={"warehouse": str(tmp_path / "wh")})


def test_a_401_from_the_model_server_exits_with_the_code_the_docs_promise(tmp_path):
    promised = re.search(r"A 401 stops the run early:.*?`shopsim-wh run` exits (\d+)",
                         (REPO / "docs" / "reliability.md").read_text(), re.S)
    assert promised, "docs/reliability.md no longer says what a 401 exits with"
    code = int(promised.group(1))
    assert code == exits.USAGE and "401" in _documented_table()[code]
    with serve_asgi(Refuses401()) as url:
        cfg = _run_config(tmp_path, url)
        res = shopsim("run", cfg, "--format", "json", cwd=tmp_path, env={"SHOPSIM_J_KEY": "sk-journey-not-a-key"})
    assert res.returncode == code and json.loads(res.stdout)["exit_code"] == code, res.stderr
    assert "run stopped early" in res.stderr and "SHOPSIM_J_KEY" in res.stderr and "Traceback" not in res.stderr


def test_nothing_landed_exits_2_in_every_mode_saying_what_was_read(tmp_path):
    empty, notes, tasks = tmp_path / "empty", tmp_path / "notes", tmp_path / "tasks"
    empty.mkdir()
    notes.mkdir()
    (notes / "README.txt").write_text("traces go here\n")
    (notes / "runs.csv").write_text("run,reward\na,1\n")
    tasks.mkdir()
    (tasks / "dev_first3.jsonl").write_bytes(TASKS.read_bytes())
    wh = tmp_path / "wh"
    res = shopsim("ingest", empty, "-w", wh, "--output", "json")
    assert res.returncode == exits.USAGE and f"{empty} holds no file" in res.stderr, res.stderr
    assert json.loads(res.stdout)["exit_code"] == exits.USAGE
    res = shopsim("ingest", notes, "-w", wh, "-q")
    assert res.returncode == exits.USAGE and res.stdout == "", res.stderr
    assert f"no trace file under {notes}: 2 file(s) looked at (README.txt, runs.csv)" in res.stderr
    assert "*.jsonl" in res.stderr and "Traceback" not in res.stderr
    for mode in MODES:  # files read, none a trace
        res = shopsim("ingest", tasks, "-w", wh, *mode)
        assert res.returncode == exits.USAGE, (mode, res.stderr)
        assert "no episode landed from 1 input(s) (1 unrecognised: dev_first3.jsonl)" in res.stderr
        assert "--format" in res.stderr
        if mode == ["--output", "json"]:
            doc = json.loads(res.stdout)
            assert doc["exit_code"] == exits.USAGE and doc["episodes_landed"] == 0
            assert doc["files"][0]["status"] == "unrecognised" and "no episode landed" in doc["error"]
        elif mode == ["-q"]:
            assert res.stdout == ""
        else:
            assert "unrecognised" in res.stdout
    assert not (wh / "_catalog" / "CURRENT").exists()  # nothing was committed


def test_reingest_exits_0_and_runs_list_shows_only_runs_with_episodes(tmp_path):
    wh = tmp_path / "wh"
    first = json.loads(ok(shopsim("ingest", CLAUDE, "-w", wh, "--output", "json")).stdout)
    assert first["episodes_landed"] == 1 and first["exit_code"] == exits.OK
    run_id = first["files"][0]["run_id"]
    # a cron job re-running the same ingest over the same files (plus a file that holds no trace): not an error
    for mode in ([], ["--output", "json"]):
        res = ok(shopsim("ingest", CLAUDE, TASKS, "-w", wh, *mode))
        if mode == []:
            assert "nothing new: 1 input(s) already in the warehouse" in res.stdout
            assert "unrecognised" in res.stdout
        if mode == ["--output", "json"]:
            doc = json.loads(res.stdout)
            assert doc["exit_code"] == exits.OK and doc["episodes_landed"] == 0
            assert {f["status"] for f in doc["files"]} == {"skipped_same_hash", "unrecognised"}
    # an input with no valid record lands its error rows (and the ingest its load record): no episode in them
    hostname = tmp_path / "hostname"
    hostname.write_text("build-host-7\n")
    res = shopsim("ingest", "--format", "claude-code", hostname, "-w", wh)
    assert res.returncode == exits.USAGE and "no_valid_record" in res.stderr
    listed = ok(shopsim("runs", "list", "-w", wh))
    rows = [ln.split()[0] for ln in listed.stdout.splitlines()[1:]]
    assert rows == [run_id], listed.stdout
    every = ok(shopsim("runs", "list", "-w", wh, "--all"))
    notes = {ln.split()[0]: ln for ln in every.stdout.splitlines()[1:]}
    assert run_id in notes and "(empty" not in notes[run_id]
    empties = [ln for r, ln in notes.items() if r != run_id]
    assert any("(empty: an ingest's load record)" in ln for ln in empties), every.stdout
    assert any("(empty: rejected records only (ingest_errors))" in ln for ln in empties), every.stdout
    doc = json.loads(ok(shopsim("runs", "list", "-w", wh, "--all", "--format", "json")).stdout)
    assert {r["run_id"]: r["empty"] for r in doc["runs"]}[run_id] is False
    assert all(r["empty"] and r["episodes"] == 0 for r in doc["runs"] if r["run_id"] != run_id)
    assert f"{len(empties)} partition(s) without an episode not shown" in listed.stderr and "--all" in listed.stderr


def test_a_writer_waiting_for_the_lock_names_the_holder_at_once_and_keeps_its_bound(tmp_path):
    """The holder is a real `shopsim-wh run` (it holds the warehouse for its whole run), kept busy by a model
    server that answers only when released; the waiter is `shopsim-wh ingest`."""
    wh = tmp_path / "wh"
    model = Refuses401(hold=True)
    with serve_asgi(model) as url:
        holder = subprocess.Popen([*CLI, "run", str(_run_config(tmp_path, url)), "-q"], cwd=tmp_path,
                                  env={**os.environ, "SHOPSIM_J_KEY": "sk-journey"}, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            assert model.seen.wait(60), "the run never called the model server"  # it holds the lock now
            waiter = subprocess.Popen([*CLI, "ingest", str(CLAUDE), "-w", str(wh), "-q"], cwd=tmp_path,
                                      env={**os.environ, "SHOPSIM_WH_LOCK_TIMEOUT_S": "90"}, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
            said = waiter.stderr.readline()  # printed while it waits: the holder has not let go yet
            assert waiter.poll() is None, said
            assert re.search(rf"warehouse {re.escape(str(wh))} is locked by another writer \(pid {holder.pid} on "
                             rf"{re.escape(os.uname().nodename)} since \d{{4}}-\d\d-\d\dT[\d:]+Z: (shopsim-wh|main\.py) run ", said)
            assert "waiting up to 90 s" in said and "SHOPSIM_WH_LOCK_TIMEOUT_S" in said
            impatient = shopsim("ingest", CLAUDE, "-w", wh, "--output", "json",
                                env={"SHOPSIM_WH_LOCK_TIMEOUT_S": "0.2"}, cwd=tmp_path)
            assert impatient.returncode == exits.LOCKED, impatient.stderr
            wait_line, error = impatient.stderr.strip().splitlines()[-2:]
            assert f"pid {holder.pid}" in wait_line and "waiting up to 0.2 s" in wait_line
            assert error.startswith(f"error: warehouse {wh} is locked by another writer (pid {holder.pid} on ")
            assert "gave up after 0.2 s" in error and "run this command again once that one has finished" in error
            assert "SHOPSIM_WH_LOCK_TIMEOUT_S" in error and "Traceback" not in impatient.stderr
        finally:
            model.release.set()  # the model server answers 401: the run stops and lets go of the warehouse
            out, err = holder.communicate(timeout=120)
        assert holder.returncode == exits.USAGE, err
        rest, _ = waiter.communicate(timeout=120)
    assert waiter.returncode == exits.OK, rest
    assert json.loads(ok(shopsim("runs", "list", "-w", wh, "--format", "json")).stdout)["runs"]


HIDDEN_MODULES = ("boto3", "botocore", "s3fs", "pyspark", "sqlglot", "ray", "torch", "tokenizers", "transformers", "jinja2")


@pytest.fixture(scope="module")
def without_extras(tmp_path_factory):
    """PYTHONPATH that makes the extras' modules absent: importing one raises ModuleNotFoundError, as when the
    extra is not installed (the installed CLI still runs; everything else imports as usual)."""
    d = tmp_path_factory.mktemp("no-extras")
    for name in HIDDEN_MODULES:
        (d / f"{name}.py").write_text(f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n")
    return {"PYTHONPATH": str(d)}


def test_every_optional_import_is_named_with_its_extra():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    declared = {re.split(r"[<>=\[ ;]", pkg, maxsplit=1)[0]: extra for extra, pkgs in extras.items() if extra != "test"
                for pkg in pkgs}
    assert declared and {pkg: exits.EXTRAS[pkg][0] for pkg in declared} == declared
    assert set(HIDDEN_MODULES) == set(exits.EXTRAS)


@pytest.mark.parametrize("args, extra", [
    (["ingest", str(CLAUDE), "-w", "s3://bucket/prefix"], "s3"),  # boto3, imported when the bucket is opened
    (["spark-views"], "spark"),  # sqlglot, imported before the warehouse is read
])
def test_a_missing_extra_names_its_pip_line(tmp_path, without_extras, args, extra):
    res = shopsim(*args, cwd=tmp_path, env=without_extras)
    assert res.returncode == exits.USAGE, res.stderr
    assert f"pip install 'shopsim-wh[{extra}]'" in res.stderr and "Traceback" not in res.stderr


def test_a_tokenizer_by_path_without_the_tokens_extra_names_its_pip_line(tmp_path, without_extras):
    """`training retokenize --tokenizer DIR` (issue 31) without tokenizers/transformers: exit 2 with the pip line."""
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    (tok / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    res = shopsim("training", "retokenize", "--tokenizer", tok, "-w", tmp_path / "wh", cwd=tmp_path, env=without_extras)
    assert res.returncode == exits.USAGE, res.stderr
    assert "pip install 'shopsim-wh[tokens]'" in res.stderr and "Traceback" not in res.stderr


def test_ray_executor_without_ray_names_its_pip_line(tmp_path, without_extras):
    cfg = write_config(tmp_path / "ray.yaml", runtime={"executor": "ray"}, output={"warehouse": str(tmp_path / "wh")})
    res = shopsim("run", cfg, "-q", cwd=tmp_path, env=without_extras)
    assert res.returncode == exits.USAGE and "pip install 'shopsim-wh[ray]'" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
