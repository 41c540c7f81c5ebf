"""The simulator's HTTP surface: the shop_env wire format field by field, the slot pool, the pi-slime dialect."""

from __future__ import annotations

import asyncio
import os
import pathlib
import re
import socket
import subprocess
import sys
import threading
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
RESET = {"action": "reset", "if_persona": False, "include_private_goal": False, "interaction_mode": "single_turn"}
REASONS = {"executed", "invalid_format", "multiple_actions_not_allowed", "empty_argument", "search_unavailable",
           "already_selected", "incomplete_options", "unavailable_action"}

run = run_in_app


async def post(c, body, expect: int = 200) -> dict:
    r = await c.post("/api/shop_agent", json=body)
    assert r.status_code == expect, r.text
    doc = r.json()
    assert set(doc) == {"result"}, doc  # every answer, errors included, is {"result": {...}}
    return doc["result"]


async def reset(c, task=TASK, **kw) -> dict:
    return await post(c, {**RESET, "idx": task.task_id, **kw})


def lease(doc: dict) -> dict:
    return {"env_idx": doc["env_idx"], "lease_id": doc["lease_id"]}


async def goal_path(c, env: dict, task=TASK) -> list[dict]:
    """Search, find the goal product, choose the goal options (any value on other axes); every answer."""
    words = task.instruction.split(", and price")[0]
    out = [await post(c, {"action": "interact", **env, "response": f"search[{words}]"})]
    for _ in range(8):
        if task.goal.asin in out[-1]["observation_state"]["actions"]:
            break
        out.append(await post(c, {"action": "interact", **env, "response": "click[next >]"}))
    out.append(await post(c, {"action": "interact", **env, "response": f"click[{task.goal.asin}]"}))
    available = out[-1]["observation_state"]["available_options"]
    for axis, values in available.items():
        value = task.goal.options.get(axis, values[0])
        out.append(await post(c, {"action": "interact", **env, "response": f"click[{axis}={value}]"}))
    return out


def test_healthz_fields():
    h = run(lambda c: c.get("/healthz")).json()
    assert h == {"ready": True, "environment_slots": 20, "free_slots": 20, "tasks": len(TASKS.tasks),
                 "environment_version": shopsim_wh.sim.ENVIRONMENT_VERSION, "primary_reward": "r_strict",
                 "observation_version": "shopping-observation-v7", "debug_ui": "/debug-ui", "replay_ui": "/replay-ui",
                 "idempotency_keys": True}  # the embedded server's extension (docs/reliability.md)
    assert "idempotency_keys" not in run(lambda c: c.get("/healthz"), create_app(idempotency=False)).json()


def test_reset_answer_field_by_field():
    async def go(c):
        std = await reset(c)
        persona = await reset(c, if_persona=True)
        private = await reset(c, include_private_goal=True)
        health = (await c.get("/healthz")).json()
        return std, persona, private, health

    std, persona, private, health = run(go)
    assert set(std) == {"task_instruction", "observation", "message", "env_idx", "idx", "task_mode",
                        "interaction_mode", "environment_version", "observation_state", "lease_id", "user_persona"}
    assert std["task_instruction"] == TASK.instruction and std["idx"] == TASK.task_id
    assert std["message"] == f"Task {TASK.task_id} started" and std["task_mode"] == "standard"
    assert std["interaction_mode"] == "single_turn" and std["environment_version"] == health["environment_version"]
    assert std["observation"] == "页面：搜索首页\n\n页面能力：\n- 支持商品搜索\n"
    assert std["observation_state"] == {"observation_version": "shopping-observation-v7", "page_type": "search_home",
                                        "search_available": True, "actions": []}
    assert set(std["user_persona"]) == {"name", "age", "occupation", "preference"}
    assert isinstance(std["lease_id"], str) and len(std["lease_id"]) == 32
    assert persona["task_mode"] == "persona"
    assert [std["env_idx"], persona["env_idx"], private["env_idx"]] == [0, 1, 2] and health["free_slots"] == 17
    assert private["private_task_instruction"] == TASK.instruction
    assert private["goal_options"] == list(TASK.goal.options.values()) and private["reason_key"] is None
    for doc in (std, persona):
        assert not {"private_task_instruction", "goal_options", "reason_key", "goal"} & set(doc)
        assert SIG not in str(doc) and TASK.goal.asin not in str(doc)


