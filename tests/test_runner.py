"""The runner end to end on the embedded servers: tables, protocol errors, guards, failures, privacy."""

from __future__ import annotations

import json

import httpx
import pytest

from shopsim_wh.core.config import load_config
from shopsim_wh.core.errors import FingerprintMismatch, TestSplitGuard
from shopsim_wh.engines.db import connect
from shopsim_wh.rollout import runner
from shopsim_wh.sim.policy import FAILURE_KINDS
from shopsim_wh.sim.server import create_app
from shopsim_wh.sim.tasks import generate_tasks

from .conftest import serve_asgi
from .helpers import decoded_strings, write_config


def _run(tmp_path, wh, name="cfg.yaml", allow_test=False, **sections):
    cfg = load_config(write_config(tmp_path / name, **sections))
    return runner.run(cfg, str(wh), allow_test=allow_test)


def test_demo_run_lands_every_table_consistently(tmp_path, warehouse):
    res = _run(tmp_path, warehouse)
    assert (res.completed, res.failed) == (6, 0)
    con = connect(warehouse)
    assert con.execute("select count(*), count(distinct episode_id) from episodes").fetchone() == (6, 6)
    # every episode has its root agent; counters agree with the child tables
    assert con.execute("select count(*) from agents where agent_id = 'main' and depth = 0").fetchone()[0] == 6
    bad = con.execute("""
        select e.episode_id from episodes e
        left join (select episode_id, count(*) n from steps group by 1) s using (episode_id)
        left join (select episode_id, count(*) n from actions where action_type = 'tool_use' and action is not null group by 1) a using (episode_id)
        where e.model_steps <> s.n or e.total_actions <> coalesce(a.n, 0) or e.model_steps < e.total_actions
    """).fetchall()
    assert bad == []
    # each step's prompt is a prefix of the stored conversation ending in a user/tool message
    rows = con.execute("""
        select s.episode_id, s.step_idx, m.role from steps s
        join messages m on m.episode_id = s.episode_id and m.msg_idx = s.prompt_msg_count - 1
    """).fetchall()
    assert len(rows) == con.execute("select count(*) from steps").fetchone()[0]
    assert {r[2] for r in rows} <= {"user", "tool"}
    # the tool set offered at each step is recorded
    assert con.execute("select count(*) from steps where tools_hash is null").fetchone()[0] == 0
    assert con.execute("select count(distinct name) from tools").fetchone()[0] == 2
    run = con.execute("select experiment, planned_episodes, fingerprint, allow_test from runs").fetchone()
    assert run[0] == "t" and run[1] == 6 and len(run[2]) == 32 and run[3] is False
    assert con.execute("select status, episodes_written from loads").fetchone() == ("complete", 6)
    # compaction left one file per table for the finished run
    snap_files = [len(v) for v in __import__("shopsim_wh.store.warehouse", fromlist=["Warehouse"]).Warehouse(warehouse).snapshot().tables.values() if v]
    assert max(snap_files) == 1


# scripted failure kind -> the protocol code the runtime records (ShopSimRL's codes) and the message the model gets back.
# The policy's second call is a click, which the search page does not offer: the check of each call's tool name
# comes before the call count, so it is unavailable_tool (answered with one tool message per parsed call).
@pytest.mark.parametrize("kind,code,feedback_role", [
    ("no_tool_call", "tool_call_count", "user"), ("multiple_tool_calls", "unavailable_tool", "tool"),
    ("malformed_arguments", "invalid_arguments_json", "user"), ("unknown_tool", "unavailable_tool", "tool")])
