"""Runtime edges against real loopback servers: cancellation and unknown observation versions release the lease."""

from __future__ import annotations

import asyncio
import json

import httpx

from shopsim_wh.environment import CanonicalEnvironment
from shopsim_wh.errors import ObservationVersionError
from shopsim_wh.jobs import EpisodeJob
from shopsim_wh.model import ChatModel
from shopsim_wh.prompts import PromptBuilder
from shopsim_wh.runtime import AgentRuntime
from shopsim_wh.sim.server import create_app
from shopsim_wh.sim.tasks import default_task_ids

from .conftest import serve_asgi

TASK = default_task_ids("val")[0]


def _runtime(url: str, env_client, model_client, slow_ms: int = 0) -> AgentRuntime:
    extra = {"scripted_policy": {"latency_ms": slow_ms}} if slow_ms else {}
    from shopsim_wh.skills import NoSkills

    return AgentRuntime(ChatModel(model_client, "scripted-strong", extra_body=extra), CanonicalEnvironment(env_client),
                        PromptBuilder(), NoSkills(), action_limit=15)


def test_cancellation_mid_episode_releases_the_lease():
    with serve_asgi(create_app(seed=0)) as url:
        async def go():
            async with httpx.AsyncClient(base_url=url) as env_c, httpx.AsyncClient(base_url=url + "/v1") as model_c:
                rt = _runtime(url, env_c, model_c, slow_ms=5000)
                task = asyncio.create_task(rt.run(EpisodeJob(TASK, 0, 1, "val")))
                await asyncio.sleep(0.5)  # reset done, first model call in flight
                assert (await env_c.get("/v1/stats")).json()["active_leases"] == 1
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                return (await env_c.get("/v1/stats")).json()
        stats = asyncio.run(go())
    assert stats["active_leases"] == 0 and stats["leases_released"] == 1


class NewVersion:
    """Wraps the simulator and rewrites observation_version to one this client does not know."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        async def patched(msg):
            if msg["type"] == "http.response.body" and msg.get("body"):
                doc = json.loads(msg["body"])
                if isinstance(doc, dict) and isinstance(doc.get("observation_state"), dict):
                    doc["observation_state"]["observation_version"] = "shopsim-obs-v99"
                msg = {**msg, "body": json.dumps(doc).encode()}
            elif msg["type"] == "http.response.start":
                msg = {**msg, "headers": [(k, v) for k, v in msg["headers"] if k != b"content-length"]}
            await send(msg)
        await self.app(scope, receive, patched)


def test_unknown_observation_version_fails_the_episode_and_releases_the_lease():
    sim = create_app(seed=0)
    with serve_asgi(NewVersion(sim)) as url:
        async def go():
            async with httpx.AsyncClient(base_url=url) as env_c, httpx.AsyncClient(base_url=url + "/v1") as model_c:
                rec = await _runtime(url, env_c, model_c).run(EpisodeJob(TASK, 0, 1, "val"))
                return rec, (await env_c.get("/v1/stats")).json()
        rec, stats = asyncio.run(go())
    assert rec.episode["status"] == "failed" and rec.failure["stage"] == "reset"
    assert rec.failure["exception_type"] == ObservationVersionError.__name__
    assert "shopsim-obs-v99" in rec.failure["message"] and "upgrade" in rec.failure["message"]
    assert stats["leases_opened"] == 1 and stats["active_leases"] == 0