def test_interact_wire_format_until_a_right_purchase():
    async def go(c):
        doc = await reset(c)
        env = lease(doc)
        steps = await goal_path(c, env)
        final = await post(c, {"action": "interact", **env, "response": "click[buy now]"})
        after = await c.post("/api/shop_agent", json={"action": "interact", **env, "response": "click[buy now]"})
        return doc, steps, final, after

    doc, steps, final, after = run(go)
    keys = {"done", "reward", "observation", "message", "env_idx", "idx", "reward_detail", "purchase", "goal", "over",
            "observation_state", "action_feedback", "lease_id"}
    for s in steps:
        assert set(s) == keys
        assert s["done"] is False and s["over"] is False and s["reward"] == 0.0 and isinstance(s["reward"], float)
        assert s["reward_detail"] == {} and s["purchase"] == {} and s["goal"] == {}
        assert s["idx"] == f"slot-{doc['env_idx']}-{TASK.task_id}" and s["lease_id"] == doc["lease_id"]
        assert s["message"] == "Continue interaction"
        fb = s["action_feedback"]
        assert fb["valid"] is True and fb["reason"] == "executed" and set(fb) == {"action", "valid", "reason", "message"}
        assert SIG not in str(s)
    results, product = steps[0]["observation_state"], steps[-1]["observation_state"]
    assert results["page_type"] == "search_results" and results["search_available"] is False
    assert {"search_text", "normalized_search_text", "page", "total_pages", "total_results", "rank_start", "rank_end",
            "products"} <= set(results)
    assert set(results["products"][0]) == {"asin", "title", "brand", "category", "price", "key_attributes", "rank"}
    assert product["page_type"] == "product_detail" and product["options_complete"] is True
    assert "buy now" in product["actions"] and product["missing_option_axes"] == []
    assert set(final) == keys | {"termination_reason"}
    assert final["done"] is True and final["over"] is True and final["termination_reason"] == "purchase"
    assert final["message"] == "Continue interaction"  # the real server's wording, also after a purchase
    d = final["reward_detail"]
    assert final["reward"] == d["r_strict"] == 1.0 and d["r_success"] == 1 and isinstance(d["r_success"], int)
    assert d["reward_version"] == "shopsimulator-paper-reward-v2" and d["target_asin_match"] is True
    assert {"r_type", "r_att", "r_option", "r_price", "r_loose", "category_match", "title_score", "num_attr_matches",
            "num_option_matches", "price_verifiable", "price_upper", "price_resolution"} <= set(d)
    assert final["purchase"]["asin"] == TASK.goal.asin
    assert final["goal"]["goal_signature"] == SIG and final["goal"]["asin"] == TASK.goal.asin  # the full private goal
    assert final["observation_state"]["page_type"] == "terminal" and final["observation_state"]["actions"] == []
    assert after.status_code == 500 and "already terminated" in after.json()["result"]["error"]


def test_invalid_actions_report_each_reason_and_answer_integer_zero():
    cases = [
        ("search[]", "empty_argument"),
        ("dance[now]", "invalid_format"),
        ("search[a] click[b]", "multiple_actions_not_allowed"),
        ("Action: search[a]\nAction: click[b]", "multiple_actions_not_allowed"),
        ("click[add to cart]", "unavailable_action"),
        ("click[Back To Search]", "unavailable_action"),  # values match exactly: the offered ones are case-folded
    ]

    async def go(c):
        env = lease(await reset(c))
        out = [(a, await post(c, {"action": "interact", **env, "response": a})) for a, _ in cases]
        await goal_path(c, env)
        page = await post(c, {"action": "interact", **env, "response": "search[again]"})
        out.append(("search[again]", page))
        selected = next(iter(page["observation_state"]["selected_options"].items()), None)
        if selected:
            out.append(("sel", await post(c, {"action": "interact", **env, "response": f"click[{selected[0]}={selected[1]}]"})))
        return out

    out = run(go)
    got = {a: r for a, r in out}
    for action, reason in cases:
        r = got[action]
        fb = r["action_feedback"]
        assert fb["valid"] is False and fb["reason"] == reason and fb["message"], (action, fb)
        assert r["reward"] == 0 and isinstance(r["reward"], int)  # the real server's integer 0
        assert r["message"] == "Invalid action" and r["observation_state"]["last_action"] == fb
        assert "上次交互结果：\n- 结果：无效" in r["observation"] and f"- 原因代码：{reason}" in r["observation"]
    assert got["search[again]"]["action_feedback"]["reason"] == "search_unavailable"
    if "sel" in got:
        assert got["sel"]["action_feedback"]["reason"] == "already_selected"
    assert {fb for fb in REASONS} >= {r["action_feedback"]["reason"] for r in got.values()}


