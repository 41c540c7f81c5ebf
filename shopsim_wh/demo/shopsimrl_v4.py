"""Synthetic ``shopsimrl-episode-v4`` records and run directories, in exactly the shape the ShopSimRL runtime
writes (``shopsimrl/runtime.py`` + ``store.py``; ``slime_runtime.py`` for ``kind="slime"``). Our own fixture
writer: tests and the benchmark use it, nothing is copied from the real repository.

Deterministic from (task_id, sample_id, seed). A record has the real top level (``schema_version``,
zero-padded ``episode_id``, ``job``, ``provenance`` {model, environment, prompt, skills, runtime},
``started_at`` / ``ended_at`` / ``duration_ms``, ``reset``, ``selected_skills``, ``conversation``, ``steps``,
``final``, ``error``); steps carry ``step_index`` (1-based), the observation text the model saw, the tools
built from ``observation_state`` (v7), the model output (``tool_calls`` with call_id / name / arguments /
raw_arguments), the action and the environment's whole answer (lease fields removed, the private ``goal``
still in it, as the real runtime stores it). Observation text is Chinese like the real server's.

``record(task_id, sample_id, RecordSpec(...))`` is one record; ``run_dir(root, name, RunDirSpec(...))`` writes
``runs/<name>/{traces.jsonl, manifest.json, summary.json}`` with failed attempts followed by a successful retry,
protocol-error steps, a generation-length failure, persona and skills.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

SCHEMA = "shopsimrl-episode-v4"
ACTION_PROTOCOL = "openai-function-tools-repair-v3"
OBS_VERSION = "shopping-observation-v7"
ENV_VERSION = "shop-env-2026.04.2"
WORDS = ("红色 蓝色 纯棉 真皮 无线 便携 有机 不锈钢 经典 现代 柔软 保暖 轻便 耐用 防水 修身 舒适 明亮 "
         "大号 小号 复古 高端 实惠 透气 加厚 折叠 多功能 儿童 男士 女士").split()
EN = "red blue cotton leather wireless portable organic steel classic modern soft warm light durable".split()
SYSTEM_PROMPT = ("你是一个购物助手。根据购物任务在商店中搜索、浏览并购买最符合要求的商品。"
                 "每一轮只调用一个提供的函数工具，不要输出可见文本。")
FEEDBACK_INSTRUCTION = "上一轮未执行任何环境动作。请基于同一页面重新作答，只调用一个当前提供的函数工具，不要输出可见文本。"


def canonical_json(value) -> bytes:
    """sha256 input of the real runtime's fingerprints: sorted keys, compact separators, UTF-8."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def fingerprint(value) -> str:
    return hashlib.sha256(canonical_json(value)).hexdigest()


