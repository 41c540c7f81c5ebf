"""The scripted OpenAI-compatible policy: response shape, failure injection, determinism, skills, fairness."""

from __future__ import annotations

import ast
import asyncio
import json
import pathlib
import statistics

import pytest

from shopsim_wh.sim import policy as policy_mod
from shopsim_wh.sim import shopper as shopper_mod
from shopsim_wh.sim.policy import FAILURE_KINDS, PROFILES, PolicyConfig, effective_params
from shopsim_wh.sim.server import create_app
from shopsim_wh.sim.tasks import default_task_ids, generate_tasks

from .conftest import run_in_app

TASKS = generate_tasks(0)
VAL = default_task_ids("val")
SYSTEM = "You are a shopping assistant. Call exactly one tool per turn."
SKILL = "Skill: select every option the instruction names (size, color, ...) before you click Buy Now."
PLACEBO = "Be polite and concise in your reasoning."


def tools_for(state: dict) -> list[dict]:
    """The tools the ShopSimRL runtime builds from observation_state (search when available, click enum)."""
    tools = []
    if state["search_available"] is True:
        tools.append({"type": "function", "function": {
            "name": "search", "description": "使用关键词搜索商品。",
            "parameters": {"type": "object", "properties": {"query": {"type": "string", "minLength": 1}},
                           "required": ["query"], "additionalProperties": False}}})
    if state["actions"]:
        tools.append({"type": "function", "function": {
            "name": "click", "description": "点击当前页面的一个可用按钮、商品或规格选项。",
            "parameters": {"type": "object", "properties": {"value": {"type": "string", "enum": state["actions"]}},
                           "required": ["value"], "additionalProperties": False}}})
    return tools


run = run_in_app


async def shop(c, body: dict) -> dict:
    r = await c.post("/api/shop_agent", json=body)
    assert r.status_code == 200, r.text
    return r.json()["result"]


async def reset(c, task_id: int) -> dict:
    return await shop(c, {"action": "reset", "idx": task_id, "if_persona": False, "include_private_goal": False,
                          "interaction_mode": "single_turn"})


def opening(doc: dict, system: str) -> list[dict]:
    """System message (prompt, persona, optional skills) and the first user message, as the runtime writes them."""
    sections = [system]
    if doc.get("user_persona"):
        sections.append("用户个人文档：\n" + json.dumps(doc["user_persona"], ensure_ascii=False, sort_keys=True))
    return [{"role": "system", "content": "\n\n".join(sections)},
            {"role": "user", "content": f"购物任务：\n{doc['task_instruction']}\n\n{doc['observation']}"}]


async def first_request(c, task_id: int, system: str = SYSTEM, model: str = "scripted-strong", **extra) -> dict:
    doc = await reset(c, task_id)
    await shop(c, {"action": "release_one", "env_idx": doc["env_idx"], "lease_id": doc["lease_id"]})
    return {"model": model, "seed": 7, "temperature": 0.6, "max_tokens": 4096, "messages": opening(doc, system),
            "tools": tools_for(doc["observation_state"]), **extra}


async def play(c, task_id: int, system: str, model: str = "scripted-strong", seed: int = 0,
               temperature: float = 0.6, max_steps: int = 30) -> dict:
    """One episode the way the ShopSimRL runtime runs it; protocol errors get feedback and use up a turn."""
    doc = await reset(c, task_id)
    env = {"env_idx": doc["env_idx"], "lease_id": doc["lease_id"]}
    state, messages, final = doc["observation_state"], opening(doc, system), None
    try:
        for step in range(1, max_steps + 1):
            body = {"model": model, "messages": messages, "tools": tools_for(state), "seed": seed * 100 + step,
                    "temperature": temperature, "max_tokens": 4096}
            out = (await c.post("/v1/chat/completions", json=body)).json()["choices"][0]
            msg, calls = out["message"], out["message"].get("tool_calls") or []
            if out["finish_reason"] == "length" and not calls:
                final = await shop(c, {"action": "terminate", **env, "termination_reason": "generation_length"})
                break
            names = {t["function"]["name"] for t in body["tools"]}
            try:
                ok = len(calls) == 1 and calls[0]["function"]["name"] in names and not msg["content"]
                args = json.loads(calls[0]["function"]["arguments"]) if ok else None
            except (ValueError, KeyError):  # arguments not JSON; a call without its function object
                ok = False
            if not ok:
                feedback = json.dumps({"type": "tool_protocol_error", "code": "tool_call_count"})
                if calls:
                    messages.append({"role": "assistant", "content": msg["content"], "tool_calls": calls})
                    messages += [{"role": "tool", "tool_call_id": x["id"], "content": feedback} for x in calls]
                else:
                    messages.append({"role": "user", "content": feedback})
                continue
            messages.append({"role": "assistant", "content": msg["content"], "tool_calls": calls})
            name = calls[0]["function"]["name"]
            action = f"search[{args['query'].strip()}]" if name == "search" else f"click[{args['value'].strip()}]"
            res = await shop(c, {"action": "interact", **env, "response": action})
            messages.append({"role": "tool", "tool_call_id": calls[0]["id"], "content": res["observation"]})
            state = res["observation_state"]
            if res["done"]:
                final = res
                break
        else:
            final = await shop(c, {"action": "terminate", **env, "termination_reason": "action_limit"})
    finally:
        await shop(c, {"action": "release_one", **env})
    return final