def test_incomplete_options_lists_the_missing_axes():
    task = next(t for t in TASKS.tasks if len(generate_catalog_product(t).options) >= 2)

    async def go(c):
        env = lease(await reset(c, task))
        steps = await goal_path(c, env, task)
        opened = next(s for s in steps if s["observation_state"]["page_type"] == "product_detail")
        back = await post(c, {"action": "interact", **env, "response": "click[< prev]"})
        again = await post(c, {"action": "interact", **env, "response": f"click[{task.goal.asin}]"})
        buy = await post(c, {"action": "interact", **env, "response": "click[buy now]"})
        return opened, back, again, buy

    opened, back, again, buy = run(go)
    axes = list(opened["observation_state"]["available_options"])
    assert opened["observation_state"]["missing_option_axes"] == axes and "buy now" not in opened["observation_state"]["actions"]
    assert all(f"{a}={v}" in opened["observation_state"]["actions"]
               for a, vs in opened["observation_state"]["available_options"].items() for v in vs)
    assert back["observation_state"]["page_type"] == "search_results"
    assert again["observation_state"]["selected_options"] == {}  # leaving the product forgets its options
    fb = buy["action_feedback"]
    assert fb["reason"] == "incomplete_options" and fb["missing_option_axes"] == axes and "、".join(axes) in fb["message"]


def generate_catalog_product(task):
    return shopsim_wh.sim.generate_catalog(0).by_asin[task.goal.asin]


def test_request_errors_400_409_500_with_messages():
    async def go(c):
        out = {}
        out["no_json"] = await c.post("/api/shop_agent", content=b"not json")
        out["env_on_reset"] = await c.post("/api/shop_agent", json={**RESET, "idx": TASK.task_id, "env_idx": 0})
        out["unknown_task"] = await c.post("/api/shop_agent", json={**RESET, "idx": 7})
        out["no_idx"] = await c.post("/api/shop_agent", json={"action": "reset"})
        out["bad_mode"] = await c.post("/api/shop_agent", json={**RESET, "idx": TASK.task_id, "interaction_mode": "x"})
        out["unsupported"] = await c.post("/api/shop_agent", json={"action": "status"})
        out["free_after_errors"] = (await c.get("/healthz")).json()["free_slots"]
        doc = await reset(c)
        env = lease(doc)
        out["no_lease"] = await c.post("/api/shop_agent", json={"action": "interact", "env_idx": env["env_idx"],
                                                               "response": "search[x]"})
        out["bool_env"] = await c.post("/api/shop_agent", json={"action": "interact", "env_idx": True,
                                                               "lease_id": env["lease_id"], "response": "search[x]"})
        out["wrong_lease"] = await c.post("/api/shop_agent", json={"action": "interact", "env_idx": env["env_idx"],
                                                                  "lease_id": "0" * 32, "response": "search[x]"})
        out["other_slot"] = await c.post("/api/shop_agent", json={"action": "interact", "env_idx": 5,
                                                                 "lease_id": env["lease_id"], "response": "search[x]"})
        out["no_response"] = await c.post("/api/shop_agent", json={"action": "interact", **env})
        out["bad_reason"] = await c.post("/api/shop_agent", json={"action": "terminate", **env,
                                                                 "termination_reason": "bored"})
        out["release_missing"] = await c.post("/api/shop_agent", json={"action": "release_one", "env_idx": 0})
        out["release"] = await c.post("/api/shop_agent", json={"action": "release_one", **env})
        out["stale_interact"] = await c.post("/api/shop_agent", json={"action": "interact", **env,
                                                                     "response": "search[x]"})
        out["stale_release"] = await c.post("/api/shop_agent", json={"action": "release_one", **env})
        out["stale_terminate"] = await c.post("/api/shop_agent", json={"action": "terminate", **env})
        return out

    out = run(go)
    expect = {
        "no_json": (200, "No JSON data provided"),
        "env_on_reset": (400, "reset must not include env_idx; the server assigns a slot"),
        "unknown_task": (500, "unknown or inactive task_id 7"),
        "no_idx": (500, "reset action requires idx parameter"),
        "bad_mode": (500, "unsupported interaction_mode 'x'"),
        "unsupported": (400, "unsupported action: 'status'"),
        "no_lease": (400, "interact requires a valid env_idx and lease_id"),
        "bool_env": (400, "interact requires a valid env_idx and lease_id"),
        "wrong_lease": (409, "stale or invalid lease for environment 0"),
        "other_slot": (409, "stale or invalid lease for environment 5"),
        "no_response": (500, "interact action requires response parameter"),
        "bad_reason": (500, "unsupported termination reason: bored"),
        "release_missing": (400, "release_one requires a valid env_idx and lease_id"),
        "stale_interact": (409, "stale or invalid lease for environment 0"),
        "stale_release": (409, "stale or invalid lease for environment 0"),
        "stale_terminate": (409, "stale or invalid lease for environment 0"),
    }
    for name, (status, message) in expect.items():
        r = out[name]
        assert r.status_code == status, (name, r.status_code, r.text)
        assert message in r.json()["result"]["error"], (name, r.text)
    assert out["free_after_errors"] == 20  # failed resets roll their new lease back
    assert out["release"].json() == {"result": {"message": "Environment 0 has been released"}}


