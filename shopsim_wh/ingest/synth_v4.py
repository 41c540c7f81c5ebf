"""Synthetic ``shopsimrl-episode-v4`` records (tests, benchmark); deterministic from a seed.

Realistic shape: ~``steps`` steps per episode, KB-sized observations and reasoning, dynamic tools
(``search`` when available, ``click`` with the page's clickables as an enum), a conversation that
mirrors the steps, skills, and a final block with reward detail and the private goal.
"""

from __future__ import annotations

import random

import orjson

WORDS = ("red blue green large small cotton leather wireless portable organic steel classic modern soft "
         "warm light heavy compact premium budget vintage durable waterproof slim stretch cozy bright").split()


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def _tools(search: bool, clickables: list[str]) -> list[dict]:
    out = []
    if search:
        out.append({"type": "function", "function": {
            "name": "search", "description": "Search the shop. Use concise keywords from the instruction.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}})
    out.append({"type": "function", "function": {
        "name": "click", "description": "Click one of the clickable values on the current page.",
        "parameters": {"type": "object", "properties": {"value": {"type": "string", "enum": clickables}},
                       "required": ["value"]}}})
    return out


def record(task_id: int, sample_id: int = 0, *, steps: int = 15, obs_words: int = 180, think_words: int = 120,
           status: str = "completed", seed: int = 0, goal_in_reset: bool = False) -> dict:
    rng = random.Random(hash((task_id, sample_id, seed)) & 0xFFFFFFFF)
    eid = f"task-{task_id}__sample-{sample_id}"
    instruction = f"Find a {_text(rng, 6)} under {rng.randint(20, 90)} dollars"
    persona = f"A shopper who likes {_text(rng, 8)}"
    state0 = {"page": "search", "search_available": True, "clickables": []}
    obs0 = "WebShop [SEP] Search " + _text(rng, obs_words)
    conv = [
        {"role": "system", "content": "You are a shopping agent. " + _text(rng, 60)},
        {"role": "user", "content": f"Instruction: {instruction}\nPersona: {persona}\n\nObservation:\n{obs0}"},
    ]
    reset = {"instruction": instruction, "persona": persona, "observation": obs0, "observation_state": state0}
    if goal_in_reset:
        reset["goal"] = {"asin": "B000SECRET"}
    out_steps = []
    state = state0
    goal_asin = f"B{task_id:09d}"
    bought = goal_asin if rng.random() < 0.6 else f"B{task_id + 1:09d}"
    n = steps if status == "completed" else max(1, steps // 3)
    for i in range(n):
        clickables = [f"item-{task_id}-{i}-{k}" for k in range(rng.randint(3, 8))]
        search = state.get("search_available", False)
        tools = _tools(search, state.get("clickables") or clickables)
        last = i == n - 1 and status == "completed"
        call_id = f"call_{task_id}_{sample_id}_{i}"
        if search and not last:
            name, args, action = "search", {"query": _text(rng, 4)}, None
            action = f"search[{args['query']}]"
        else:
            value = "buy now" if last else rng.choice(state.get("clickables") or clickables)
            name, args, action = "click", {"value": value}, f"click[{value}]"
        args_s = orjson.dumps(args).decode()
        new_state = {"page": "done" if last else rng.choice(["results", "item", "options"]),
                     "search_available": rng.random() < 0.3, "clickables": clickables}
        obs = ("Thank you for shopping with us. " if last else "Results [SEP] ") + _text(rng, obs_words)
        valid = rng.random() > 0.1
        thinking = _text(rng, think_words)
        out_steps.append({
            "step": i, "observation_state": state, "tools": tools, "thinking": thinking, "content": None,
            "tool_call": {"id": call_id, "name": name, "arguments": args_s}, "action": action,
            "finish_reason": "tool_calls", "response_id": f"resp-{task_id}-{sample_id}-{i}", "model": "qwen3-8b",
            "seed": rng.randint(0, 2**31), "usage": {"prompt_tokens": 1500 + 300 * i, "completion_tokens": 180},
            "latency_ms": round(rng.uniform(300, 3000), 1), "started_at": f"2026-05-01T10:{i:02d}:00.000000+00:00",
            "environment": {"observation": obs, "observation_state": new_state,
                            "reward": (1.0 if bought == goal_asin else 0.4) if last else 0.0, "done": last},
            "action_feedback": {"valid": valid, "code": None if valid else "not_clickable",
                                "message": None if valid else "value is not clickable on this page"},
            "protocol_error": None, "protocol_feedback": None, "policy_failure": None, "raw_response": None,
        })
        conv.append({"role": "assistant", "content": None, "reasoning_content": thinking,
                     "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": args_s}}]})
        conv.append({"role": "tool", "tool_call_id": call_id, "content": obs})
        state = new_state
    rec = {
        "schema": "shopsimrl-episode-v4", "episode_id": eid,
        "job": {"task_id": task_id, "sample_id": sample_id, "seed": rng.randint(0, 2**40), "split": "train"},
        "status": status,
        "provenance": {"model": {"name": "qwen3-8b", "checkpoint_id": "ckpt-100"},
                       "sampling": {"temperature": 0.7, "top_p": 0.95, "max_tokens": 2048},
                       "environment": {"mode": "embedded", "dialect": "canonical", "observation_version": "v3"},
                       "prompt_hash": "p" * 16, "skill_bank_hash": None, "action_limit": 30},
        "reset": reset,
        "selected_skills": [{"id": "sk-budget", "version": "1", "scope": "global", "content": "Check the price.",
                             "content_hash": "c" * 16, "metadata": {"score": 0.5}}],
        "conversation": conv, "steps": out_steps,
        "final": None, "error": None,
        "started_at": "2026-05-01T10:00:00.000000+00:00", "finished_at": "2026-05-01T10:20:00.000000+00:00",
        "duration_s": 1200.0,
    }
    if status == "completed":
        rwd = 1.0 if bought == goal_asin else 0.4
        rec["final"] = {"reward": rwd,
                        "reward_detail": {"r_type": 1.0, "r_att": 1.0 if rwd == 1.0 else 0.5, "r_option": None,
                                          "r_price": 1.0, "r_loose": rwd},
                        "purchase": {"asin": bought}, "goal": {"asin": goal_asin, "attributes": ["soft"]},
                        "termination_reason": "purchase", "done": True}
    else:
        rec["error"] = {"stage": "model", "type": "ModelUnavailable", "message": "retries exhausted",
                        "traceback": "Traceback (most recent call last):\n  ..."}
    return rec


def write_file(path, n_episodes: int, *, steps: int = 15, obs_words: int = 180, think_words: int = 120,
               retry_every: int = 0, task_base: int = 1000) -> int:
    """Write ``n_episodes`` records (plus a failed attempt before every ``retry_every``-th); returns bytes."""
    size = 0
    with open(path, "wb") as f:
        for t in range(n_episodes):
            if retry_every and t % retry_every == 0:
                b = orjson.dumps(record(task_base + t, steps=steps, obs_words=obs_words, think_words=think_words,
                                        status="failed")) + b"\n"
                f.write(b)
                size += len(b)
            b = orjson.dumps(record(task_base + t, steps=steps, obs_words=obs_words, think_words=think_words)) + b"\n"
            f.write(b)
            size += len(b)
    return size
