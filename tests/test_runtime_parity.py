"""Runtime parity with ShopSimRL's action protocol ``openai-function-tools-repair-v3``.

A recorded sequence of model answers (the scripted policy's, recorded once, with protocol errors and a length
failure spliced in) is replayed through the runtime against the embedded shop_env server. The conversation the
model is sent at every turn, the tools it is offered, the seeds and the environment requests are rebuilt here
independently from the documented rules (docs/conventions.md, "The agent protocol") and must be exactly equal.
"""

from __future__ import annotations

import asyncio
import copy
import json

import httpx

from shopsim_wh.rollout.environment import ShopEnvAdapter
from shopsim_wh.rollout.jobs import EpisodeJob
from shopsim_wh.rollout.model import ChatModel, ChatOptions
from shopsim_wh.rollout.prompts import DEFAULT_SYSTEM, SKILLS_NOTE, PromptBuilder
from shopsim_wh.rollout.runtime import FEEDBACK_INSTRUCTION, AgentRuntime
from shopsim_wh.rollout.skills import NoSkills, SkillBank
from shopsim_wh.sim.policy import FAILURE_KINDS
from shopsim_wh.sim.server import create_app
from shopsim_wh.sim.tasks import default_task_ids

from .conftest import read_body
from .helpers import Tap

TASKS = default_task_ids("val")
CHAT = "/v1/chat/completions"
SHOP = "/api/shop_agent"


class Replay:
    """An OpenAI-compatible server that answers the n-th request with the n-th recorded answer."""

    def __init__(self, answers):
        self.answers, self.requests = list(answers), []

    async def __call__(self, scope, receive, send):
        self.requests.append(json.loads(await read_body(receive)))
        body = json.dumps(self.answers.pop(0)).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


def _run(env_app, model_app, job, skills=None, max_steps=30):
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=env_app), base_url="http://env") as env_c, \
                httpx.AsyncClient(transport=httpx.ASGITransport(app=model_app), base_url="http://model/v1") as model_c:
            model = ChatModel(model_c, "scripted-strong", ChatOptions(
                temperature=0.0, send_seed=True, max_tokens=4096,
                extra_body={"scripted_policy": {"failure_rates": dict.fromkeys(FAILURE_KINDS, 0.0)}}))
            rt = AgentRuntime(model, ShopEnvAdapter(env_c), PromptBuilder(), skills or NoSkills(), max_steps=max_steps)
            return await rt.run(job)
    return asyncio.run(go())


def _recorded_answers(task_id: int) -> list[dict]:
    """The scripted policy's answers for one clean episode (the 'recording')."""
    tap = Tap(create_app(seed=0, capacity=2))
    rec = _run(tap, tap, EpisodeJob(task_id, 0, 11, "val"))
    assert rec.completed and rec.episode["termination_reason"] == "purchase", rec.episode
    return [ans for _, _, ans in tap.on(CHAT)]