def test_action_limit_30_counts_invalid_actions_and_ends_the_episode():
    async def go(c):
        env = lease(await reset(c))
        first = await post(c, {"action": "interact", **env, "response": "search[rain jacket]"})
        out = [await post(c, {"action": "interact", **env, "response": "click[nothing here]"}) for _ in range(29)]
        late = await c.post("/api/shop_agent", json={"action": "interact", **env, "response": "click[back to search]"})
        return first, out, late

    first, out, late = run(go)
    assert not first["done"] and all(not r["done"] for r in out[:-1])
    last = out[-1]
    assert last["done"] is True and last["over"] is True and last["termination_reason"] == "action_limit"
    assert last["reward"] == 0.0 and isinstance(last["reward"], float)
    d = last["reward_detail"]
    assert d["termination_reason"] == "action_limit" and d["r_success"] == 0
    assert all(d[k] == 0.0 for k in ("r_type", "r_att", "r_option", "r_price", "r_loose", "r_strict"))
    assert last["purchase"] == {} and last["goal"]["goal_signature"] == SIG
    assert last["action_feedback"]["reason"] == "unavailable_action" and last["message"] == "Invalid action"
    assert last["observation_state"]["page_type"] == "search_results"  # the page stays where it was
    assert late.status_code == 500


def test_terminate_answer_and_the_last_page():
    async def go(c):
        env = lease(await reset(c))
        page = await post(c, {"action": "interact", **env, "response": "search[desk lamp]"})
        term = await post(c, {"action": "terminate", **env, "termination_reason": "generation_length"})
        again = await c.post("/api/shop_agent", json={"action": "terminate", **env,
                                                     "termination_reason": "action_limit"})
        free_before = (await c.get("/healthz")).json()["free_slots"]
        await post(c, {"action": "release_one", **env})
        return page, term, again, free_before, (await c.get("/healthz")).json()["free_slots"]

    page, term, again, free_before, free_after = run(go)
    assert set(term) == {"done", "over", "reward", "observation", "message", "env_idx", "idx", "reward_detail",
                         "purchase", "goal", "termination_reason", "observation_state", "lease_id"}
    assert term["done"] is True and term["reward"] == 0.0 and term["termination_reason"] == "generation_length"
    assert term["message"] == "Episode terminated: generation_length"
    assert term["reward_detail"]["termination_reason"] == "generation_length"
    assert term["reward_detail"]["r_strict"] == 0.0 and term["reward_detail"]["r_success"] == 0
    assert term["goal"]["goal_signature"] == SIG and term["purchase"] == {}
    assert term["observation_state"]["page_type"] == "search_results"  # after terminate: still the last page
    assert term["observation_state"]["products"] == page["observation_state"]["products"]
    assert again.status_code == 500 and "already terminated" in again.json()["result"]["error"]
    assert (free_before, free_after) == (19, 20)  # a finished episode keeps its slot until release_one