# ---------------------------------------------------------------------------------------------- shape


def test_models_and_a_normal_completion():
    async def go(c):
        models = (await c.get("/v1/models")).json()
        assert models["object"] == "list"
        assert {"scripted-strong", "scripted-noisy", "scripted-weak"} <= {m["id"] for m in models["data"]}
        req = await first_request(c, VAL[0])
        r = await c.post("/v1/chat/completions", json=req)
        assert r.status_code == 200
        doc = r.json()
        assert doc["object"] == "chat.completion" and doc["model"] == "scripted-strong"
        assert doc["id"].startswith("chatcmpl-") and isinstance(doc["created"], int)
        choice = doc["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        msg = choice["message"]
        assert msg["role"] == "assistant" and msg["content"] is None and len(msg["reasoning_content"].split()) > 5
        (call,) = msg["tool_calls"]
        assert call["id"].startswith("call_") and call["type"] == "function"
        assert call["function"]["name"] == "search" and json.loads(call["function"]["arguments"])["query"]
        u = doc["usage"]
        assert u["prompt_tokens"] > 20 and u["completion_tokens"] > 0
        assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
        # identical request, identical response; a different system text changes the draws (and the id)
        assert (await c.post("/v1/chat/completions", json=req)).content == r.content
        req2 = {**req, "messages": [{"role": "system", "content": SYSTEM + " " + PLACEBO}, req["messages"][1]]}
        assert (await c.post("/v1/chat/completions", json=req2)).json()["id"] != doc["id"]
        # the request's seed takes part in the draws; without one, the request's hash alone decides
        unseeded = {k: v for k, v in req.items() if k != "seed"}
        first = (await c.post("/v1/chat/completions", json=unseeded)).content
        assert (await c.post("/v1/chat/completions", json=unseeded)).content == first
        ids = {(await c.post("/v1/chat/completions", json={**req, "seed": s})).json()["id"] for s in (1, 2, 3)}
        assert len(ids) == 3

    run(go)


def test_request_errors_are_openai_shaped():
    async def go(c):
        req = await first_request(c, VAL[0])
        r = await c.post("/v1/chat/completions", json={**req, "model": "gpt-17"})
        assert r.status_code == 404
        err = r.json()["error"]
        assert err["code"] == "model_not_found" and err["type"] and "gpt-17" in err["message"]
        r = await c.post("/v1/chat/completions", json={"model": "scripted-strong"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "missing_messages"
        r = await c.post("/v1/chat/completions", json={**req, "scripted_policy": {"failure_rates": {"nope": 1}}})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_scripted_policy"
        r = await c.post("/v1/chat/completions", content=b"{")
        assert r.status_code == 400

    run(go)


@pytest.mark.parametrize("kind", FAILURE_KINDS)
def test_each_failure_kind_at_rate_one(kind):
    async def go(c):
        req = await first_request(c, VAL[1], scripted_policy={"failure_rates": {kind: 1.0}})
        return req, (await c.post("/v1/chat/completions", json=req)).json()["choices"][0]

    req, choice = run(go)
    msg, calls = choice["message"], choice["message"].get("tool_calls") or []
    offered = {t["function"]["name"] for t in req["tools"]}
    if kind == "no_tool_call":
        assert not calls and choice["finish_reason"] == "stop" and msg["content"]
    elif kind == "multiple_tool_calls":
        assert len(calls) == 2 and choice["finish_reason"] == "tool_calls"
    elif kind == "malformed_arguments":
        assert len(calls) == 1
        with pytest.raises(ValueError):
            json.loads(calls[0]["function"]["arguments"])
    elif kind == "unknown_tool":
        assert len(calls) == 1 and calls[0]["function"]["name"] not in offered
    elif kind == "invalid_click":
        assert len(calls) == 1 and calls[0]["function"]["name"] == "click"
        value = json.loads(calls[0]["function"]["arguments"])["value"]
        enum = next((t["function"]["parameters"]["properties"]["value"]["enum"] for t in req["tools"]
                     if t["function"]["name"] == "click"), [])
        assert value not in enum
    elif kind == "mixed_content":
        assert len(calls) == 1 and calls[0]["function"]["name"] in offered and msg["content"].strip()
    elif kind == "wrong_arguments":
        assert len(calls) == 1 and len(json.loads(calls[0]["function"]["arguments"])) == 2
    elif kind == "missing_function":
        assert len(calls) == 1 and "function" not in calls[0] and calls[0]["type"] == "function" and msg["content"]
    else:
        assert kind == "length"
        assert not calls and choice["finish_reason"] == "length" and msg["reasoning_content"]


def test_max_tokens_truncates_to_length():
    async def go(c):
        req = await first_request(c, VAL[2], max_tokens=8)
        return (await c.post("/v1/chat/completions", json=req)).json()

    doc = run(go)
    choice = doc["choices"][0]
    assert choice["finish_reason"] == "length" and not choice["message"].get("tool_calls")
    assert 0 < len(choice["message"]["reasoning_content"].split()) <= 8
    assert doc["usage"]["completion_tokens"] <= 8


def test_temperature_zero_disables_default_failures_but_not_explicit_ones():
    async def go(c):
        outs = []
        for i, tid in enumerate(VAL[:30]):
            req = await first_request(c, tid, model="scripted-noisy", temperature=0, seed=i)
            outs.append((await c.post("/v1/chat/completions", json=req)).json()["choices"][0])
        explicit = await first_request(c, VAL[0], model="scripted-noisy", temperature=0,
                                       scripted_policy={"failure_rates": {"no_tool_call": 1.0}})
        return outs, (await c.post("/v1/chat/completions", json=explicit)).json()["choices"][0]

    outs, explicit = run(go)
    assert all(o["finish_reason"] == "tool_calls" and len(o["message"]["tool_calls"]) == 1 for o in outs)
    assert explicit["finish_reason"] == "stop"


def test_noisy_default_failures_show_up():
    async def go(c):
        reasons = []
        for i in range(40):
            req = await first_request(c, VAL[i % 10], model="scripted-noisy", seed=i, temperature=1.0)
            choice = (await c.post("/v1/chat/completions", json=req)).json()["choices"][0]
            reasons.append(choice["finish_reason"] != "tool_calls" or len(choice["message"]["tool_calls"]) != 1)
        return reasons

    assert 1 <= sum(run(go)) <= 30


def test_skill_phrases_and_placebo_in_effective_params():
    strong = PROFILES["scripted-strong"]
    bare = effective_params(strong, {}, SYSTEM, 1.0)
    assert effective_params(strong, {}, SYSTEM + "\n" + PLACEBO, 1.0) == bare
    skilled, _, skills = effective_params(strong, {}, SYSTEM + "\n" + SKILL, 1.0)
    assert skills == ["select_options"] and skilled["p_select_options"] > 0.95 > bare[0]["p_select_options"]
    priced, _, skills = effective_params(strong, {}, "Always CHECK THE PRICE first.", 1.0)
    assert skills == ["check_price"] and priced["p_check_price"] > bare[0]["p_check_price"]
    ignored, _, skills = effective_params(strong, {"ignore_skills": True}, SKILL, 1.0)
    assert skills == [] and ignored == bare[0]
    greedy, rates, _ = effective_params(strong, {}, SYSTEM, 0.0)
    assert greedy["p_random_click"] == 0.0 and rates == {} and greedy["p_select_options"] in (0.0, 1.0)


def test_the_policy_reads_only_the_request():
    """Fairness: the policy modules import nothing that holds tasks, goals, rewards or sessions."""
    forbidden = {"shopsim_wh.sim.tasks", "shopsim_wh.sim.engine", "shopsim_wh.sim.server", "shopsim_wh.sim.catalog",
                 "shopsim_wh.sim.reward"}
    for mod in (policy_mod, shopper_mod):
        tree = ast.parse(pathlib.Path(mod.__file__).read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not imported & forbidden, mod.__name__


def test_the_policy_is_a_function_of_the_request_alone():
    """Called with no server at all, on a request written by hand, it answers as it does over HTTP."""
    async def go(c):
        return await first_request(c, VAL[5])

    req = run(go)
    direct = policy_mod.chat_completion(req, PolicyConfig())
    over_http = run(lambda c: c.post("/v1/chat/completions", json=req)).json()
    assert direct == over_http
    call = direct["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "search" and json.loads(call["arguments"])["query"]
    # the request holds no goal: nothing private to read even if it wanted to
    text = json.dumps(req, ensure_ascii=False)
    assert TASKS.by_id[VAL[5]].goal.goal_signature not in text and TASKS.by_id[VAL[5]].goal.asin not in text


def test_policy_finds_the_page_after_protocol_feedback_and_without_tools():
    async def go(c):
        doc = await reset(c, VAL[3])
        env = {"env_idx": doc["env_idx"], "lease_id": doc["lease_id"]}
        res = await shop(c, {"action": "interact", **env, "response": "search[towel]"})
        await shop(c, {"action": "release_one", **env})
        feedback = json.dumps({"type": "tool_protocol_error", "code": "tool_call_count"}, ensure_ascii=False)
        messages = opening(doc, SYSTEM) + [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"query": "towel"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": res["observation"]},
            {"role": "user", "content": feedback}]
        with_tools = {"model": "scripted-strong", "seed": 3, "temperature": 0, "messages": messages,
                      "tools": tools_for(res["observation_state"])}
        without_tools = {k: v for k, v in with_tools.items() if k != "tools"}
        outs = [(await c.post("/v1/chat/completions", json=b)).json() for b in (with_tools, without_tools)]
        return res["observation_state"], outs

    state, outs = run(go)
    products = [p["asin"] for p in state["products"]]
    for out in outs:
        value = json.loads(out["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])["value"]
        assert value in products  # a product from the results page, not a navigation button


def test_strong_policy_competence_and_the_select_options_skill():
    """Bare strong is good but imperfect; the 'select every option' skill block measurably raises reward."""
    sample = VAL[:40]
    skills_block = ("[可选策略提示]\n这些提示只提供通用策略；仍需依据当前任务和页面独立核验。\n"
                    f'<skill id="select-options" version="1">\n{SKILL}\n</skill>')

    async def go(c):
        out = {}
        for arm, system in (("bare", SYSTEM), ("skill", SYSTEM + "\n\n" + skills_block)):
            out[arm] = [await play(c, tid, system, seed=s) for tid in sample for s in (0, 1)]
        return out

    out = run(go)
    bare = out["bare"]
    mean = {k: statistics.mean(r["reward"] for r in v) for k, v in out.items()}
    option = {k: statistics.mean(r["reward_detail"]["r_option"] for r in v if r["termination_reason"] == "purchase")
              for k, v in out.items()}
    success = statistics.mean(r["reward_detail"]["r_success"] for r in bare)
    assert all(r["reward"] == r["reward_detail"]["r_strict"] for r in bare)
    assert 0.35 <= mean["bare"] <= 0.8 and 0.2 <= success <= 0.7, (mean, success)
    assert mean["skill"] - mean["bare"] >= 0.1, mean
    assert option["skill"] - option["bare"] >= 0.15, option
    assert sum(r["termination_reason"] == "purchase" for r in bare) >= 0.9 * len(bare)


def test_noisy_is_worse_than_strong_and_policy_is_deterministic():
    sample = VAL[40:60]

    async def go(c):
        strong = [await play(c, tid, SYSTEM) for tid in sample]
        noisy = [await play(c, tid, SYSTEM, model="scripted-noisy", temperature=1.0) for tid in sample]
        again = [await play(c, tid, SYSTEM) for tid in sample[:5]]
        return strong, noisy, again

    strong, noisy, again = run(go)
    loose = {k: statistics.mean(r["reward_detail"]["r_loose"] for r in v) for k, v in (("s", strong), ("n", noisy))}
    assert loose["n"] < loose["s"], loose
    assert [r["reward"] for r in again] == [r["reward"] for r in strong[:5]]
    assert [r["purchase"] for r in again] == [r["purchase"] for r in strong[:5]]


def test_policy_can_be_disabled_and_reconfigured():
    app = create_app(policy=PolicyConfig(enabled=False))
    assert run(lambda c: c.get("/v1/models"), app).status_code == 404
    custom = PolicyConfig(profiles={"mine": policy_mod.profile_with(PROFILES["scripted-strong"], name="mine")},
                          overrides={"failure_rates": {"unknown_tool": 1.0}})

    async def go(c):
        req = await first_request(c, VAL[0], model="mine")
        return (await c.get("/v1/models")).json(), (await c.post("/v1/chat/completions", json=req)).json()

    models, doc = run(go, create_app(policy=custom))
    assert [m["id"] for m in models["data"]] == ["mine"]
    assert doc["choices"][0]["message"]["tool_calls"][0]["function"]["name"] not in {"search", "click"}


def test_latency_knob_waits_without_blocking_other_requests():
    import time

    async def go(c):
        req = await first_request(c, VAL[0], scripted_policy={"latency_ms": 300})
        start = time.perf_counter()
        answers = await asyncio.gather(*(c.post("/v1/chat/completions", json=req) for _ in range(4)))
        return answers, time.perf_counter() - start

    answers, elapsed = run(go)
    assert all(a.status_code == 200 for a in answers)
    assert 0.3 <= elapsed < 1.2  # four 300 ms answers overlap: queued they would take at least 1.2 s