def _answer(content=None, calls=(), finish="tool_calls", reasoning=None, rid="r"):
    msg = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = [{"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                             for cid, name, args in calls]
    if reasoning:
        msg["reasoning_content"] = reasoning
    return {"id": rid, "object": "chat.completion", "model": "m", "usage": {"prompt_tokens": 5, "completion_tokens": 2},
            "choices": [{"index": 0, "finish_reason": finish, "message": msg}]}


# ---- the documented rules, written out independently of shopsim_wh.rollout.runtime / shopsim_wh.rollout.prompts ------------------
def rule_tools(state: dict) -> list[dict]:
    tools = []
    if state.get("search_available") is True:
        tools.append({"type": "function", "function": {
            "name": "search", "description": "使用关键词搜索商品。仅在当前页面提供此工具时调用。",
            "parameters": {"type": "object", "properties": {"query": {
                "type": "string", "minLength": 1, "description": "用于检索商品的简洁关键词。"}},
                "required": ["query"], "additionalProperties": False}}})
    if state["actions"]:
        tools.append({"type": "function", "function": {
            "name": "click", "description": "点击当前页面的一个可用按钮、商品或规格选项。",
            "parameters": {"type": "object", "properties": {"value": {
                "type": "string", "enum": state["actions"], "description": "必须逐字选择当前可点击值之一。"}},
                "required": ["value"], "additionalProperties": False}}})
    return tools


def rule_system(reset: dict, skills: list[dict]) -> str:
    sections = [DEFAULT_SYSTEM.rstrip()]
    if reset.get("user_persona"):
        sections.append("用户个人文档：\n" + json.dumps(reset["user_persona"], ensure_ascii=False, sort_keys=True))
    if skills:
        block = ["[可选策略提示]", SKILLS_NOTE]
        for s in skills:
            block += [f'<skill id="{s["id"]}" version="{s["version"]}">', s["content"].strip(), "</skill>"]
        sections.append("\n".join(block))
    return "\n\n".join(sections)


def rule_verdict(answer: dict, tools: list[dict]) -> tuple[str | None, str | None, list[dict]]:
    """(protocol code or 'generation_length', environment action, the calls that parsed) by the documented order."""
    choice = answer["choices"][0]
    msg, names, parsed = choice["message"], {t["function"]["name"] for t in tools}, []
    for call in msg.get("tool_calls") or []:
        try:
            args = json.loads(call["function"]["arguments"])
        except json.JSONDecodeError:
            return "invalid_arguments_json", None, parsed
        parsed.append(call)
        if call["function"]["name"] not in names:
            return "unavailable_tool", None, parsed
    text = (msg.get("content") or "").strip()
    if choice["finish_reason"] == "length" and len(parsed) != 1:
        return "generation_length", None, parsed
    if len(parsed) != 1:
        return "tool_call_count", None, parsed
    if text:
        return "mixed_content", None, parsed
    name, args = parsed[0]["function"]["name"], json.loads(parsed[0]["function"]["arguments"])
    key = {"search": "query", "click": "value"}[name]
    if set(args) != {key} or not str(args[key]).strip():
        return "invalid_tool_arguments", None, parsed
    return None, f"{name}[{args[key].strip()}]", parsed


def expected_run(answers, env_answers, reset, skills, seed, max_steps):
    """Every request (messages, tools, seed) and the final conversation, from the rules alone."""
    conv = [{"role": "system", "content": rule_system(reset, skills)},
            {"role": "user", "content": f"购物任务：\n{reset['task_instruction']}\n\n{reset['observation']}"}]
    state, env_iter, requests, outcome = reset["observation_state"], iter(env_answers), [], ("action_limit", None)
    for turn, answer in enumerate(answers[:max_steps]):
        tools = rule_tools(state)
        requests.append({"messages": copy.deepcopy(conv), "tools": tools, "seed": seed + turn})
        code, action, parsed = rule_verdict(answer, tools)
        msg = answer["choices"][0]["message"]
        assistant = {"role": "assistant", "content": msg.get("content")}
        if parsed:
            assistant["tool_calls"] = [{"id": c["id"], "type": "function", "function": dict(c["function"])} for c in parsed]
        if code == "generation_length":
            outcome = ("generation_length", turn)
            break
        if code is not None:
            feedback = {"type": "tool_protocol_error", "code": code, "message": "<any>", "instruction": FEEDBACK_INSTRUCTION,
                        "available_tools": [t["function"]["name"] for t in tools]}
            if parsed:
                conv.append(assistant)
                conv += [{"role": "tool", "tool_call_id": c["id"], "content": feedback} for c in parsed]
            else:
                if (msg.get("content") or "").strip():
                    conv.append({"role": "assistant", "content": msg["content"]})
                conv.append({"role": "user", "content": feedback})
            continue
        env = next(env_iter)
        assert env["request"]["response"] == action  # the environment got the action the rules derive
        conv.append(assistant)
        conv.append({"role": "tool", "tool_call_id": parsed[0]["id"], "content": env["answer"]["observation"]})
        if env["answer"]["done"]:
            outcome = ("purchase", turn)
            break
        state = env["answer"]["observation_state"]
    return requests, conv, outcome


def _feedback_free(messages):
    """Messages with each protocol-feedback JSON parsed, its free-text message replaced (codes stay)."""
    out = []
    for m in messages:
        m = dict(m)
        if m["role"] in ("tool", "user") and isinstance(m.get("content"), str) and m["content"].startswith('{"type":"tool_protocol_error"'):
            fb = json.loads(m["content"])
            # the wire form is compact JSON, keys in this order, non-ASCII kept
            assert list(fb) == ["type", "code", "message", "instruction", "available_tools"]
            assert m["content"] == json.dumps(fb, ensure_ascii=False, separators=(",", ":"))
            assert isinstance(fb["message"], str) and fb["message"]
            m["content"] = {**fb, "message": "<any>"}
        out.append(m)
    return out


def _check(tap: Tap, replay: Replay, answers, rec, job, skills, max_steps):
    shop = tap.on(SHOP)
    reset_req, _, reset_ans = shop[0]
    reset = reset_ans["result"]
    assert reset_req == {"action": "reset", "idx": job.task_id, "if_persona": False, "include_private_goal": False,
                         "interaction_mode": "single_turn"}
    env_answers = [{"request": req, "answer": ans["result"]} for req, _, ans in shop[1:] if req["action"] == "interact"]
    # the persona is rendered only when the run asked for one (shop_env sends it whatever if_persona says)
    shown = reset if reset_req["if_persona"] else {**reset, "user_persona": None}
    requests, conv, (reason, last_turn) = expected_run(answers, env_answers, shown, skills, job.seed, max_steps)
    assert len(replay.requests) == len(requests)
    for got, want in zip(replay.requests, requests, strict=True):
        assert _feedback_free(got["messages"]) == want["messages"]
        assert got["tools"] == want["tools"] and got["seed"] == want["seed"] and got["tool_choice"] == "auto"
    assert _feedback_free([{k: v for k, v in m.items() if v is not None or k == "content"}
                           for m in ({"role": r["role"], "content": r["content"],
                                      "tool_calls": json.loads(r["tool_calls"]) if r["tool_calls"] else None,
                                      "tool_call_id": r["tool_call_id"]} for r in rec.messages)]) == conv
    tail = [req for req, _, _ in shop[1:] if req["action"] != "interact"]
    lease = {"env_idx": reset["env_idx"], "lease_id": reset["lease_id"]}
    if reason == "purchase":
        assert tail == [{"action": "release_one", **lease}]
    else:
        assert tail == [{"action": "terminate", **lease, "termination_reason": reason}, {"action": "release_one", **lease}]
    assert rec.completed and rec.episode["termination_reason"] == reason
    assert rec.episode["model_steps"] == len(requests)
    return requests


def test_recorded_answers_with_protocol_errors_replay_to_the_documented_conversation(tmp_path):
    task = TASKS[0]
    clean = _recorded_answers(task)
    search, product_click, rest = clean[0], clean[1], clean[2:]
    # one pass through the server to learn the product page's clickables for the spliced-in answers
    probe = Tap(create_app(seed=0, capacity=2))
    _run(probe, Replay([search, product_click, _answer("stop here", finish="stop")]), EpisodeJob(task, 0, 5, "val"),
         max_steps=3)
    page = [ans["result"] for req, _, ans in probe.on(SHOP) if req["action"] == "interact"][-1]["observation_state"]
    a, b = page["actions"][0], page["actions"][-1]
    answers = [
        search,
        _answer("I think I should open the first result.", finish="stop"),             # text, no call
        _answer(None, [("c-bad", "click", '{"value": ')]),                               # invalid_arguments_json
        _answer(None, finish="stop"),                                                     # empty: no call, no text
        product_click,
        _answer("Clicking it.", [("c-mix", "click", json.dumps({"value": a}))]),         # mixed_content
        _answer(None, [("c-x", "click", json.dumps({"value": a, "why": "x"}))]),         # invalid_tool_arguments
        _answer(None, [("c-1", "click", json.dumps({"value": a})), ("c-2", "click", json.dumps({"value": b}))]),
        _answer(None, [("c-s", "lookup", '{"q": "x"}')]),                                # unavailable_tool
        *rest,
    ]
    bank = tmp_path / "bank.json"
    skills = [{"id": "opt-1", "version": "2", "content": "  Select every option before buying.\n"}]
    bank.write_text(json.dumps({"version": "b", "skills": skills}))
    tap, replay = Tap(create_app(seed=0, capacity=2)), Replay(answers)
    job = EpisodeJob(task, 0, 1000, "val")
    rec = _run(tap, replay, job, skills=SkillBank(str(bank)))
    requests = _check(tap, replay, answers, rec, job, skills, 30)
    codes = [s.get("protocol_error") for s in rec.steps]
    assert codes[:9] == [None, "tool_call_count", "invalid_arguments_json", "tool_call_count", None, "mixed_content",
                         "invalid_tool_arguments", "tool_call_count", "unavailable_tool"]
    assert rec.episode["protocol_errors"] == 7 and len(requests) == len(answers)
    assert [s["step_seed"] for s in rec.steps] == [1000 + i for i in range(len(answers))]


def test_a_length_failure_terminates_with_generation_length(tmp_path):
    task = TASKS[1]
    clean = _recorded_answers(task)
    answers = [clean[0], _answer(None, finish="length", reasoning="let me think " * 200)]
    tap, replay = Tap(create_app(seed=0, capacity=2)), Replay(answers)
    job = EpisodeJob(task, 1, 77, "val")
    rec = _run(tap, replay, job)
    _check(tap, replay, answers, rec, job, [], 30)
    assert rec.steps[-1]["policy_failure"] == "generation_length" and rec.episode["reward"] == 0.0
    assert rec.actions[-1]["action"] == "terminate[generation_length]"
    # nothing of the truncated turn enters the conversation: it ends with the last observation
    assert rec.messages[-1]["role"] == "tool"


def test_max_steps_turns_then_action_limit():
    task = TASKS[2]
    clean = _recorded_answers(task)
    answers = [clean[0], _answer("thinking aloud", finish="stop"), clean[1]]
    tap, replay = Tap(create_app(seed=0, capacity=2)), Replay(answers)
    job = EpisodeJob(task, 0, 3, "val")
    rec = _run(tap, replay, job, max_steps=2)
    _check(tap, replay, answers, rec, job, [], 2)
    assert rec.episode["model_steps"] == 2 and rec.episode["termination_reason"] == "action_limit"