def test_reset_waits_for_a_free_slot_and_release_hands_it_over():
    async def go(c):
        a = await reset(c)
        waiting = asyncio.ensure_future(reset(c, TASKS.tasks[1]))
        await asyncio.sleep(0.2)
        blocked = not waiting.done()
        stats = (await c.get("/v1/stats")).json()
        await post(c, {"action": "release_one", **lease(a)})
        b = await asyncio.wait_for(waiting, 5)
        stale = await c.post("/api/shop_agent", json={"action": "interact", **lease(a), "response": "search[x]"})
        fresh = await post(c, {"action": "interact", **lease(b), "response": "search[x]"})
        return a, b, blocked, stats, stale, fresh

    a, b, blocked, stats, stale, fresh = run(go, create_app(capacity=1))
    assert blocked and stats["waiting_resets"] == 1 and stats["free_slots"] == 0
    assert a["env_idx"] == b["env_idx"] == 0 and a["lease_id"] != b["lease_id"]
    assert b["idx"] == TASKS.tasks[1].task_id
    assert stale.status_code == 409  # the first holder's lease went stale when the slot was handed over
    assert fresh["idx"] == f"slot-0-{TASKS.tasks[1].task_id}"


def test_a_waiting_reset_whose_client_leaves_takes_no_slot():
    app = create_app(capacity=1)

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as c:
            held = await reset(c)
            left = asyncio.Event()
            body = iter([{"type": "http.request", "body": httpx.Request("POST", "/", json={**RESET, "idx": TASK.task_id})
                          .read(), "more_body": False}])

            async def receive():
                try:
                    return next(body)
                except StopIteration:
                    await left.wait()
                    return {"type": "http.disconnect"}

            sent = []

            async def send(m):
                sent.append(m)

            call = asyncio.ensure_future(app({"type": "http", "method": "POST", "path": "/api/shop_agent"}, receive, send))
            await asyncio.sleep(0.1)
            waiting = (await c.get("/v1/stats")).json()["waiting_resets"]
            left.set()
            await asyncio.wait_for(call, 5)
            await post(c, {"action": "release_one", **lease(held)})
            return waiting, sent, (await c.get("/healthz")).json()["free_slots"]

    waiting, sent, free = asyncio.run(go())
    assert waiting == 1 and sent == [] and free == 1


def test_release_all_frees_every_slot_and_wakes_waiters():
    async def go(c):
        held = [await reset(c) for _ in range(2)]
        waiters = [asyncio.ensure_future(reset(c)) for _ in range(2)]
        await asyncio.sleep(0.1)
        assert not any(w.done() for w in waiters)
        msg = await post(c, {"action": "release_all"})
        got = await asyncio.wait_for(asyncio.gather(*waiters), 5)
        stale = await c.post("/api/shop_agent", json={"action": "interact", **lease(held[0]), "response": "search[x]"})
        return msg, got, stale

    msg, got, stale = run(go, create_app(capacity=2))
    assert msg == {"message": "All environments have been initialized"}
    assert sorted(g["env_idx"] for g in got) == [0, 1] and stale.status_code == 409


def test_pi_slime_dialect_on_the_same_path():
    async def go(c):
        r = await post(c, {"action": "reset", "idx": TASK.task_id, "rollout_session_id": "ro-1"})
        env = {"env_idx": r["env_idx"], "rollout_session_id": "ro-1"}
        status = await post(c, {"action": "status", "rollout_session_id": "ro-1"})
        other = await c.post("/api/shop_agent", json={**env, "action": "interact", "rollout_session_id": "ro-2",
                                                     "response": "search[x]"})
        step = await post(c, {**env, "action": "interact", "response": "search[rain jacket]"})
        end = None
        for _ in range(40):
            end = await post(c, {**env, "action": "interact", "response": "click[nowhere]"})
            if end["done"]:
                break
        gone = await c.post("/api/shop_agent", json={**env, "action": "interact", "response": "search[x]"})
        health = (await c.get("/healthz")).json()
        return r, status, other, step, end, gone, health

    r, status, other, step, end, gone, health = run(go)
    assert set(r) == {"env_idx", "rollout_session_id", "instruction"}
    assert r["instruction"].startswith(f"购物任务：\n{TASK.instruction}\n\n页面：搜索首页")
    assert status["active"] == 1 and status["sessions"][0]["rollout_session_id"] == "ro-1"
    assert other.status_code == 409 and "another rollout session" in other.json()["error"]
    assert "observation_state" not in step and step["instruction"].startswith("页面：搜索结果")
    assert step["done"] is False and step["over"] is False and step["reward"] == 0.0
    assert end["done"] is True and end["over"] is True and end["termination_reason"] == "action_limit"
    assert end["reward"] == end["reward_detail"]["r_loose"] == 0.0 and end["purchase"] == {"asin": None}
    assert gone.status_code == 404 and health["free_slots"] == 20  # this dialect's server frees the slot itself


