"""The simulator's HTTP surface: canonical and legacy dialects through a real ASGI app, and one real server."""

from __future__ import annotations

import asyncio
import os
import pathlib
import socket
import subprocess
import sys
import time

import httpx
import pytest

import shopsim_wh.sim
from shopsim_wh.sim.server import create_app
from shopsim_wh.sim.tasks import default_task_ids, generate_tasks

from .conftest import run_in_app

TASKS = generate_tasks(0)
TASK = TASKS.by_id[default_task_ids("val")[0]]
SIG = TASK.goal.goal_signature


run = run_in_app


async def _goal_path(client, lease: str, task) -> list[httpx.Response]:
    """Walk to the goal item with raw HTTP; returns every step response."""
    out = [await client.post(f"/v1/sessions/{lease}/step", json={"action": f"search[{task.instruction}]"})]
    for _ in range(5):
        if task.goal.asin in out[-1].json()["observation_state"]["actions"]:
            break
        out.append(await client.post(f"/v1/sessions/{lease}/step", json={"action": "click[next >]"}))
    out.append(await client.post(f"/v1/sessions/{lease}/step", json={"action": f"click[{task.goal.asin}]"}))
    for value in task.goal.options.values():
        out.append(await client.post(f"/v1/sessions/{lease}/step", json={"action": f"click[{value}]"}))
    return out


def test_health_reset_step_buy_release_and_stats():
    async def go(c):
        h = (await c.get("/v1/health")).json()
        assert h == {"status": "ok", "observation_version": "shopsim-obs-v1", "capacity": 256, "active": 0,
                     "tasks": len(TASKS.tasks)}
        r = await c.post("/v1/sessions", json={"task_id": TASK.task_id, "include_private_goal": False,
                                               "action_limit": 20})
        assert r.status_code == 200
        doc = r.json()
        assert set(doc) == {"lease_id", "task", "observation", "observation_state", "action_limit"}
        assert doc["task"] == TASK.public() and doc["action_limit"] == 20
        assert doc["observation_state"]["page"] == "search" and SIG not in r.text
        lease = doc["lease_id"]
        steps = await _goal_path(c, lease, TASK)
        for s in steps:
            assert s.status_code == 200 and SIG not in s.text
            body = s.json()
            assert set(body) == {"observation", "observation_state", "action_feedback", "done", "reward",
                                 "reward_detail", "purchase", "goal", "termination_reason", "actions_taken",
                                 "action_limit"}
            assert body["goal"] is None and body["done"] is False
        final = (await c.post(f"/v1/sessions/{lease}/step", json={"action": "click[Buy Now]"})).json()
        assert final["done"] and final["reward"] == 1.0 and final["termination_reason"] == "purchase"
        assert final["goal"]["goal_signature"] == SIG and final["purchase"]["asin"] == TASK.goal.asin
        again = await c.post(f"/v1/sessions/{lease}/step", json={"action": "click[Buy Now]"})
        assert again.status_code == 409 and again.json()["error"]["code"] == "episode_done"
        assert (await c.get("/v1/health")).json()["active"] == 1
        assert (await c.delete(f"/v1/sessions/{lease}")).json() == {"released": True}
        assert (await c.delete(f"/v1/sessions/{lease}")).json() == {"released": False}
        stats = (await c.get("/v1/stats")).json()
        assert stats["active_leases"] == 0 and stats["leases_opened"] == 1 and stats["leases_released"] == 1
        assert stats["leases_expired"] == 0 and stats["episodes_done"] == 1
        gone = await c.post(f"/v1/sessions/{lease}/step", json={"action": "click[x]"})
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "unknown_lease"

    run(go)


def test_private_goal_only_on_request_and_reset_errors():
    async def go(c):
        r = await c.post("/v1/sessions", json={"task_id": TASK.task_id, "include_private_goal": True})
        assert r.json()["goal"]["goal_signature"] == SIG
        missing = await c.post("/v1/sessions", json={"task_id": 1})  # IDs have holes; 1 is not a task
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_task"
        for bad in (b"not json", b"[1]", b'{"task_id": "7"}', b'{"task_id": true}',
                    b'{"task_id": 1007, "action_limit": 0}', b'{"task_id": 1007, "bogus": 1}'):
            resp = await c.post("/v1/sessions", content=bad)
            assert resp.status_code == 422 and resp.json()["error"]["code"] == "bad_request", bad
        lease = r.json()["lease_id"]
        resp = await c.post(f"/v1/sessions/{lease}/step", json={"act": "search[x]"})
        assert resp.status_code == 422
        assert (await c.get("/v1/nowhere")).status_code == 404
        assert (await c.get("/v1/sessions")).status_code == 405

    run(go)


