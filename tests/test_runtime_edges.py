"""The shop_env boundary against real loopback servers: wire format, errors, versions, privacy, leases."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from shopsim_wh.core.config import load_config
from shopsim_wh.core.errors import ObservationVersionError
from shopsim_wh.rollout import runner
from shopsim_wh.rollout.environment import EnvServerError, ShopEnvAdapter
from shopsim_wh.rollout.jobs import EpisodeJob
from shopsim_wh.rollout.model import ChatModel, ChatOptions
from shopsim_wh.rollout.prompts import PromptBuilder
from shopsim_wh.rollout.runtime import AgentRuntime
from shopsim_wh.sim.server import create_app
from shopsim_wh.sim.tasks import default_task_ids

from .conftest import serve_asgi
from .helpers import Tap, write_config

TASK = default_task_ids("val")[0]


class Recorder(Tap):
    def shop(self):
        return self.on("/api/shop_agent")


def _runtime(env_client, model_client, slow_ms: int = 0, max_steps: int = 30) -> AgentRuntime:
    from shopsim_wh.rollout.skills import NoSkills

    extra = {"scripted_policy": {"latency_ms": slow_ms}} if slow_ms else {}
    model = ChatModel(model_client, "scripted-strong", ChatOptions(extra_body=extra))
    return AgentRuntime(model, ShopEnvAdapter(env_client), PromptBuilder(), NoSkills(), max_steps=max_steps)


def _episode(app, job=EpisodeJob(TASK, 0, 1, "val"), **kw):
    with serve_asgi(app) as url:
        async def go():
            async with httpx.AsyncClient(base_url=url) as env_c, httpx.AsyncClient(base_url=url + "/v1") as model_c:
                rec = await _runtime(env_c, model_c, **kw).run(job)
                return rec, (await env_c.get("/healthz")).json()
        return asyncio.run(go())


def test_wire_format_of_a_whole_episode_and_the_goal_stops_at_the_boundary():
    rec_app = Recorder(create_app(seed=0, capacity=4))
    rec, health = _episode(rec_app)
    assert rec.completed and health["free_slots"] == health["environment_slots"] == 4
    calls = rec_app.shop()
    reset_req, _, reset_ans = calls[0]
    assert reset_req == {"action": "reset", "idx": TASK, "if_persona": False, "include_private_goal": False,
                         "interaction_mode": "single_turn"}
    lease = {"env_idx": reset_ans["result"]["env_idx"], "lease_id": reset_ans["result"]["lease_id"]}
    middle = calls[1:-1]
    assert middle and all(req["action"] in ("interact", "terminate") and {k: req[k] for k in lease} == lease
                          for req, _, _ in middle)
    assert all(set(req) == {"action", "env_idx", "lease_id", "response"} for req, _, _ in middle if req["action"] == "interact")
    assert calls[-1][0] == {"action": "release_one", **lease} and calls[-1][1] == 200
    # the server sent the full private goal with the terminal answer; none of it is kept
    terminal = middle[-1][2]["result"]
    assert terminal["done"] is True and terminal["goal"]
    stored = json.dumps([rec.episode, rec.observations, rec.messages, rec.steps, rec.actions], default=str)
    assert terminal["goal"]["goal_signature"] not in stored
    payload = json.loads(rec.observations[-1]["payload"])
    assert "goal" not in payload and "lease_id" not in payload and "env_idx" not in payload
    assert payload["reward"] == terminal["reward"] and payload["reward_detail"] == terminal["reward_detail"]
    reset_payload = json.loads(rec.episode["reset_payload"])
    # persona off (the default): the persona shop_env sends anyway stops at the boundary too
    assert set(reset_ans["result"]) - set(reset_payload) == {"env_idx", "lease_id", "user_persona"}
    asin = (terminal.get("purchase") or {}).get("asin")
    assert rec.episode["right_product"] == (asin is not None and asin.lower() == terminal["goal"]["asin"].lower())
    assert rec.episode["reward"] == terminal["reward"]
    assert rec.episode["r_strict"] == terminal["reward_detail"]["r_strict"] and rec.episode["reward_derived"] is False


def test_cancellation_mid_episode_releases_the_lease():
    with serve_asgi(create_app(seed=0, capacity=3)) as url:
        async def go():
            async with httpx.AsyncClient(base_url=url) as env_c, httpx.AsyncClient(base_url=url + "/v1") as model_c:
                rt = _runtime(env_c, model_c, slow_ms=5000)
                task = asyncio.create_task(rt.run(EpisodeJob(TASK, 0, 1, "val")))
                await asyncio.sleep(0.5)  # reset done, first model call in flight
                assert (await env_c.get("/healthz")).json()["free_slots"] == 2
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                return (await env_c.get("/healthz")).json(), (await env_c.get("/v1/stats")).json()
        health, stats = asyncio.run(go())
    assert health["free_slots"] == 3 and stats["releases"] == 1


def _version(v):
    def rewrite(path, doc):
        if path == "/api/shop_agent" and isinstance(doc.get("result", {}).get("observation_state"), dict):
            doc["result"]["observation_state"]["observation_version"] = v
        return doc
    return rewrite


def test_unknown_observation_version_fails_the_episode_names_it_and_releases_the_lease():
    rec, health = _episode(Recorder(create_app(seed=0, capacity=2), _version("shopping-observation-v99")))
    assert rec.episode["status"] == "failed" and rec.failure["stage"] == "reset"
    assert rec.failure["exception_type"] == ObservationVersionError.__name__
    assert "shopping-observation-v99" in rec.failure["message"] and "upgrade" in rec.failure["message"]
    assert health["free_slots"] == 2


def test_a_server_speaking_another_observation_version_is_refused_before_any_episode(tmp_path, warehouse):
    def rewrite(path, doc):
        return {**doc, "observation_version": "shopping-observation-v8"} if path == "/healthz" else doc
    app = Recorder(create_app(seed=0), rewrite)
    with serve_asgi(app) as url:
        cfg = load_config(write_config(tmp_path / "c.yaml", environment={"url": url}, model={"base_url": url + "/v1"}))
        with pytest.raises(ObservationVersionError, match="shopping-observation-v8"):
            runner.run(cfg, str(warehouse))
    assert app.shop() == []


def test_healthz_is_recorded_on_the_run(tmp_path, warehouse):
    from shopsim_wh.engines.db import connect

    with serve_asgi(create_app(seed=0)) as url:
        health = httpx.get(url + "/healthz").json()
        cfg = load_config(write_config(tmp_path / "c.yaml", tasks={"sample_size": 2}, environment={"url": url},
                                       model={"base_url": url + "/v1"}))
        runner.run(cfg, str(warehouse))
    row = connect(warehouse).execute(
        "select primary_reward, environment_version, observation_version, provenance from runs").fetchone()
    assert row[:3] == (health["primary_reward"], health["environment_version"], "shopping-observation-v7")
    prov = json.loads(row[3])
    assert prov["environment"]["environment_version"] == health["environment_version"]
    assert prov["runtime"] == {"max_steps": 30, "action_protocol": "openai-function-tools-repair-v3"}
    assert prov["model"]["sampling"]["send_seed"] is True and prov["environment_health"]["tasks"] == health["tasks"]


def test_server_errors_carry_the_servers_message_and_what_to_do():
    with serve_asgi(create_app(seed=0, capacity=2)) as url:
        async def go():
            async with httpx.AsyncClient(base_url=url) as c:
                env = ShopEnvAdapter(c)
                first = await env.reset(TASK)
                assert first.payload["task_instruction"] and "lease_id" not in first.payload
                good = env.lease_id
                env.lease_id = "not-my-lease"
                with pytest.raises(EnvServerError) as stale:
                    await env.step("search[shoes]")
                env.lease_id = good
                done = await env.terminate("action_limit")
                assert done.done and done.termination_reason == "action_limit" and done.reward == 0.0
                with pytest.raises(EnvServerError) as finished:
                    await env.step("search[shoes]")
                await env.close()
                await env.close()  # idempotent
                bad = ShopEnvAdapter(c)
                with pytest.raises(EnvServerError) as unknown:
                    await bad.reset(-12345)
                return stale.value, finished.value, unknown.value, (await c.get("/healthz")).json()
        stale, finished, unknown, health = asyncio.run(go())
    assert stale.status == 409 and "stale or invalid lease" in str(stale) and "retried" in str(stale)
    assert finished.status == 500 and "log" in str(finished)
    assert unknown.status == 500 and "-12345" in str(unknown)
    assert health["free_slots"] == 2


def test_max_steps_counts_model_turns_and_ends_with_action_limit():
    app = Recorder(create_app(seed=0, capacity=2))
    rec, health = _episode(app, max_steps=2)
    assert rec.completed and rec.episode["termination_reason"] == "action_limit" and rec.episode["model_steps"] == 2
    assert app.shop()[-2][0]["action"] == "terminate" and app.shop()[-2][0]["termination_reason"] == "action_limit"
    assert rec.actions[-1]["action"] == "terminate[action_limit]" and rec.actions[-1]["step_idx"] == 1
    assert health["free_slots"] == 2


def test_reward_facts_are_the_servers_and_derived_only_when_it_gave_none():
    from shopsim_wh.rollout.runtime import reward_facts

    given = {"r_type": 1.0, "r_att": 0.5, "r_option": 1.0, "r_price": 1.0, "r_loose": 0.8, "r_strict": 0.5, "r_success": 0}
    assert reward_facts(given, 0.5, "r_strict") == (0.8, 0.5, 0.0, False)
    # components only: r_strict = product (a missing r_option counts as 1), success iff all are 1
    assert reward_facts({"r_type": 1.0, "r_att": 0.5, "r_price": 1.0}, 0.5, "r_strict") == (None, 0.5, 0.0, True)
    assert reward_facts({"r_type": 1, "r_att": 1, "r_option": 1, "r_price": 1}, 1.0, "r_loose") == (1.0, 1.0, 1.0, True)
    # nothing but the top-level reward: it is the run's primary figure
    assert reward_facts(None, 0.75, "r_loose") == (0.75, None, None, True)
    assert reward_facts(None, None, "r_strict") == (None, None, None, False)
