"""Scripted-policy figures on the embedded shop_env server (the table in docs/sim_protocol.md §7).

    python bench/bench_sim_policy.py                 # every arm on the 464 val tasks
    python bench/bench_sim_policy.py --tasks 100     # quicker

Each episode is played the way the ShopSimRL runtime plays it (tools rebuilt from observation_state each turn,
`购物任务：` first message, environment answers as `tool` messages, protocol errors answered with feedback and
counted as a turn, `finish_reason = length` terminating with `generation_length`, 30 turns), in process over
httpx's ASGI transport. The figures are deterministic: the policy's draws hash the request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shopsim_wh.sim.server import create_app  # noqa: E402
from shopsim_wh.sim.tasks import default_task_ids  # noqa: E402

SYSTEM = "You are a shopping agent. Call exactly one tool per turn."
ARMS = (
    ("scripted-strong", "bare", ""),
    ("scripted-strong", "skill", "Skill: select every option the instruction names before you click buy now."),
    ("scripted-strong", "placebo", "Be polite and concise in your reasoning."),
    ("scripted-noisy", "bare", ""),
    ("scripted-weak", "bare", ""),
)


def tools_for(state: dict) -> list[dict]:
    tools = []
    if state.get("search_available") is True:
        tools.append({"type": "function", "function": {"name": "search", "parameters": {
            "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}})
    if state["actions"]:
        tools.append({"type": "function", "function": {"name": "click", "parameters": {
            "type": "object", "properties": {"value": {"type": "string", "enum": state["actions"]}},
            "required": ["value"]}}})
    return tools


async def shop(c: httpx.AsyncClient, body: dict) -> dict:
    return (await c.post("/api/shop_agent", json=body)).json()["result"]


async def episode(c: httpx.AsyncClient, task_id: int, model: str, system: str, temperature: float) -> dict:
    r = await shop(c, {"action": "reset", "idx": task_id, "if_persona": False, "include_private_goal": False,
                       "interaction_mode": "single_turn"})
    env = {"env_idx": r["env_idx"], "lease_id": r["lease_id"]}
    sections = [system] + (["用户个人文档：\n" + json.dumps(r["user_persona"], ensure_ascii=False, sort_keys=True)]
                           if r.get("user_persona") else [])
    messages = [{"role": "system", "content": "\n\n".join(sections)},
                {"role": "user", "content": f"购物任务：\n{r['task_instruction']}\n\n{r['observation']}"}]
    state, final = r["observation_state"], None
    for _ in range(30):
        body = {"model": model, "messages": messages, "tools": tools_for(state), "temperature": temperature}
        choice = (await c.post("/v1/chat/completions", json=body)).json()["choices"][0]
        msg, calls = choice["message"], choice["message"].get("tool_calls") or []
        if choice["finish_reason"] == "length" and not calls:
            final = await shop(c, {"action": "terminate", **env, "termination_reason": "generation_length"})
            break
        action = None
        if len(calls) == 1 and not msg.get("content"):
            try:
                fn, args = calls[0]["function"], json.loads(calls[0]["function"]["arguments"])
                if fn["name"] == "search":
                    action = f"search[{args['query'].strip()}]"
                elif fn["name"] == "click":
                    action = f"click[{args['value'].strip()}]"
            except (ValueError, KeyError, AttributeError):
                action = None
        if action is None:
            feedback = json.dumps({"type": "tool_protocol_error"}, ensure_ascii=False)
            if calls:
                messages.append({"role": "assistant", "content": msg.get("content"), "tool_calls": calls})
                messages += [{"role": "tool", "tool_call_id": k["id"], "content": feedback} for k in calls]
            else:
                messages.append({"role": "user", "content": feedback})
            continue
        messages.append({"role": "assistant", "content": msg.get("content"), "tool_calls": calls})
        out = await shop(c, {"action": "interact", **env, "response": action})
        messages.append({"role": "tool", "tool_call_id": calls[0]["id"], "content": out["observation"]})
        if out["done"]:
            final = out
            break
        state = out["observation_state"]
    if final is None:
        final = await shop(c, {"action": "terminate", **env, "termination_reason": "action_limit"})
    await shop(c, {"action": "release_one", **env})
    return final


async def arm(task_ids: list[int], model: str, extra: str, temperature: float) -> dict:
    system = SYSTEM + (" " + extra if extra else "")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(capacity=64)),
                                 base_url="http://sim") as c:
        finals = await asyncio.gather(*(episode(c, t, model, system, temperature) for t in task_ids))
    d = [f["reward_detail"] for f in finals]
    return {k: statistics.mean(float(x[k]) for x in d)
            for k in ("r_strict", "r_loose", "r_success", "target_asin_match", "r_option")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=None, help="first N val tasks (default: all 464)")
    ap.add_argument("--temperature", type=float, default=0.6)
    args = ap.parse_args()
    tasks = default_task_ids("val")[: args.tasks]
    print(f"{len(tasks)} val tasks, temperature {args.temperature}")
    print("| arm | reward (r_strict) | r_loose | success | right product | r_option |")
    print("| --- | --- | --- | --- | --- | --- |")
    for model, name, extra in ARMS:
        m = asyncio.run(arm(tasks, model, extra, args.temperature))
        print(f"| {model} {name} | {m['r_strict']:.3f} | {m['r_loose']:.3f} | {100 * m['r_success']:.1f}% | "
              f"{100 * m['target_asin_match']:.1f}% | {m['r_option']:.3f} |")


if __name__ == "__main__":
    main()