def test_capacity_limit_and_release_frees_a_slot():
    async def go(c):
        leases = []
        for _ in range(2):
            leases.append((await c.post("/v1/sessions", json={"task_id": TASK.task_id})).json()["lease_id"])
        full = await c.post("/v1/sessions", json={"task_id": TASK.task_id})
        assert full.status_code == 503 and full.json()["error"]["code"] == "no_capacity"
        await c.delete(f"/v1/sessions/{leases[0]}")
        assert (await c.post("/v1/sessions", json={"task_id": TASK.task_id})).status_code == 200

    run(go, create_app(capacity=2))


def test_invalid_action_codes_over_http_and_action_limit():
    async def go(c):
        lease = (await c.post("/v1/sessions", json={"task_id": TASK.task_id, "action_limit": 4})).json()["lease_id"]
        codes = []
        for action in ("hello", "search[]", "click[nope]", "search[rain jacket]"):
            body = (await c.post(f"/v1/sessions/{lease}/step", json={"action": action})).json()
            codes.append(body["action_feedback"]["code"])
        assert codes == ["malformed_action", "empty_query", "unknown_clickable", None]
        assert body["done"] and body["termination_reason"] == "action_limit" and body["reward"] == 0.0
        assert body["actions_taken"] == 4
        stats = (await c.get("/v1/stats")).json()
        assert stats["invalid_actions"] == 3 and stats["steps"] == 4

    run(go)


def test_terminate_payload_and_default_action_limit():
    async def go(c):
        doc = (await c.post("/v1/sessions", json={"task_id": TASK.task_id})).json()
        assert doc["action_limit"] == 7
        lease = doc["lease_id"]
        bad = await c.post(f"/v1/sessions/{lease}/terminate", json={})
        assert bad.status_code == 422
        t = (await c.post(f"/v1/sessions/{lease}/terminate", json={"reason": "protocol_budget"})).json()
        assert t["done"] and t["reward"] == 0.0 and t["termination_reason"] == "protocol_budget"
        assert t["reward_detail"] == {"r_type": 0.0, "r_att": 0.0, "r_option": 0.0, "r_price": 0.0}
        assert t["goal"]["goal_signature"] == SIG
        again = await c.post(f"/v1/sessions/{lease}/terminate", json={"reason": "x"})
        assert again.status_code == 409

    run(go, create_app(default_action_limit=7))


def test_idle_leases_expire_and_free_capacity():
    clock = [1000.0]
    app = create_app(capacity=1, lease_ttl_s=5.0, clock=lambda: clock[0])

    async def go(c):
        lease = (await c.post("/v1/sessions", json={"task_id": TASK.task_id})).json()["lease_id"]
        clock[0] += 4.0
        assert (await c.post(f"/v1/sessions/{lease}/step", json={"action": "search[x y]"})).status_code == 200
        clock[0] += 4.0  # the step refreshed the lease: still alive
        assert (await c.get("/v1/health")).json()["active"] == 1
        clock[0] += 6.0
        resp = await c.post(f"/v1/sessions/{lease}/step", json={"action": "click[Back to Search]"})
        assert resp.status_code == 410 and resp.json()["error"]["code"] == "lease_expired"
        stats = (await c.get("/v1/stats")).json()
        assert stats["leases_expired"] == 1 and stats["active_leases"] == 0
        assert (await c.post("/v1/sessions", json={"task_id": TASK.task_id})).status_code == 200
        assert (await c.delete(f"/v1/sessions/{lease}")).json() == {"released": False}

    run(go, app)


def test_lease_expiry_with_a_real_clock():
    async def go(c):
        await c.post("/v1/sessions", json={"task_id": TASK.task_id})
        await asyncio.sleep(0.15)
        return (await c.get("/v1/stats")).json()

    stats = run(go, create_app(lease_ttl_s=0.05))
    assert stats["leases_expired"] == 1 and stats["active_leases"] == 0


