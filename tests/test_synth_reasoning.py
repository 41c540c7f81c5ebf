"""synth-reasoning end to end: the embedded scripted teacher over loopback HTTP, answers stored with provenance,
contradicting answers rejected, resume sends nothing new, sft-reasoning exports the accepted ones."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
import yaml
from typer.testing import CliRunner

from shopsim_wh.cli.main import app
from shopsim_wh.demo.reasoning import SynthOptions, judge, synthesize
from shopsim_wh.engines.db import connect, install_exports
from shopsim_wh.export import export
from shopsim_wh.sim.server import create_app

from .conftest import serve_asgi
from .export_rl_support import RUNS, copy_warehouse
from .helpers import Tap
from .test_analytics_support import final_rows


def teacher_yaml(path: Path, base_url: str, **extra) -> Path:
    path.write_text(yaml.safe_dump({"teacher": {"name": "scripted-teacher", "base_url": base_url,
                                                "sampling": {"temperature": 0.0, "max_tokens": 2048},
                                                "extra_body": {"scripted_teacher": {"contradict_every": 3}}, **extra},
                                    "concurrency": 4}))
    return path


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("synth")
    root = copy_warehouse(tmp / "wh")
    tap = Tap(create_app())
    with serve_asgi(tap) as url:
        cfg = teacher_yaml(tmp / "teacher.yaml", f"{url}/v1")
        first = synthesize(root, cfg, SynthOptions(runs=list(RUNS)))
        n_first = len(tap.on("/v1/chat/completions"))
        again = CliRunner().invoke(app, ["synth-reasoning", "--teacher", str(cfg), "-w", str(root),
                                         "--runs", RUNS[0], "--runs", RUNS[1], "--format", "json"])
        n_second = len(tap.on("/v1/chat/completions"))
    con = connect(root)
    install_exports(con)
    con.execute("CREATE OR REPLACE TEMP TABLE export_scope AS SELECT unnest(?) AS run_id", [list(RUNS)])
    yield {"root": root, "tap": tap, "first": first, "n_first": n_first, "again": again, "n_second": n_second,
           "tmp": tmp, "con": con}
    con.close()


def test_requests_go_over_http_once_and_resume_sends_nothing(synth):
    first, con = synth["first"], synth["con"]
    distinct = con.execute("SELECT count(DISTINCT request_hash) FROM export_reasoning_requests "
                           "WHERE status = 'completed' AND success").fetchone()[0]
    assert distinct > 10 and first.requests == distinct == first.sent == synth["n_first"]
    assert first.accepted > 0 and first.rejected > 0 and first.failed == 0
    assert synth["again"].exit_code == 0, synth["again"].output
    second = json.loads(synth["again"].stdout)
    assert second["sent"] == 0 and second["already_answered"] == distinct
    assert synth["n_second"] == synth["n_first"], "the second run must send nothing"
    stored = con.execute("SELECT count(*), count(DISTINCT request_hash) FROM synthetic_reasoning").fetchone()
    assert stored == (distinct, distinct)


def test_answers_are_judged_against_the_recorded_action(synth):
    root = synth["root"]
    calls = {(a["run_id"], a["episode_id"], a["agent_id"], a["step_idx"]): a for a in final_rows(root, "actions")}
    rows = synth["con"].execute(
        "SELECT run_id, episode_id, agent_id, step_idx, verdict, reject_reason, answer_action, reasoning, "
        "teacher_model, teacher_base_url, teacher_fingerprint FROM synthetic_reasoning").fetchall()
    verdicts = set()
    for run_id, ep, agent, step, verdict, reason, answer, reasoning, model, base, fp in rows:
        recorded = calls[(run_id, ep, agent, step)]
        ans = json.loads(answer)
        same = ans["name"] == recorded["tool_name"] and ans["arguments"] == json.loads(recorded["arguments"])
        assert verdict == ("accepted" if same else "rejected")
        assert (reason is None) == same and (same or reason.startswith("action_mismatch: "))
        assert reasoning and model == "scripted-teacher" and base.startswith("http://127.0.0.1:") and len(fp) == 64
        verdicts.add(verdict)
    assert verdicts == {"accepted", "rejected"}
    assert judge("not json", "click", {})[1].startswith("unreadable_answer")
    assert judge('{"action": {"name": "click", "arguments": {}}}', "click", {})[1].startswith("missing_reasoning")
    assert judge('```json\n{"reasoning": "r", "action": {"name": "click", "arguments": "{}"}}\n```', "click", {})[0] == "accepted"


def test_no_private_text_reaches_the_teacher(synth):
    root = synth["root"]
    personas = {e["persona"] for e in final_rows(root, "episodes") if e["persona"]}
    reasoning = {s["reasoning"] for s in final_rows(root, "steps") if s["reasoning"] and s["run_id"] in RUNS}
    assert personas and reasoning, "the warehouse must hold personas and reasoning to test this"
    for req, status, _ in synth["tap"].on("/v1/chat/completions"):
        assert status == 200
        text = json.dumps(req, ensure_ascii=False)
        sent = "\n".join(m["content"] for m in req["messages"])
        assert "用户个人文档：\n" not in sent and not any(p in sent for p in personas)
        assert not any(r in sent for r in reasoning) and "reasoning_content" not in text


def test_sft_reasoning_exports_the_accepted_answers(synth):
    out, con = synth["tmp"] / "sft", synth["con"]
    res = export("sft-reasoning", con, out, runs=list(RUNS))  # sets export_scope to the same runs
    expected = con.execute(
        "SELECT count(*) FROM export_reasoning_requests AS r JOIN synthetic_reasoning AS s USING (request_hash) "
        "WHERE s.verdict = 'accepted' AND r.status = 'completed' AND r.success").fetchone()[0]
    answers = dict(con.execute("SELECT request_hash, reasoning FROM synthetic_reasoning WHERE verdict = 'accepted'").fetchall())
    assert expected > 0 and res.rows + res.duplicates_removed == expected
    ds = datasets.load_dataset("parquet", data_files=sorted(str(p) for p in out.glob("*.parquet")), split="train")
    assert len(ds) == res.rows
    for row in ds:
        msg = row["completion"][0]
        assert msg["role"] == "assistant" and msg["reasoning_content"] in answers[row["request_hash"]]
        assert isinstance(msg["tool_calls"][0]["function"]["arguments"], dict)


def test_an_unreachable_teacher_exits_3_naming_its_url_and_stores_nothing(tmp_path):
    import socket

    from shopsim_wh.store.warehouse import Warehouse

    root = copy_warehouse(tmp_path / "wh")
    with socket.socket() as s:  # a loopback port bound, never listened on: refused, and no other test can take it
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
        cfg = teacher_yaml(tmp_path / "teacher.yaml", url, max_retries=1, retry_backoff_s=0.0)
        before = Warehouse(root).snapshot().tables
        res = CliRunner().invoke(app, ["synth-reasoning", "--teacher", str(cfg), "-w", str(root), "--runs", RUNS[0],
                                       "--format", "json"])
    assert res.exit_code == 3, res.output
    assert url in res.stderr and "teacher.base_url" in res.stderr and str(cfg) in res.stderr
    d = json.loads(res.stdout)
    assert d["accepted"] == d["rejected"] == 0 and d["unreachable"] and 1 <= d["sent"] < d["requests"]  # stopped early
    # no file added or replaced (opening the writer may vacuum: a snapshot that only drops the fixture's replaced
    # files once they are older than the grace period, which depends on when this test runs)
    assert Warehouse(root).snapshot().tables == before
    con = connect(root)
    assert con.execute("SELECT count(*) FROM synthetic_reasoning").fetchone()[0] == 0
    con.close()
