"""The scripted OpenAI-compatible policy: response shape, failure injection, determinism, skills, fairness."""

from __future__ import annotations

import ast
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
    """The tools a client exposes on a page, as described in docs/sim_protocol.md."""
    tools = []
    if state["search_available"]:
        tools.append({"type": "function", "function": {
            "name": "search", "description": "Search the shop.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}})
    if state["actions"]:
        tools.append({"type": "function", "function": {
            "name": "click", "description": "Click a clickable.",
            "parameters": {"type": "object", "properties": {"value": {"type": "string", "enum": state["actions"]}},
                           "required": ["value"]}}})
    return tools


run = run_in_app


async def first_request(c, task_id: int, system: str = SYSTEM, model: str = "scripted-strong", **extra) -> dict:
    doc = (await c.post("/v1/sessions", json={"task_id": task_id})).json()
    await c.delete(f"/v1/sessions/{doc['lease_id']}")
    user = f"Customer instruction: {doc['task']['instruction']}\n\nCurrent page:\n{doc['observation']}"
    return {"model": model, "seed": 7, "temperature": 0.6, "max_tokens": 4096,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "tools": tools_for(doc["observation_state"]), **extra}


async def play(c, task_id: int, system: str, model: str = "scripted-strong", seed: int = 0,
               temperature: float = 0.6) -> dict:
    """One episode, messages built the way a client builds them; protocol errors get feedback and a retry."""
    doc = (await c.post("/v1/sessions", json={"task_id": task_id})).json()
    lease, state = doc["lease_id"], doc["observation_state"]
    user = f"Customer instruction: {doc['task']['instruction']}\n\nCurrent page:\n{doc['observation']}"
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    final = None
    try:
        for step in range(20):
            body = {"model": model, "messages": messages, "tools": tools_for(state), "seed": seed * 100 + step,
                    "temperature": temperature, "max_tokens": 4096}
            out = (await c.post("/v1/chat/completions", json=body)).json()["choices"][0]
            msg, calls = out["message"], out["message"].get("tool_calls") or []
            messages.append({"role": "assistant", "content": msg["content"], **({"tool_calls": calls} if calls else {})})
            if out["finish_reason"] == "length":
                path = f"/v1/sessions/{lease}/terminate"
                final = (await c.post(path, json={"reason": "generation_length"})).json()
                break
            names = {t["function"]["name"] for t in body["tools"]}
            try:
                ok = len(calls) == 1 and calls[0]["function"]["name"] in names
                args = json.loads(calls[0]["function"]["arguments"]) if ok else None
            except ValueError:
                ok = False
            if not ok:
                if calls:
                    messages += [{"role": "tool", "tool_call_id": x["id"], "content": "protocol error"} for x in calls]
                else:
                    messages.append({"role": "user", "content": "Call exactly one tool."})
                continue
            name = calls[0]["function"]["name"]
            action = f"search[{args['query']}]" if name == "search" else f"click[{args['value']}]"
            res = (await c.post(f"/v1/sessions/{lease}/step", json={"action": action})).json()
            messages.append({"role": "tool", "tool_call_id": calls[0]["id"], "content": res["observation"]})
            state = res["observation_state"]
            if res["done"]:
                final = res
                break
        else:
            final = (await c.post(f"/v1/sessions/{lease}/terminate", json={"reason": "protocol_budget"})).json()
    finally:
        await c.delete(f"/v1/sessions/{lease}")
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
    else:
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
    """Fairness: the policy modules import nothing that holds tasks, goals or sessions."""
    forbidden = {"shopsim_wh.sim.tasks", "shopsim_wh.sim.engine", "shopsim_wh.sim.server", "shopsim_wh.sim.catalog"}
    for mod in (policy_mod, shopper_mod):
        tree = ast.parse(pathlib.Path(mod.__file__).read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not imported & forbidden, mod.__name__


def test_policy_finds_the_page_after_protocol_feedback_and_without_tools():
    async def go(c):
        doc = (await c.post("/v1/sessions", json={"task_id": VAL[3]})).json()
        lease = doc["lease_id"]
        res = (await c.post(f"/v1/sessions/{lease}/step", json={"action": "search[towel]"})).json()
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": doc["observation"]},
                    {"role": "assistant", "content": None, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"query": "towel"}'}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": res["observation"]},
                    {"role": "user", "content": "Your reply contained no tool call. Call exactly one tool."}]
        with_tools = {"model": "scripted-strong", "seed": 3, "temperature": 0, "messages": messages,
                      "tools": tools_for(res["observation_state"])}
        without_tools = {k: v for k, v in with_tools.items() if k != "tools"}
        outs = [(await c.post("/v1/chat/completions", json=b)).json() for b in (with_tools, without_tools)]
        return res["observation_state"]["actions"], outs

    actions, outs = run(go)
    for out in outs:
        value = json.loads(out["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])["value"]
        assert value in actions[2:]  # a product from the results page, not a navigation button


def _success(r: dict) -> bool:
    d = r["reward_detail"]
    return r["termination_reason"] == "purchase" and all((1.0 if v is None else v) == 1.0 for v in d.values())


def test_strong_policy_competence_and_the_select_options_skill():
    """Bare strong is good but imperfect; the 'select every option' skill measurably raises reward."""
    sample = VAL[:40]

    async def go(c):
        out = {}
        for arm, system in (("bare", SYSTEM), ("skill", SYSTEM + "\n" + SKILL)):
            out[arm] = [await play(c, tid, system, seed=s) for tid in sample for s in (0, 1)]
        return out

    out = run(go)
    bare = out["bare"]
    mean = {k: statistics.mean(r["reward"] for r in v) for k, v in out.items()}
    option = {k: statistics.mean(r["reward_detail"]["r_option"] for r in v
                                 if r["termination_reason"] == "purchase" and r["reward_detail"]["r_option"] is not None)
              for k, v in out.items()}
    success = statistics.mean(map(_success, bare))
    assert 0.55 <= mean["bare"] <= 0.9 and 0.1 <= success <= 0.55
    assert mean["skill"] - mean["bare"] >= 0.04, mean
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
    assert statistics.mean(r["reward"] for r in noisy) < statistics.mean(r["reward"] for r in strong)
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