def test_each_protocol_error_counts_as_a_turn_and_is_recorded(tmp_path, warehouse, kind, code, feedback_role):
    _run(tmp_path, warehouse, tasks={"sample_size": 2}, runtime={"max_steps": 3},
         # only this kind: the profile's small base rates of the other kinds are switched off
         model={"extra_body": {"scripted_policy": {"failure_rates": {**dict.fromkeys(FAILURE_KINDS, 0.0), kind: 1.0}}}})
    con = connect(warehouse)
    eps = con.execute("select termination_reason, model_steps, protocol_errors, total_actions, reward, status from episodes").fetchall()
    assert eps == [("action_limit", 3, 3, 0, 0.0, "completed")] * 2
    steps = con.execute("select distinct protocol_error from steps").fetchall()
    assert steps == [(code,)]
    assert con.execute("select count(*) from steps where raw_response is null or protocol_feedback is null").fetchone()[0] == 0
    # the model was told what went wrong and retried on the same page
    assert con.execute("select count(distinct page) from steps").fetchone()[0] == 1
    fb = json.loads(con.execute("select protocol_feedback from steps limit 1").fetchone()[0])
    assert fb["type"] == "tool_protocol_error" and fb["code"] == code and fb["available_tools"] == ["search"]
    # every turn's feedback is the next message(s), as the role the rules give it, with the feedback JSON
    roles = con.execute("""
        select m.role, m.content from steps s join messages m using (run_id, episode_id, attempt, agent_id)
        where m.msg_idx >= s.prompt_msg_count and m.role <> 'assistant'
          and m.msg_idx < coalesce((select min(prompt_msg_count) from steps n where n.episode_id = s.episode_id
                                    and n.step_idx > s.step_idx), 1000000)""").fetchall()
    assert {r for r, _ in roles} == {feedback_role} and all(json.loads(c)["code"] == code for _, c in roles)
    calls_per_turn = 2 if kind == "multiple_tool_calls" else 1
    assert len(roles) == 2 * 3 * calls_per_turn
    assert con.execute("select count(*) from observations where observation_type = 'error'").fetchone()[0] >= 6


def test_out_of_enum_click_goes_to_the_environment(tmp_path, warehouse):
    _run(tmp_path, warehouse, tasks={"sample_size": 4},
         model={"extra_body": {"scripted_policy": {"failure_rates": {"invalid_click": 0.5}}}})
    con = connect(warehouse)
    # where click is offered, an out-of-enum value is a valid call judged by the environment ...
    env_judged = con.execute("""
        select count(*) from actions a join observations o using (run_id, episode_id, attempt, step_idx, call_id)
        where a.action like 'click[%' and not a.action_valid and a.feedback_code is not null
          and o.observation_type = 'environment' and o.is_error
    """).fetchone()[0]
    assert env_judged > 0
    assert con.execute("select sum(invalid_actions) from episodes").fetchone()[0] == env_judged
    # ... while on a page without the click tool the same call is a protocol error
    assert con.execute("""select count(*) from steps where protocol_error = 'unavailable_tool'
                          and json_array_length(tool_schema_hashes) <> 1""").fetchone()[0] == 0


def test_generation_length_is_a_policy_failure(tmp_path, warehouse):
    _run(tmp_path, warehouse, tasks={"sample_size": 2},
         model={"extra_body": {"scripted_policy": {"failure_rates": {"length": 1.0}}}})
    con = connect(warehouse)
    assert con.execute("select status, termination_reason, reward, model_steps from episodes").fetchall() == \
        [("completed", "generation_length", 0.0, 1)] * 2
    assert con.execute("select distinct policy_failure from steps").fetchall() == [("generation_length",)]
    assert con.execute("select count(*) from failures").fetchone()[0] == 0
    assert con.execute("select distinct action from actions").fetchall() == [("terminate[generation_length]",)]


def test_max_steps_ends_the_episode_with_action_limit(tmp_path, warehouse):
    no_failures = {k: 0.0 for k in FAILURE_KINDS}
    _run(tmp_path, warehouse, tasks={"sample_size": 3}, runtime={"max_steps": 2},
         model={"extra_body": {"scripted_policy": {"failure_rates": no_failures}}})
    con = connect(warehouse)
    rows = con.execute("select termination_reason, model_steps, reward from episodes").fetchall()
    assert rows and all(r == ("action_limit", 2, 0.0) for r in rows)
    assert con.execute("select distinct action_limit from runs").fetchall() == [(2,)]


def test_fingerprint_change_is_refused_with_a_diff(tmp_path, warehouse):
    _run(tmp_path, warehouse, tasks={"sample_size": 2})
    # execution parameters may change freely
    _run(tmp_path, warehouse, tasks={"sample_size": 2}, runtime={"concurrency": 1})
    with pytest.raises(FingerprintMismatch) as err:
        _run(tmp_path, warehouse, tasks={"sample_size": 2}, model={"sampling": {"temperature": 0.9}})
    assert "sampling" in err.value.diff and "temperature" in str(err.value)
    with pytest.raises(FingerprintMismatch) as err:
        _run(tmp_path, warehouse, tasks={"sample_size": 3})
    assert "job_list_hash" in err.value.diff