def test_pi_slime_reward_is_the_loose_reward():
    """Buy the first result (choosing the first value of every axis) reading only the text, as that dialect must."""
    async def go(c):
        r = await post(c, {"action": "reset", "idx": TASK.task_id, "rollout_session_id": "ro-9"})
        env = {"env_idx": r["env_idx"], "rollout_session_id": "ro-9"}
        page = await post(c, {**env, "action": "interact", "response": "search[" + TASK.instruction.split(",")[0] + "]"})
        asin = re.search(r"ASIN：(\d+)", page["instruction"]).group(1)
        page = await post(c, {**env, "action": "interact", "response": f"click[{asin}]"})
        while "buy now" not in clickables(page["instruction"]):
            missing = re.findall(r"^- (.+?)：尚未选择$", page["instruction"], flags=re.MULTILINE)
            pick = next(x for x in clickables(page["instruction"]) if x.split("=")[0] == missing[0])
            page = await post(c, {**env, "action": "interact", "response": f"click[{pick}]"})
        return await post(c, {**env, "action": "interact", "response": "click[buy now]"})

    end = run(go)
    d = end["reward_detail"]
    assert end["done"] and end["over"] and end["termination_reason"] == "purchase"
    assert end["reward"] == d["r_loose"]
    n_att, n_opt = len(TASK.goal.attributes), len(TASK.goal.options)
    expected = d["r_type"] * (d["num_attr_matches"] + d["num_option_matches"] + d["r_price"]) / (n_att + n_opt + 1)
    assert end["reward"] == pytest.approx(expected, abs=1e-12)


def clickables(text: str) -> list[str]:
    tail = text.split("可点击元素：\n", 1)[-1]
    return [line[2:] for line in tail.splitlines() if line.startswith("- ")]


def test_lifespan_scope_is_answered():
    app = create_app()
    sent = []

    async def go():
        msgs = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])

        async def receive():
            return next(msgs)

        async def send(m):
            sent.append(m["type"])

        await app({"type": "lifespan"}, receive, send)

    asyncio.run(go())
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


# ---------------------------------------------------------------------------------------------- real HTTP


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
        [sys.executable, "-m", "shopsim_wh.sim", "serve", "--host", "127.0.0.1", "--port", str(port),
         "--capacity", "1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=0.5).status_code == 200:
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


def until(check, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_real_subprocess_server_over_http(real_server):
    with httpx.Client(base_url=real_server, timeout=10) as c:
        assert c.get("/healthz").json()["environment_slots"] == 1
        doc = c.post("/api/shop_agent", json={**RESET, "idx": TASK.task_id}).json()["result"]
        env = lease(doc)
        r = c.post("/api/shop_agent", json={"action": "interact", **env, "response": "search[rain jacket]"}).json()
        assert r["result"]["observation_state"]["page_type"] == "search_results"
        # a second reset blocks on the only slot until the first holder releases it
        second: dict = {}
        t = threading.Thread(target=lambda: second.update(httpx.post(
            f"{real_server}/api/shop_agent", json={**RESET, "idx": TASKS.tasks[2].task_id}, timeout=10).json()))
        t.start()
        assert until(lambda: c.get("/v1/stats").json()["waiting_resets"] == 1) and t.is_alive()
        term = c.post("/api/shop_agent", json={"action": "terminate", **env, "termination_reason": "action_limit"})
        assert term.json()["result"]["reward_detail"]["termination_reason"] == "action_limit"
        assert t.is_alive()  # a finished episode still holds its slot
        assert c.post("/api/shop_agent", json={"action": "release_one", **env}).status_code == 200
        t.join(10)
        assert second["result"]["env_idx"] == 0 and second["result"]["lease_id"] != env["lease_id"]
        stale = c.post("/api/shop_agent", json={"action": "interact", **env, "response": "search[x]"})
        assert stale.status_code == 409
        # a reset whose client gives up while it waits takes no slot when one frees later
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{real_server}/api/shop_agent", json={**RESET, "idx": TASK.task_id}, timeout=0.3)
        assert until(lambda: c.get("/v1/stats").json()["waiting_resets"] == 0)
        c.post("/api/shop_agent", json={"action": "release_one", **lease(second["result"])})
        time.sleep(0.2)
        assert c.get("/healthz").json()["free_slots"] == 1
        models = c.get("/v1/models").json()
        assert {"scripted-strong", "scripted-noisy"} <= {m["id"] for m in models["data"]}
        assert c.post("/v1/sessions", json={"task_id": TASK.task_id}).status_code == 404  # the invented API is gone
