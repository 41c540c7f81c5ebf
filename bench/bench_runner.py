"""Runner throughput on the embedded servers (both in process), at concurrency 1, 8 and 64.

    python bench/bench_runner.py [--episodes 160]

Prints episodes/s, steps/s and the runner's own time per step (wall time of a step minus the time spent
inside the model and environment HTTP calls, median over steps), beside a baseline measured in the same
run: a bare loop that drives the same servers with the same requests but no runtime, recording or
warehouse (its steps/s is the ceiling the servers allow).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

from shopsim_wh.core.config import Config
from shopsim_wh.rollout import runner
from shopsim_wh.rollout.environment import ShopEnvAdapter
from shopsim_wh.rollout.model import ChatModel
from shopsim_wh.rollout.prompts import tools_for
from shopsim_wh.rollout.runtime import AgentRuntime, check_turn


def config(n_episodes: int, concurrency: int, name: str) -> Config:
    return Config.model_validate({
        "experiment": {"name": name, "seed": 1},
        "tasks": {"split": "train", "sample_size": n_episodes, "repeats": 1},
        "model": {"name": "scripted-strong", "checkpoint_id": "bench", "send_seed": True},
        "runtime": {"concurrency": concurrency, "max_steps": 30},
    })


class Clock:
    """Accumulates time spent awaiting the model and the environment, per step."""

    def __init__(self):
        self.inside = 0.0
        self.overheads: list[float] = []

    def wrap(self, fn):
        async def timed(*a, **kw):
            t = time.perf_counter()
            try:
                return await fn(*a, **kw)
            finally:
                self.inside += time.perf_counter() - t
        return timed


def bench_runner(n: int, concurrency: int) -> dict:
    clock = Clock()
    orig_generate = ChatModel.generate
    env_calls = {name: getattr(ShopEnvAdapter, name) for name in ("reset", "step", "terminate", "close")}
    orig_run = AgentRuntime.run

    async def run_timed(self, job):
        # per-episode accounting: (wall - inside calls) / model steps
        inside0, t0 = clock.inside, time.perf_counter()
        rec = await orig_run(self, job)
        if concurrency == 1 and rec.steps:
            clock.overheads.append(((time.perf_counter() - t0) - (clock.inside - inside0)) / len(rec.steps))
        return rec

    ChatModel.generate = clock.wrap(orig_generate)
    for name, fn in env_calls.items():
        setattr(ShopEnvAdapter, name, clock.wrap(fn))
    AgentRuntime.run = run_timed
    try:
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            res = runner.run(config(n, concurrency, f"bench-c{concurrency}"), d)
            wall = time.perf_counter() - t0
            from shopsim_wh.engines.db import connect

            steps = connect(d).execute("select count(*) from steps").fetchone()[0]
    finally:
        ChatModel.generate, AgentRuntime.run = orig_generate, orig_run
        for name, fn in env_calls.items():
            setattr(ShopEnvAdapter, name, fn)
    return {"episodes": res.completed, "steps": steps, "wall": wall,
            "overhead_ms": statistics.median(clock.overheads) * 1000 if clock.overheads else None}


async def _baseline(n: int, concurrency: int) -> tuple[int, float]:
    """Same servers, same request shapes, no runtime: the ceiling."""
    cfg = config(n, concurrency, "baseline")
    p = runner.plan(cfg)
    model_client, env_client = runner.make_clients(cfg)
    sem = asyncio.Semaphore(concurrency)
    steps = 0

    async def one(job):
        nonlocal steps
        async with sem:
            env = runner.make_adapter("shop_env", env_client)
            model = runner.make_model(cfg, model_client)
            first = await env.reset(job.task_id)
            messages = p.prompts.messages_start({"task_instruction": first.task_instruction, "observation": first.observation,
                                                 "user_persona": first.persona}, [])
            state = first.state
            for i in range(30):
                tools = tools_for(state)
                out = await model.generate(messages, tools, job.seed + i)
                steps += 1
                err, action = check_turn(out)
                if err or out.policy_failure:
                    break
                c = out.tool_calls[0]
                res = await env.step(action)
                messages += [out.assistant_message(), {"role": "tool", "tool_call_id": c.id, "content": res.observation}]
                state = res.state
                if res.done:
                    break
                await asyncio.sleep(0)
            await env.close()

    async with model_client, env_client:
        t0 = time.perf_counter()
        await asyncio.gather(*(one(j) for j in p.jobs))
        return steps, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=160)
    args = ap.parse_args()
    print(f"runner throughput, embedded servers in process, {args.episodes} episodes per row")
    print(f"{'concurrency':>11} {'episodes/s':>10} {'steps/s':>8} {'baseline steps/s':>16} {'ratio':>6} {'runner ms/step (median)':>24}")
    for c in (1, 8, 64):
        r = bench_runner(args.episodes, c)
        b_steps, b_wall = asyncio.run(_baseline(args.episodes, c))
        sps, bsps = r["steps"] / r["wall"], b_steps / b_wall
        oh = f"{r['overhead_ms']:.2f}" if r["overhead_ms"] is not None else "(measured at c=1)"
        print(f"{c:>11} {r['episodes'] / r['wall']:>10.1f} {sps:>8.0f} {bsps:>16.0f} {sps / bsps:>6.2f} {oh:>24}")
    print("steps/s includes startup, commits and compaction; baseline = the same requests without runtime or warehouse")


if __name__ == "__main__":
    main()