def test_legacy_dialect_reset_interact_release_status():
    async def go(c):
        api = "/api/shop_agent"
        res = (await c.post(api, json={"action": "reset", "idx": TASK.task_id, "rollout_session_id": "s1"})).json()
        env_idx = res["result"]["env_idx"]
        assert res["result"]["instruction"].startswith(f"Instruction: [SEP] {TASK.instruction} [SEP]")
        assert "[button] Search [button_]" in res["result"]["instruction"] and SIG not in str(res)
        st = (await c.post(api, json={"action": "status"})).json()["result"]
        assert st["active"] == 1 and st["free"] == st["capacity"] - 1 and st["sessions"][0]["env_idx"] == env_idx
        step = (await c.post(api, json={"action": "interact", "env_idx": env_idx, "response": "search[rain]",
                                        "rollout_session_id": "s1"})).json()["result"]
        assert step["done"] is False and step["over"] is False and step["reward"] == 0.0 and SIG not in str(step)
        wrong = await c.post(api, json={"action": "interact", "env_idx": env_idx, "response": "x",
                                        "rollout_session_id": "other"})
        assert "error" in wrong.json()
        # the second reset gets another slot; releasing it frees the slot
        other = (await c.post(api, json={"action": "reset", "idx": TASK.task_id, "rollout_session_id": "s2"})).json()
        rel = (await c.post(api, json={"action": "release_one", "env_idx": other["result"]["env_idx"]})).json()
        assert rel["result"]["released"] is True
        # walk to the goal and buy: done, over (server released the slot), reward detail, purchase, goal
        actions = [f"click[{a}]" for a in ("Back to Search",)] + [f"search[{TASK.instruction}]"]
        for a in actions:
            step = (await c.post(api, json={"action": "interact", "env_idx": env_idx, "response": a})).json()["result"]
        page = step["instruction"]
        while f"[button] {TASK.goal.asin} [button_]" not in page:
            page = (await c.post(api, json={"action": "interact", "env_idx": env_idx,
                                            "response": "click[next >]"})).json()["result"]["instruction"]
        for a in [TASK.goal.asin, *TASK.goal.options.values(), "Buy Now"]:
            step = (await c.post(api, json={"action": "interact", "env_idx": env_idx,
                                            "response": f"click[{a}]"})).json()["result"]
        assert step["done"] and step["over"] and step["reward"] == 1.0
        assert set(step["reward_detail"]) >= {"r_type", "r_att", "r_option", "r_price"}
        assert step["purchase"]["asin"] == step["goal"]["asin"] == TASK.goal.asin
        gone = await c.post(api, json={"action": "interact", "env_idx": env_idx, "response": "click[x]"})
        assert gone.status_code == 404 and "error" in gone.json()
        st = (await c.post(api, json={"action": "status"})).json()["result"]
        assert st["active"] == 0
        unknown = await c.post(api, json={"action": "fly"})
        assert unknown.status_code == 400 and "error" in unknown.json()
        missing = await c.post(api, json={"action": "reset", "idx": 1})
        assert missing.status_code == 404 and "unknown_task" in missing.json()["error"]
        assert (await c.post(api, json={"action": "release_one", "env_idx": 99})).json()["result"]["released"] is False

    run(go)


def test_lifespan_scope_is_answered():
    app = create_app()
    sent = []
    messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])

    async def receive():
        return next(messages)

    async def send(msg):
        sent.append(msg["type"])

    asyncio.run(app({"type": "lifespan"}, receive, send))
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def real_server():
    port = _free_port()
    root = pathlib.Path(shopsim_wh.sim.__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "shopsim_wh.sim", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                if httpx.get(f"{base}/v1/health", timeout=0.5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start: {proc.stdout.read().decode()[-2000:]}")
            time.sleep(0.05)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_real_subprocess_server_over_http(real_server):
    with httpx.Client(base_url=real_server, timeout=10) as c:
        assert c.get("/v1/health").json()["status"] == "ok"
        doc = c.post("/v1/sessions", json={"task_id": TASK.task_id}).json()
        lease = doc["lease_id"]
        r = c.post(f"/v1/sessions/{lease}/step", json={"action": "search[rain jacket]"}).json()
        assert r["observation_state"]["page"] == "results"
        t = c.post(f"/v1/sessions/{lease}/terminate", json={"reason": "generation_length"}).json()
        assert t["termination_reason"] == "generation_length"
        assert c.delete(f"/v1/sessions/{lease}").json() == {"released": True}
        legacy = c.post("/api/shop_agent", json={"action": "reset", "idx": TASK.task_id}).json()["result"]
        c.post("/api/shop_agent", json={"action": "release_one", "env_idx": legacy["env_idx"]})
        assert c.get("/v1/stats").json()["active_leases"] == 0
        models = c.get("/v1/models").json()
        assert {"scripted-strong", "scripted-noisy"} <= {m["id"] for m in models["data"]}
        chat = c.post("/v1/chat/completions", json={
            "model": "scripted-strong", "seed": 1,
            "messages": [{"role": "system", "content": "Shop."}, {"role": "user", "content": doc["observation"]}],
            "tools": [{"type": "function", "function": {"name": "search", "parameters": {
                "type": "object", "properties": {"query": {"type": "string"}}}}}],
        }).json()
        assert chat["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "search"