def test_test_split_is_guarded(tmp_path, warehouse):
    with pytest.raises(TestSplitGuard, match="--allow-test"):
        _run(tmp_path, warehouse, tasks={"split": "test", "sample_size": 1})
    bank = tmp_path / "bank.json"
    bank.write_text(json.dumps({"version": "b1", "skills": [{"id": "s", "content": "Select every option."}]}))
    with pytest.raises(TestSplitGuard, match="skills.path: null"):
        _run(tmp_path, warehouse, allow_test=True, tasks={"split": "test", "sample_size": 1}, skills={"path": str(bank)})
    _run(tmp_path, warehouse, allow_test=True, tasks={"split": "test", "sample_size": 1})
    assert connect(warehouse).execute("select allow_test, split from runs").fetchone() == (True, "test")


class Broken:
    """A model server that always answers 503."""

    async def __call__(self, scope, receive, send):
        await send({"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b'{"error": {"message": "overloaded"}}'})


def test_failures_are_recorded_leases_released_and_resume_retries_them(tmp_path, warehouse):
    sim = create_app(seed=0)
    with serve_asgi(sim) as env_url, serve_asgi(Broken()) as bad_url:
        sections = dict(tasks={"sample_size": 3}, environment={"url": env_url},
                        model={"base_url": bad_url + "/v1", "max_retries": 0})
        res = _run(tmp_path, warehouse, **sections)
        assert (res.completed, res.failed) == (0, 3)
        stats = httpx.get(env_url + "/v1/stats").json()
        assert stats["active_leases"] == 0 and stats["releases"] == stats["resets"] == 3
        con = connect(warehouse)
        assert con.execute("select status, reward, error_stage from episodes").fetchall() == [("failed", None, "model")] * 3
        from shopsim_wh.analytics.summary import format_summary, summarize

        text = format_summary(summarize(con, "t"))
        assert "completed 0, failed 3" in text and "failures: model:ModelUnavailable=3" in text
        f = con.execute("select stage, exception_type, message, traceback from failures").fetchall()
        assert len(f) == 3 and f[0][0] == "model" and f[0][1] == "ModelUnavailable" and "Traceback" in f[0][3]
        # resume against a working model server: failed episodes are re-run as attempt 2
        with serve_asgi(create_app(seed=0)) as good_url:
            sections["model"]["base_url"] = good_url + "/v1"
            res = _run(tmp_path, warehouse, **sections)
        assert (res.completed, res.skipped) == (3, 0)
    con = connect(warehouse)
    assert con.execute("select status, attempt from episodes").fetchall() == [("completed", 2)] * 3
    assert con.execute("select count(*) from episode_attempts").fetchone()[0] == 6
    assert con.execute("select count(distinct attempt) from steps").fetchone()[0] == 1


def test_no_api_key_and_no_private_goal_in_any_written_file(tmp_path, warehouse, monkeypatch):
    canary = "sk-canary-" + "7" * 24
    monkeypatch.setenv("SHOPSIM_TEST_KEY", canary)
    sim = create_app(seed=0)
    with serve_asgi(sim) as url:
        _run(tmp_path, warehouse, tasks={"sample_size": 8},
             model={"base_url": url + "/v1", "api_key_env": "SHOPSIM_TEST_KEY"}, environment={"url": url})
    con = connect(warehouse)
    task_ids = [r[0] for r in con.execute("select task_id from episodes").fetchall()]
    tasks = generate_tasks(0).by_id
    secrets = {tasks[t].goal.goal_signature for t in task_ids} | {canary}
    seen = 0
    for f, value in decoded_strings(warehouse):
        seen += 1
        for s in secrets:
            assert s not in value, f"{s!r} leaked into {f}"
    assert seen > 100
    assert "SHOPSIM_TEST_KEY" in con.execute("select config from runs").fetchone()[0]
    for f in warehouse.rglob("*"):
        if f.is_file() and f.suffix != ".parquet":
            assert canary not in f.read_text(errors="ignore")


class Unauthorized:
    """A model server that rejects every request with 401."""

    def __init__(self):
        self.calls = 0

    async def __call__(self, scope, receive, send):
        self.calls += 1
        await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b'{"error": {"message": "invalid api key"}}'})


def test_a_config_error_from_the_model_server_stops_the_run(tmp_path, warehouse):
    model = Unauthorized()
    with serve_asgi(create_app(seed=0)) as env_url, serve_asgi(model) as bad_url:
        res = _run(tmp_path, warehouse, tasks={"sample_size": 40}, runtime={"concurrency": 2},
                   environment={"url": env_url}, model={"base_url": bad_url + "/v1"})
    assert res.fatal and "401" in res.fatal and "api_key_env" in res.fatal
    assert res.attempted < 40 and model.calls == res.attempted  # not retried, and the rest never started
    con = connect(warehouse)
    assert con.execute("select count(*) from failures where exception_type = 'ModelHTTPError'").fetchone()[0] == res.attempted