def episode_seed(seed: int, task_id: int, sample_id: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{task_id}:{sample_id}".encode("ascii")).digest()[:4], "big")


def _zh(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(WORDS) for _ in range(n))


def _dumps_py(value, compact: bool) -> str:
    """``json.dumps(value, ensure_ascii=False)`` (slime) or with ``(",", ":")`` separators (runtime)."""
    import json
    return json.dumps(value, ensure_ascii=False, separators=(",", ":") if compact else None)


def tools_for(state: dict) -> list[dict]:
    tools = []
    if state.get("search_available") is True:
        tools.append({"type": "function", "function": {
            "name": "search", "description": "使用关键词搜索商品。仅在当前页面提供此工具时调用。",
            "parameters": {"type": "object", "properties": {"query": {
                "type": "string", "minLength": 1, "description": "用于检索商品的简洁关键词。"}},
                "required": ["query"], "additionalProperties": False}}})
    if state.get("actions"):
        tools.append({"type": "function", "function": {
            "name": "click", "description": "点击当前页面的一个可用按钮、商品或规格选项。",
            "parameters": {"type": "object", "properties": {"value": {
                "type": "string", "enum": list(state["actions"]), "description": "必须逐字选择当前可点击值之一。"}},
                "required": ["value"], "additionalProperties": False}}})
    return tools


def _render(state: dict, rng: random.Random, words: int) -> str:
    page = {"search_home": "搜索首页", "search_results": "搜索结果", "product_detail": "商品详情",
            "terminal": "购物结束"}.get(state["page_type"], "未知页面")
    lines = [f"页面：{page}"]
    if state.get("search_text"):
        lines.append(f"搜索词：{state['search_text']}（第 {state['page']}/{state['total_pages']} 页，"
                     f"共 {state['total_results']} 个结果）")
    for p in state.get("products") or []:
        lines.append(f"[{p['rank']}] {p['asin']} {p['title']} 价格：${p['price']:.2f}")
    if state.get("product"):
        lines.append(f"商品：{state['product']['title']} 价格：${state['product']['price']:.2f}")
        lines.append("说明：" + _zh(rng, words))
    lines.append("可点击元素：" + ("、".join(state["actions"]) if state["actions"] else "无"))
    return "\n".join(lines)


def _home() -> dict:
    return {"observation_version": OBS_VERSION, "page_type": "search_home", "search_available": True, "actions": []}


def _results(rng: random.Random, task_id: int, query: str, last_action: str) -> dict:
    products = [{"asin": f"b{task_id % 10**8:08d}{k:02d}", "title": _zh(rng, 4), "brand": rng.choice(EN),
                 "category": "服装", "price": round(rng.uniform(5, 90), 2),
                 "key_attributes": [_zh(rng, 1), _zh(rng, 1)], "rank": k + 1} for k in range(5)]
    return {"observation_version": OBS_VERSION, "page_type": "search_results", "search_available": False,
            "actions": ["back to search", "next >"] + [p["asin"] for p in products], "last_action": last_action,
            "search_text": query, "normalized_search_text": query.casefold(), "page": 1, "total_pages": 4,
            "total_results": 20, "rank_start": 1, "rank_end": 5, "products": products}


def _product(rng: random.Random, asin: str, selected: dict, last_action: str) -> dict:
    options = {"color": ["red", "blue"], "size": ["small", "large"]}
    missing = [a for a in options if a not in selected]
    actions = ["back to search", "< prev"] + [f"{a}={v}" for a, vs in options.items() for v in vs]
    if not missing:
        actions.append("buy now")
    return {"observation_version": OBS_VERSION, "page_type": "product_detail", "search_available": False,
            "actions": actions, "last_action": last_action,
            "product": {"asin": asin, "title": _zh(rng, 5), "price": round(rng.uniform(5, 90), 2)},
            "selected_options": dict(selected), "available_options": options, "missing_option_axes": missing,
            "options_complete": not missing}


def _terminal(last_action: str) -> dict:
    return {"observation_version": OBS_VERSION, "page_type": "terminal", "search_available": False, "actions": [],
            "last_action": last_action}


def _detail(bought: bool, right: bool, rng: random.Random) -> dict:
    if not bought:
        return {"r_type": 0.0, "r_att": 0.0, "r_option": 0.0, "r_price": 0.0, "r_loose": 0.0, "r_strict": 0.0,
                "r_success": 0, "category_match": False, "title_score": 0.0, "num_attr_matches": 0,
                "num_option_matches": 0, "target_asin_match": False, "price_verifiable": False,
                "price_upper": None, "price_resolution": "no_purchase", "reward_version": "shopsimulator-paper-reward-v2"}
    r_att = 1.0 if right else round(rng.choice([0.0, 0.5]), 2)
    r_opt = 1.0 if right else 0.5
    strict = 1.0 * r_att * r_opt * 1.0
    return {"r_type": 1.0, "r_att": r_att, "r_option": r_opt, "r_price": 1.0,
            "r_loose": round((2 * r_att + 2 * r_opt + 1.0) / 5, 6), "r_strict": strict, "r_success": int(strict == 1.0),
            "category_match": True, "title_score": round(rng.uniform(0.3, 1.0), 4), "num_attr_matches": int(2 * r_att),
            "num_option_matches": int(2 * r_opt), "target_asin_match": right, "price_verifiable": True,
            "price_upper": 90.0, "price_resolution": "within_budget", "reward_version": "shopsimulator-paper-reward-v2"}


@dataclass(frozen=True)
class _Outcome:
    """What an environment answer says of the episode: the step's reward and, once done, how it ended."""

    reward: float | int | None = 0.0
    done: bool = False
    detail: dict | None = None  # reward_detail
    purchase: dict | None = None
    goal: dict | None = None  # the private goal, which the real server still sends
    termination: str | None = None  # termination_reason


def _answer(state: dict, obs: str, action: str, valid: bool, reason: str, session: str,
            outcome: _Outcome = _Outcome()) -> dict:
    o = outcome
    out = {"done": o.done, "reward": o.reward, "observation": obs,
           "message": "Continue interaction" if valid else "Invalid action", "idx": session,
           "reward_detail": o.detail or {}, "purchase": o.purchase or {}, "goal": o.goal or {}, "over": o.done,
           "observation_state": state,
           "action_feedback": {"action": action, "valid": valid, "reason": reason,
                               "message": "已执行" if valid else "该动作在当前页面不可用"}}
    if o.termination is not None:
        out["termination_reason"] = o.termination
    return out


def provenance(*, skills: bool, kind: str = "runtime", checkpoint: str = "ckpt-000100", model: str = "qwen3-8b",
               env_version: str | None = ENV_VERSION, obs_version: str | None = OBS_VERSION) -> dict:
    env = {"adapter": "shopsimulator_http", "base_url": "http://127.0.0.1:5700", "persona": True,
           "interaction_mode": "single_turn", "environment_version": env_version, "observation_version": obs_version}
    prompt = {"prompt_version": "shopsimrl-shopping-prompt-v3",
              "system_prompt_sha256": hashlib.sha256(SYSTEM_PROMPT.encode()).hexdigest(),
              "skill_renderer_version": "shopsimrl-skill-renderer-v1"}
    if kind == "slime":
        return {"environment": env, "prompt": prompt,
                "skills": {"curriculum_state_id": "a" * 64,
                           "assignment": {"state_id": "a" * 64, "group_key": "7", "mode": "masked",
                                          "skill_ids": ["skill-price-check"]},
                           "diagnostic_full_skill": False},
                "runtime": {"adapter": "shopsimrl-slime-agent-runtime-v2", "action_protocol": ACTION_PROTOCOL,
                            "max_steps": 30}}
    return {"model": {"provider": "openai_compatible", "model": model, "base_url": "http://127.0.0.1:8000/v1",
                      "checkpoint_id": checkpoint,
                      "transport": {"timeout": 120.0, "max_retries": 2, "retry_backoff_seconds": 2.0,
                                    "trust_env": False, "stream": False},
                      "sampling": {"temperature": 0.7, "max_tokens": 2048, "top_p": 0.95, "send_seed": False,
                                   "tool_choice": "auto", "extra_body": {}}},
            "environment": env, "prompt": prompt,
            "skills": ({"provider": "json_skill_bank", "path": "skills/bank.v1.json", "sha256": "b" * 64,
                        "max_skills": 2} if skills else {"provider": "none"}),
            "runtime": {"max_steps": 30, "action_protocol": ACTION_PROTOCOL}}


SKILLS = [("skill-price-check", "购买前确认价格不超过预算。"), ("skill-options-first", "先选齐所有规格再点击 buy now。")]


def _skills() -> list[dict]:
    return [{"skill_id": sid, "content": text, "version": "1", "metadata": {"source": "trace2skill", "round": 1},
             "content_sha256": fingerprint(text)} for sid, text in SKILLS]


def _system(persona: dict | None, skills: list[dict]) -> str:
    parts = [SYSTEM_PROMPT]
    if persona is not None:
        parts.append("用户个人文档：\n" + orjson.dumps(persona, option=orjson.OPT_SORT_KEYS).decode())
    if skills:
        parts.append("[可选策略提示]\n" + "\n".join(
            f'<skill id="{s["skill_id"]}" version="{s["version"]}">\n{s["content"]}\n</skill>' for s in skills))
    return "\n\n".join(parts)


def _ts(base: datetime, ms: float) -> str:
    return (base + timedelta(milliseconds=ms)).isoformat()


@dataclass(frozen=True)
class RecordSpec:
    """What one synthetic record looks like: its size, its variant and how its episode goes (see :func:`record`).

    ``status="failed"`` stops part-way with an error (``fail_stage``: ``environment`` or ``reset``);
    ``protocol_error_at`` makes that step (1-based) a protocol error; ``length_failure`` ends the episode with a
    ``generation_length`` policy failure; ``action_limit`` runs out of steps (terminate); ``kind="slime"`` writes
    the training variant (``group``: its group number); ``goal_in_reset`` puts a private goal into the reset answer
    (what the runtime never does: the reader must drop it)."""

    steps: int = 15
    obs_words: int = 180
    think_words: int = 120
    status: str = "completed"
    seed: int = 0
    goal_in_reset: bool = False
    kind: str = "runtime"
    protocol_error_at: int | None = None
    length_failure: bool = False
    action_limit: bool = False
    persona: bool = True
    skills: bool = True
    fail_stage: str = "environment"
    split: str = "train"
    group: int = 0


def record(task_id: int, sample_id: int = 0, spec: RecordSpec | None = None) -> dict:
    """One record of job (``task_id``, ``sample_id``), shaped by ``spec`` (default ``RecordSpec()``)."""
    sp = spec or RecordSpec()
    steps, obs_words, think_words, seed, split = sp.steps, sp.obs_words, sp.think_words, sp.seed, sp.split
    status, fail_stage, protocol_error_at = sp.status, sp.fail_stage, sp.protocol_error_at
    length_failure, action_limit, persona, skills = sp.length_failure, sp.action_limit, sp.persona, sp.skills
    kind, group = sp.kind, sp.group
    rng = random.Random((task_id * 1_000_003 + sample_id * 7919 + seed) & 0xFFFFFFFF)
    slime = kind == "slime"
    job_seed = seed if slime else episode_seed(seed, task_id, sample_id)
    eid = (f"train-group-{group:09d}-sample-{sample_id:09d}" if slime
           else f"task-{task_id:06d}__sample-{sample_id:03d}")
    base = datetime(2026, 5, 1, 10, 0, 0, tzinfo=UTC) + timedelta(seconds=task_id * 61 + sample_id * 7)
    clock = rng.uniform(1, 50)
    instruction = f"我想买一件{_zh(rng, 3)}的衣服，价格低于 {rng.randint(20, 90)} 美元"
    user_persona = {"age": rng.randint(18, 70), "budget": "中等", "style": _zh(rng, 2)} if persona else None
    state = _home()
    obs0 = _render(state, rng, obs_words)
    reset = {"task_instruction": instruction, "observation": obs0, "message": "Reset successfully",
             "idx": task_id, "task_mode": "persona" if persona else "standard", "interaction_mode": "single_turn",
             "environment_version": ENV_VERSION, "observation_state": state}
    if persona:
        reset["user_persona"] = user_persona
    if sp.goal_in_reset:
        reset["goal"] = {"asin": "B000SECRET", "attributes": ["secret"]}
        reset["private_task_instruction"] = "SECRET private instruction"
    sel = _skills() if skills else []
    first_user = f"购物任务：\n{instruction}\n\n{obs0}"
    conv = [{"role": "system", "content": _system(user_persona, sel)}, {"role": "user", "content": first_user}]
    goal_asin = f"b{task_id % 10**8:08d}{rng.randint(0, 4):02d}"
    goal = {"asin": goal_asin, "instruction_text": "SECRET " + instruction, "attributes": ["纯棉"],
            "goal_options": {"color": "red", "size": "large"}, "price_upper": 90.0}
    session = f"slot-{rng.randint(0, 7)}-{rng.randint(1000, 9999)}"
    n = max(2, steps)
    fail_at = max(2, n // 2) if status == "failed" else None
    out_steps: list[dict] = []
    observation = page_text = first_user
    page_text = obs0
    final = error = None
    prompt_tokens = 900
    selected: dict = {}
    asin = None
    reset_failed = status == "failed" and fail_stage == "reset"
    for k in range(1, n + 1):
        if reset_failed:
            break
        tools = tools_for(state)
        clock += rng.uniform(200, 3000)
        reasoning = _zh(rng, think_words // 4 + 1)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 120 + k,
                 "total_tokens": prompt_tokens + 120 + k, "completion_tokens_details": {"reasoning_tokens": 90 + k}}
        prompt_tokens += 350
        call_id = f"call_{task_id}_{sample_id}_{k}"
        if length_failure and k == min(n, 3) and status == "completed":
            model = _model(slime, _Reply(reasoning, [], "length", policy_failure={"code": "generation_length"}),
                           usage, rng)
            out_steps.append({"step_index": k, "observation": observation, "tools": tools, "model": model,
                              "policy_failure": {"code": "generation_length"}, "action": None, "environment": None})
            final = _answer(state, page_text, "terminate[generation_length]", True, "executed", session, _Outcome(
                0.0, done=True, detail=_detail(False, False, rng), goal=goal, termination="generation_length"))
            del final["action_feedback"]
            break
        if protocol_error_at == k:
            bad_calls = [_call(call_id + "a", "click", {"value": "buy now"}), _call(call_id + "b", "search", {"query": "衣服"})]
            pe = {"code": "tool_call_count", "message": "model must return exactly one tool call, got 2"}
            model = _model(slime, _Reply(reasoning, bad_calls, "tool_calls", protocol_error=pe), usage, rng)
            fb = {"type": "tool_protocol_error", "code": pe["code"], "message": pe["message"],
                  "instruction": FEEDBACK_INSTRUCTION, "available_tools": [t["function"]["name"] for t in tools]}
            text = _dumps_py(fb, compact=not slime)
            conv.append({"role": "assistant", "content": None, "tool_calls": [_wire(c) for c in bad_calls]})
            conv.extend({"role": "tool", "tool_call_id": c["call_id"], "content": text} for c in bad_calls)
            out_steps.append({"step_index": k, "observation": observation, "tools": tools, "model": model,
                              "protocol_error": pe, "protocol_feedback": fb, "action": None, "environment": None})
            continue
        # choose an action from the page
        page = state["page_type"]
        valid = True
        if page == "search_home":
            name, args = "search", {"query": _zh(rng, 2)}
        elif page == "search_results":
            pick = goal_asin if rng.random() < 0.6 else state["products"][rng.randint(0, 4)]["asin"]
            name, args = "click", {"value": pick}
        elif state["missing_option_axes"]:
            axis = state["missing_option_axes"][0]
            name, args = "click", {"value": f"{axis}={state['available_options'][axis][rng.randint(0, 1)]}"}
        elif k < n - 4 and rng.random() < 0.3:
            name, args, valid = "click", {"value": "< prev"}, False  # the server rejects it: reward 0 (int)
        elif k < n - 4 or action_limit:
            name, args = "click", {"value": "back to search"}
        else:
            name, args = "click", {"value": "buy now"}
        call = _call(call_id, name, args)
        action = f"{name}[{args['query' if name == 'search' else 'value']}]"
        model = _model(slime, _Reply(reasoning, [call], "tool_calls"), usage, rng)
        conv.append({"role": "assistant", "content": None, "tool_calls": [_wire(call)]})
        if status == "failed" and k == fail_at:
            error = {"stage": f"environment_step_{k}", "type": "ShopSimulatorError",
                     "message": "ShopSimulator HTTP 409: lease is stale or invalid",
                     "traceback": 'Traceback (most recent call last):\n  File "shopsimrl/runtime.py", line 300, in run\n'
                                  "shopsimrl.environment.ShopSimulatorError: ShopSimulator HTTP 409: lease is stale"}
            break
        done = False
        if not valid:
            new_state, reward, reason = state, 0, "unavailable_action"
        elif name == "search":
            new_state, reward, reason = _results(rng, task_id, args["query"], action), 0.0, "executed"
        elif args["value"] == "buy now":
            asin = state["product"]["asin"]
            new_state, reward, reason, done = _terminal(action), None, "executed", True
        elif args["value"] == "back to search":
            new_state, reward, reason = _home() | {"last_action": action}, 0.0, "executed"
            selected = {}
        elif "=" in args["value"]:
            axis, v = args["value"].split("=", 1)
            selected[axis] = v
            new_state, reward, reason = _product(rng, state["product"]["asin"], selected, action), 0.0, "executed"
        else:
            selected = {}
            new_state, reward, reason = _product(rng, args["value"], selected, action), 0.0, "executed"
        obs = _render(new_state, rng, obs_words)
        if done:
            right = asin == goal_asin
            detail = _detail(True, right, rng)
            env = _answer(new_state, obs, action, True, reason, session, _Outcome(
                detail["r_strict"], done=True, detail=detail,
                purchase={"asin": asin, "options": dict(selected), "price": 42.5}, goal=goal, termination="purchase"))
        else:
            env = _answer(new_state, obs, action, valid, reason, session, _Outcome(reward))
        conv.append({"role": "tool", "tool_call_id": call_id, "content": obs})
        out_steps.append({"step_index": k, "observation": observation, "tools": tools, "model": model,
                          "action": action, "environment": env})
        if done:
            final = env
            break
        observation, state, page_text = obs, new_state, obs
    if status == "completed" and final is None:  # out of steps: the runtime terminates with action_limit
        final = _answer(state, page_text, "terminate[action_limit]", True, "executed", session, _Outcome(
            0.0, done=True, detail=_detail(False, False, rng), goal=goal, termination="action_limit"))
        del final["action_feedback"]
    if reset_failed:
        error = {"stage": "reset", "type": "ShopSimulatorError",
                 "message": "ShopSimulator request failed: connection refused",
                 "traceback": "Traceback (most recent call last):\nshopsimrl.environment.ShopSimulatorError: refused"}
        conv, sel = [], []
    rec = {"schema_version": SCHEMA, "episode_id": eid, "status": "completed" if error is None else "failed",
           "job": {"task_id": task_id, "sample_id": sample_id, "seed": job_seed, "split": "train" if slime else split},
           "provenance": provenance(skills=skills, kind=kind,
                                    env_version=None if reset_failed else ENV_VERSION,
                                    obs_version=None if reset_failed else OBS_VERSION),
           "started_at": _ts(base, 0), "ended_at": _ts(base, clock + 15.0)}
    if not slime:
        rec["duration_ms"] = clock + 14.25
    rec.update({"reset": None if reset_failed else reset, "selected_skills": sel, "conversation": conv,
                "steps": out_steps, "final": final if error is None else None, "error": error})
    return rec


def _call(call_id: str, name: str, args: dict) -> dict:
    raw = orjson.dumps(args).decode()
    return {"call_id": call_id, "name": name, "arguments": args, "raw_arguments": raw}


def _wire(call: dict) -> dict:
    return {"id": call["call_id"], "type": "function", "function": {"name": call["name"], "arguments": call["raw_arguments"]}}


@dataclass(frozen=True)
class _Reply:
    """What the model answered on one step, before :func:`_model` puts it in the runtime's (or slime's) shape."""

    reasoning: str
    calls: list[dict]
    finish: str  # finish_reason
    content: str | None = None
    protocol_error: dict | None = None
    policy_failure: dict | None = None


def _model(slime: bool, reply: _Reply, usage: dict, rng: random.Random) -> dict:
    content, reasoning, calls, finish = reply.content, reply.reasoning, reply.calls, reply.finish
    protocol_error, policy_failure = reply.protocol_error, reply.policy_failure
    if slime:
        out = {"content": content, "reasoning": reasoning, "tool_calls": calls, "finish_reason": finish,
               "raw_output": f"<think>{reasoning}</think>", "protocol_error": protocol_error}
        if policy_failure is not None:
            out = {"content": content, "reasoning": reasoning, "finish_reason": "length",
                   "raw_output": f"<think>{reasoning}", "policy_failure": policy_failure}
        return out
    return {"content": content, "reasoning": reasoning, "tool_calls": calls, "finish_reason": finish, "usage": usage,
            "response_id": f"chatcmpl-{rng.getrandbits(48):012x}", "metadata": {"model": "qwen3-8b", "attempts": 1},
            "latency_ms": round(rng.uniform(300, 3000), 3), "protocol_error": protocol_error,
            "policy_failure": policy_failure,
            "raw_response": {"choices": [{"finish_reason": "length"}]} if policy_failure else None}


def line(rec: dict) -> bytes:
    """One traces.jsonl line as the real store writes it (``json.dumps(ensure_ascii=False)`` + newline)."""
    import json
    return (json.dumps(rec, ensure_ascii=False, allow_nan=False) + "\n").encode()


def write_file(path, n_episodes: int, *, steps: int = 15, obs_words: int = 180, think_words: int = 120,
               retry_every: int = 0, task_base: int = 1000) -> int:
    """Write ``n_episodes`` records (plus a failed attempt before every ``retry_every``-th); returns bytes."""
    size = 0
    base = RecordSpec(steps=steps, obs_words=obs_words, think_words=think_words)
    with open(path, "wb") as f:
        for t in range(n_episodes):
            tid = task_base + t
            if retry_every and t % retry_every == 0:
                b = line(record(tid, spec=replace(base, status="failed")))
                f.write(b)
                size += len(b)
            b = line(record(tid, spec=replace(base, protocol_error_at=3 if t % 7 == 0 else None,
                                              length_failure=t % 11 == 5)))
            f.write(b)
            size += len(b)
    return size


def manifest(name: str, jobs: list[dict], prov: dict, *, created_at: str = "2026-05-01T09:59:00+00:00",
             concurrency: int = 4) -> dict:
    task_ids = sorted({j["task_id"] for j in jobs})
    plan = {"pipeline_version": "shopsimrl-v0.4", "experiment": name, "model_id": "qwen3-8b-sft",
            "model": dict(prov["model"]),
            "task_split": {"name": jobs[0]["split"] if jobs else "val", "task_count": len(task_ids),
                           "task_ids_sha256": fingerprint(task_ids), "persona": True,
                           "split_file": "data/persona_splits.v1.json"},
            "jobs": jobs,
            "environment": {k: prov["environment"][k] for k in ("adapter", "base_url", "persona", "interaction_mode")},
            "runtime": {"max_steps": 30, "concurrency": concurrency, "action_protocol": ACTION_PROTOCOL},
            "prompt": prov["prompt"], "skills": prov["skills"]}
    return {"schema_version": "shopsimrl-run-manifest-v1", "created_at": created_at,
            "plan_fingerprint": fingerprint(plan), "plan": plan}


@dataclass(frozen=True)
class RunDirSpec:
    """The shape of one synthetic run directory (:func:`run_dir`): its jobs and the size of its records."""

    n_tasks: int = 6
    repeats: int = 1  # samples per task
    steps: int = 8
    obs_words: int = 40
    think_words: int = 30
    skills: bool = True  # False: a bare run
    seed: int = 20260501
    split: str = "val"

    def record_spec(self) -> RecordSpec:
        """The :class:`RecordSpec` its records share (before their job mix)."""
        return RecordSpec(steps=self.steps, obs_words=self.obs_words, think_words=self.think_words, seed=self.seed,
                          skills=self.skills, split=self.split)


def run_dir(root, name: str = "val-qwen3-8b", spec: RunDirSpec | None = None) -> Path:
    """``root/<name>/{traces.jsonl, manifest.json, summary.json}``: one realistic run (``spec``: default
    ``RunDirSpec()``).

    Job mix (by task position): a protocol-error step, a generation-length failure, an action-limit
    termination, two failed attempts followed by a successful retry, a reset failure followed by a retry,
    persona and skills on every episode (``skills=False``: a bare run)."""
    from ..ingest.dump_v4 import summarize  # our own summarize (shopsimrl-eval-summary-v2 semantics)
    spec = spec or RunDirSpec()
    n_tasks, repeats, skills, seed, split = spec.n_tasks, spec.repeats, spec.skills, spec.seed, spec.split
    d = Path(root) / name
    d.mkdir(parents=True, exist_ok=True)
    task_ids = [100 + 37 * i for i in range(n_tasks)]
    jobs = [{"task_id": t, "sample_id": s, "seed": episode_seed(seed, t, s), "split": split}
            for t in task_ids for s in range(repeats)]
    recs = []
    base = spec.record_spec()
    for i, j in enumerate(jobs):
        t, s = j["task_id"], j["sample_id"]
        mode = i % 6
        if mode == 3:  # two failed attempts, then the retry that completes
            recs.append(record(t, s, replace(base, status="failed")))
            recs.append(record(t, s, replace(base, status="failed", fail_stage="reset")))
        if mode == 5:
            recs.append(record(t, s, replace(base, status="failed", fail_stage="reset")))
        recs.append(record(t, s, replace(base, protocol_error_at=2 if mode in (0, 3) else None,
                                         length_failure=mode == 1, action_limit=mode == 2)))
    order = range(len(recs))  # a failed attempt is appended before its retry
    with open(d / "traces.jsonl", "wb") as f:
        for i in order:
            f.write(line(recs[i]))
    prov = provenance(skills=skills)
    man = manifest(name, jobs, prov)
    (d / "manifest.json").write_bytes(orjson.dumps(man, option=orjson.OPT_INDENT_2))
    latest = {}
    for i in order:
        latest[recs[i]["episode_id"]] = recs[i]
    summary = summarize([latest[k] for k in sorted(latest)], requested=len(jobs), created_at="2026-05-01T12:00:00+00:00")
    (d / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    return d
