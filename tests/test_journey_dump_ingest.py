"""Journeys (issue 27, items 5 and 9): the README tour's dump ingested back adds nothing, a completed record
repeated in one traces.jsonl is one error row, `check` and `doctor` agree, and a dump carries the real base URLs.

Everything goes through the installed ``shopsim-wh`` in a subprocess (tests/journeys.py). Run directories the
code under test did not write are JSON lines built here, field by field, in the ShopSimRL runtime's record
shape (``shopsimrl/runtime.py``); never through our writer or ``dump``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shopsim_wh.engines.db import connect
from shopsim_wh.store.warehouse import Warehouse

from .conftest import free_port
from .helpers import write_config
from .journeys import CLI, ok, shopsim


def sql(wh: Path, query: str) -> list[dict]:
    """Rows of a query over the warehouse's views (real DuckDB, in this process: what a user's `shopsim-wh sql`
    answers; `runs_listed` asks the CLI itself)."""
    con = connect(wh)
    try:
        cur = con.execute(query)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()


def runs_listed(wh: Path) -> list[str]:
    return [r["run_id"] for r in json.loads(ok(shopsim("runs", "list", "-w", wh, "--format", "json")).stdout)["runs"]]


def count(wh: Path, query: str):
    return next(iter(sql(wh, query)[0].values()))


def ingest_json(wh: Path, *paths) -> dict:
    return json.loads(ok(shopsim("ingest", *paths, "-w", wh, "--output", "json")).stdout)


def check_and_doctor(wh: Path) -> tuple[subprocess.CompletedProcess, dict, subprocess.CompletedProcess, list[dict]]:
    chk = shopsim("check", "-w", wh, "--format", "json")
    doc = shopsim("doctor", "-w", wh, "--format", "json")
    return chk, json.loads(chk.stdout), doc, json.loads(doc.stdout)["findings"]


# --- (a) the README tour over real loopback HTTP -------------------------------------------------------
@pytest.fixture(scope="module")
def sim_url():
    port = free_port()
    proc = subprocess.Popen([*CLI, "sim", "serve", "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(url + "/healthz").status_code == 200:
                break
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    else:
        proc.kill()
    if proc.poll() is not None:
        raise RuntimeError(f"sim serve did not come up: {proc.stdout.read().decode()[-2000:]}")
    yield port
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def tour(sim_url, tmp_path_factory):
    """`run` (credentials in both URLs) -> `dump --run tour --out runs/tour` -> `ingest runs/`."""
    port = sim_url
    d = tmp_path_factory.mktemp("tour")
    cfg = write_config(d / "tour.yaml", experiment={"name": "tour"}, tasks={"sample_size": 4},
                       model={"base_url": f"http://agent:s3cret@127.0.0.1:{port}/v1"},
                       environment={"url": f"http://env:t0ken@127.0.0.1:{port}/"})
    wh = d / "wh"
    ok(shopsim("run", cfg, "-w", wh, cwd=d))
    before = {"runs": runs_listed(wh), "episodes": count(wh, "select count(*) from episodes"),
              "taxonomy": sql(wh, "select * from taxonomy order by all")}
    ok(shopsim("dump", "--run", "tour", "--out", "runs/tour", "-w", wh, cwd=d))
    text = shopsim("ingest", "runs/", "-w", wh, cwd=d)
    return d, wh, port, before, text


def test_tour_dump_ingested_back_is_already_present(tour):
    d, wh, _, before, text = tour
    ok(text)  # exit 0: nothing new is not an error (docs/ingest.md)
    assert "already_present" in text.stdout and "already present as run tour" in text.stdout, text.stdout
    assert "holding only attempts the warehouse has" in text.stdout and "same bytes" not in text.stdout
    again = ingest_json(wh, d / "runs")
    assert again["episodes_landed"] == 0 and again["units_already_present"] == 1, again
    [f] = again["files"]
    assert (f["status"], f["run_id"]) == ("already_present", "tour") and "already present as run tour" in f["message"]
    assert runs_listed(wh) == before["runs"] == ["tour"]
    assert count(wh, "select count(*) from episodes") == before["episodes"] == 4
    assert sql(wh, "select * from taxonomy order by all") == before["taxonomy"]


def test_tour_dump_carries_the_real_base_urls_without_credentials(tour):
    d, wh, port, _, _ = tour
    raw = (d / "runs" / "tour" / "traces.jsonl").read_text()
    records = [json.loads(line) for line in raw.splitlines()]
    assert len(records) == 4
    for r in records:
        assert r["provenance"]["environment"]["base_url"] == f"http://127.0.0.1:{port}"
        assert r["provenance"]["model"]["base_url"] == f"http://127.0.0.1:{port}/v1"
        # the sampling the config held under model.sampling (tests/helpers.py BASE), as the original records it
        assert {k: r["provenance"]["model"]["sampling"][k] for k in ("temperature", "top_p", "max_tokens")} == \
            {"temperature": 0.6, "top_p": 1.0, "max_tokens": 4096}
    plan = json.loads((d / "runs" / "tour" / "manifest.json").read_text())["plan"]
    assert plan["environment"]["base_url"] == f"http://127.0.0.1:{port}"
    stored = sql(wh, "select config, provenance from runs")[0]
    for secret in ("s3cret", "t0ken"):
        assert secret not in raw and secret not in stored["config"] and secret not in stored["provenance"]
    # the URL is execution, not semantics: the same config under another URL resumes the run (fingerprint kept)
    fp = count(wh, "select fingerprint from runs")
    cfg = write_config(d / "moved.yaml", experiment={"name": "tour"}, tasks={"sample_size": 4},
                       model={"base_url": f"http://localhost:{port}/v1"}, environment={"url": f"http://localhost:{port}"})
    assert "4 skipped as already done" in ok(shopsim("run", cfg, "-w", wh, cwd=d)).stdout
    assert count(wh, "select fingerprint from runs") == fp


def test_public_url_strips_credentials():
    from shopsim_wh.core.config import public_url

    assert public_url("https://u:p@api.example.com/v1/?api-version=2&api_key=k&sig=s") == \
        "https://api.example.com/v1?api-version=2"
    assert public_url("embedded") == "embedded"


def test_embedded_run_dumps_embedded(tmp_path):
    cfg = write_config(tmp_path / "e.yaml", experiment={"name": "emb"}, tasks={"sample_size": 4})
    wh = tmp_path / "wh"
    ok(shopsim("run", cfg, "-w", wh))
    ok(shopsim("dump", "--run", "emb", "--out", tmp_path / "out", "-w", wh))
    rec = json.loads((tmp_path / "out" / "traces.jsonl").read_text().splitlines()[0])
    assert rec["provenance"]["environment"]["base_url"] == "embedded"
    assert rec["provenance"]["model"]["base_url"] == "embedded"


# --- raw ShopSimRL records, written here --------------------------------------------------------------
PROV = {"model": {"provider": "openai_compatible", "model": "qwen3-8b", "base_url": "http://10.0.0.7:8000/v1",
                  "checkpoint_id": "ck-7", "sampling": {"temperature": 0.6, "send_seed": True}},
        "environment": {"adapter": "shopsimulator_http", "base_url": "http://10.0.0.8:5700", "persona": False,
                        "interaction_mode": "single_turn", "environment_version": "shop-env-v7",
                        "observation_version": "shopping-observation-v7"},
        "prompt": {"prompt_version": "p1", "system_prompt_sha256": "ab" * 32},
        "skills": {"provider": "none"}, "runtime": {"max_steps": 30}}


def record(task: int, status: str = "completed", reward: float = 1.0, minute: int = 0) -> dict:
    """One shopsimrl-episode-v4 record: a search that ends in a purchase (or a failed reset)."""
    eid = f"task-{task:06d}__sample-000"
    final = {"observation": "Thank you for shopping", "reward": reward, "done": True,
             "reward_detail": {"r_type": 1.0, "r_att": 1.0, "r_option": 1.0, "r_price": 1.0, "r_strict": reward,
                               "r_success": reward, "r_loose": 1.0},
             "purchase": {"asin": "B0TEST"}, "termination_reason": "purchase"}
    completed = status == "completed"
    step = {"step_index": 1, "observation": "Find a red mug", "tools": [],
            "model": {"content": "", "reasoning": "buy it", "tool_calls": [
                {"call_id": "c1", "name": "buy", "arguments": {"asin": "B0TEST"}, "raw_arguments": '{"asin": "B0TEST"}'}],
                "finish_reason": "tool_calls", "usage": {"prompt_tokens": 90, "completion_tokens": 9},
                "response_id": f"r-{task}-{minute}", "metadata": {}, "latency_ms": 12.5, "protocol_error": None,
                "policy_failure": None, "raw_response": None},
            "action": "click[buy now]", "environment": final}
    return {"schema_version": "shopsimrl-episode-v4", "episode_id": eid, "status": status,
            "job": {"task_id": task, "sample_id": 0, "seed": 1000 + task, "split": "val"}, "provenance": PROV,
            "started_at": f"2026-03-01T10:{minute:02d}:00+00:00", "ended_at": f"2026-03-01T10:{minute:02d}:05+00:00",
            "duration_ms": 5000.0, "reset": {"observation": "Find a red mug", "task_instruction": "a red mug"},
            "selected_skills": [],
            "conversation": [{"role": "system", "content": "shop"}, {"role": "user", "content": "Find a red mug"}],
            "steps": [step] if completed else [], "final": final if completed else None,
            "error": None if completed else {"stage": "reset", "type": "EnvUnavailable", "message": "503"}}


def write_run(d: Path, records: list[dict], experiment: str = "val-qwen3-8b") -> Path:
    """A run directory as the ShopSimRL store leaves it: json.dumps lines (its spacing), a manifest."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "traces.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    jobs = [r["job"] for r in {r["episode_id"]: r for r in records}.values()]
    plan = {"experiment": experiment, "jobs": jobs, **{k: PROV[k] for k in ("model", "environment", "prompt",
                                                                              "runtime", "skills")}}
    # ShopSimRL's schemas.fingerprint: sha256 of the sorted-key compact JSON
    fp = hashlib.sha256(json.dumps(plan, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    (d / "manifest.json").write_text(json.dumps({"schema_version": "shopsimrl-run-manifest-v1",
                                                 "plan_fingerprint": fp, "plan": plan}, indent=2))
    return d


def test_the_same_attempts_under_other_bytes_and_paths(tmp_path):
    wh = tmp_path / "wh"
    first = write_run(tmp_path / "a" / "val", [record(1), record(2, "failed", minute=1), record(2, minute=2)])
    landed = ingest_json(wh, first)
    run_id = landed["files"][0]["run_id"]
    assert landed["episodes_landed"] == 2 and landed["files"][0]["status"] == "landed"
    # the same records in other bytes (compact JSON) at another path: nothing added, the run named
    other = tmp_path / "b" / "val"
    other.mkdir(parents=True)
    (other / "traces.jsonl").write_text("".join(json.dumps(json.loads(line), separators=(",", ":")) + "\n"
                                                for line in (first / "traces.jsonl").read_text().splitlines()))
    shutil.copy(first / "manifest.json", other / "manifest.json")
    res = ingest_json(wh, other)
    assert (res["files"][0]["status"], res["files"][0]["run_id"], res["episodes_landed"]) == (
        "already_present", run_id, 0), res
    # an older copy holding fewer attempts (before its resume): nothing added either
    older = write_run(tmp_path / "c" / "val", [record(1), record(2, "failed", minute=1)])
    assert ingest_json(wh, older)["files"][0]["status"] == "already_present"
    # a resumed copy holding more: it lands and replaces the run whose attempts it holds (counted once)
    resumed = write_run(tmp_path / "d" / "val", [record(1), record(2, "failed", minute=1), record(2, minute=2),
                                                 record(3, minute=3)])
    more = ingest_json(wh, resumed)["files"][0]
    assert more["status"] == "landed" and f"replaces run(s) {run_id}" in more["message"], more
    assert runs_listed(wh) == [more["run_id"]]
    assert count(wh, "select count(*) from episodes") == 3
    assert count(wh, "select count(*) from stg_episodes") == 4
    # another experiment with the same attempts is another run
    renamed = write_run(tmp_path / "e" / "val", [record(1)], experiment="val-other")
    assert ingest_json(wh, renamed)["files"][0]["status"] == "landed"
    chk, report, doc, findings = check_and_doctor(wh)
    assert chk.returncode == 0 and report["ok"] and doc.returncode == 0 and findings == [], (chk.stdout, findings)


# --- (b) a completed record repeated in one traces.jsonl ----------------------------------------------------
def test_a_repeated_completed_record_is_one_error_row_and_check_agrees_with_doctor(tmp_path):
    wh = tmp_path / "wh"
    run = write_run(tmp_path / "runs" / "val", [record(1), record(2, reward=0.0), record(3),
                                                record(2, reward=1.0, minute=9), record(4)])
    res = ingest_json(wh, run)
    assert (res["episodes_landed"], res["records_rejected"], res["files"][0]["attempts"]) == (4, 1, 4), res
    [err] = sql(wh, "select line, error_class, message from ingest_errors")
    assert (err["line"], err["error_class"]) == (4, "duplicate_completed")
    assert "task-000002__sample-000" in err["message"] and "the first is kept" in err["message"]
    # the episode once, its first completed record (ShopSimRL's unique_traces refuses the second)
    assert sql(wh, "select attempt, reward from stg_episodes where episode_id = 'task-000002__sample-000'") == [
        {"attempt": 1, "reward": 0.0}]
    assert count(wh, "select count(*) from episodes") == 4
    assert sql(wh, "select records_total, converted, dropped from import_fidelity "
                   "where unit = 'task-000002__sample-000'") == [{"records_total": 2, "converted": 1, "dropped": 1}]
    chk, report, doc, findings = check_and_doctor(wh)
    assert (chk.returncode, report["ok"], report["duplicated"]) == (0, True, []), chk.stdout
    assert (doc.returncode, findings) == (0, []), doc.stdout


# --- (c) a warehouse broken on purpose: both report the same finding ---------------------------------------------
def _episodes_file(wh: Path, run_id: str, table: str = "episodes") -> Path:
    w = Warehouse(wh)
    return w.abspath(w.snapshot().files(table, run_id)[0])


@pytest.fixture(scope="module")
def two_runs_template(tmp_path_factory):
    d = tmp_path_factory.mktemp("two")
    for name, recs in (("alpha", [record(1), record(2)]), ("beta", [record(5), record(6, minute=1)])):
        ingest_json(d / "wh", write_run(d / "runs" / name, recs, experiment=name))
    return d


@pytest.fixture()
def two_runs(two_runs_template, tmp_path):
    """Two ingested runs (a copy per test: each breaks it)."""
    shutil.copytree(two_runs_template, tmp_path, dirs_exist_ok=True)
    wh = tmp_path / "wh"
    return wh, {r["experiment"]: r["run_id"] for r in sql(wh, "select experiment, run_id from runs")}


def test_a_removed_file_fails_check_and_doctor_names_it(two_runs):
    wh, runs = two_runs
    gone = _episodes_file(wh, runs["alpha"], "steps")
    gone.unlink()
    chk, report, doc, findings = check_and_doctor(wh)
    assert chk.returncode == 1 and doc.returncode == 1
    assert [(u["code"], u["run_id"]) for u in report["unreadable"]] == [("file_missing", runs["alpha"])]
    assert [(f["code"], f["run_id"], f["path"]) for f in findings] == [
        ("file_missing", runs["alpha"], report["unreadable"][0]["path"])]
    assert f"shopsim-wh runs rm {runs['alpha']}" in findings[0]["fix"]


def test_a_duplicate_row_and_a_second_completed_attempt(two_runs):
    wh, runs = two_runs
    w = Warehouse(wh)
    again = pq.read_table(_episodes_file(wh, runs["alpha"])).slice(0, 1)  # the same attempt stored twice
    beta = pq.read_table(_episodes_file(wh, runs["beta"])).slice(0, 1)  # completed once more, as attempt 2
    i = beta.schema.get_field_index("attempt")
    later = beta.set_column(i, "attempt", pa.array([2], beta.schema.field(i).type))
    with w.writer() as wr:
        wr.commit([("episodes", runs["alpha"], again), ("episodes", runs["beta"], later)])
    chk, report, doc, findings = check_and_doctor(wh)
    assert chk.returncode == 1 and doc.returncode == 1
    by_run = {(d[0], d[2] if isinstance(d[2], int) else "completed") for d in report["duplicated"]}
    assert by_run == {(runs["alpha"], 1), (runs["beta"], "completed")}, report["duplicated"]
    assert sorted((f["code"], f["run_id"]) for f in findings) == sorted(
        [("duplicate_episode", runs["alpha"]), ("duplicate_completed", runs["beta"])]), findings
    assert all("shopsim-wh runs rm" in f["fix"] for f in findings)
    # the fix doctor prints: remove the run, land it again; then both are clean
    for name in ("alpha", "beta"):
        ok(shopsim("runs", "rm", runs[name], "-w", wh))
        ok(shopsim("ingest", wh.parent / "runs" / name, "-w", wh))
    chk, report, doc, findings = check_and_doctor(wh)
    assert (chk.returncode, doc.returncode, findings) == (0, 0, []), (chk.stdout, findings)
