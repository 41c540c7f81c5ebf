"""Raw ASGI app: the real ``shop_env`` wire format, the pi-slime dialect and the scripted policy on one port.

Routes (docs/sim_protocol.md has every field):

- ``POST /api/shop_agent``: the ``shop_env`` actions ``reset`` / ``interact`` / ``terminate`` / ``release_one`` /
  ``release_all``, answered ``{"result": {...}}``; errors ``{"result": {"error": "..."}}`` with 400 / 409 / 500.
  A body carrying ``rollout_session_id`` speaks the pi-slime single-endpoint dialect instead (``reset`` /
  ``interact`` / ``release_one`` / ``status``; ``instruction`` text, ``over``, loose reward).
- ``GET /healthz``: the real health answer (plus ``idempotency_keys: true``); ``GET /v1/stats``: the embedded
  server's own counters.

Idempotency keys (the embedded server's extension; the real one has none): a ``shop_env`` request carrying a
``request_id`` string is answered once; a repeat of the same ``request_id`` (a client retrying a request whose
answer it lost) gets the first answer again, from a cache of the last ``REPLY_CACHE`` keys, without applying
the action a second time (counted in ``/v1/stats`` as ``replays``).
- ``GET /v1/models``, ``POST /v1/chat/completions``: the scripted OpenAI-compatible policy.

Slots are leased as on the real server: ``reset`` takes the lowest free slot or waits (an asyncio wait, no
error) until a ``release_one`` / ``release_all`` frees one; a slot stays leased until released, also after the
episode ends. State changes happen between awaits of one event loop, so no locks are needed. The app answers
the ASGI ``lifespan`` scope and starts no background task: it works under uvicorn and ``httpx.ASGITransport``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from shopsim_wh.sim import teacher
from shopsim_wh.sim.engine import ENVIRONMENT_VERSION, Episode, EpisodeDone, extract_action
from shopsim_wh.sim.observation import OBSERVATION_VERSION
from shopsim_wh.sim.policy import PolicyConfig, PolicyError, chat_completion, list_models, request_latency_s
from shopsim_wh.sim.reward import PRIMARY_REWARD
from shopsim_wh.sim.tasks import generate_tasks, persona_profile

MAX_BODY = 16 * 1024 * 1024
DEFAULT_SLOTS = 20
REPLY_CACHE = 4096  # idempotency keys remembered (a retry comes within seconds of its first try)


class LeaseMismatch(Exception):
    """A caller holds no (or a stale) lease on the slot it names: HTTP 409."""


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


async def _disconnected(receive: Callable) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class SlotPool:
    """Slots leased until released; :meth:`acquire` waits (FIFO) while none is free."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.free: set[int] = set(range(size))
        self.lease_ids: dict[int, str] = {}
        self.waiters: deque[asyncio.Future] = deque()

    def try_acquire(self) -> int | None:
        if not self.free or any(not w.done() for w in self.waiters):  # first come, first served
            return None
        return self._take()

    def _take(self) -> int:
        slot = min(self.free)
        self.free.remove(slot)
        self.lease_ids[slot] = uuid.uuid4().hex
        return slot

    async def acquire(self) -> int:
        slot = self.try_acquire()
        while slot is None:
            future = asyncio.get_running_loop().create_future()
            self.waiters.append(future)
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():
                    self._wake()  # we were woken but are gone: pass the turn on
                raise
            if self.free:
                slot = self._take()
        return slot

    def _wake(self) -> None:
        while self.waiters:
            w = self.waiters.popleft()
            if not w.done():
                w.set_result(None)
                return

    def validate(self, slot: int, lease_id: object) -> bool:
        return self.lease_ids.get(slot) == str(lease_id)

    def release(self, slot: int, lease_id: object = None) -> bool:
        if not 0 <= slot < self.size:
            raise ValueError(f"invalid environment index: {slot}")
        was_leased = slot not in self.free
        if was_leased and lease_id is not None and self.lease_ids.get(slot) != str(lease_id):
            raise LeaseMismatch(f"stale or invalid lease for environment {slot}")
        self.free.add(slot)
        self.lease_ids.pop(slot, None)
        if was_leased:
            self._wake()
        return was_leased

    def reset(self) -> None:
        self.free, self.lease_ids = set(range(self.size)), {}
        for _ in range(self.size):
            self._wake()


@dataclass
class Slot:
    episode: Episode | None = None
    rollout_session_id: str | None = None  # pi-slime sessions only
    counters: dict = field(default_factory=dict)


class SimApp:
    """The ASGI callable returned by :func:`create_app`."""

    def __init__(self, seed: int = 0, capacity: int = DEFAULT_SLOTS, policy: PolicyConfig | None = None,
                 show_attrs: bool = False, idempotency: bool = True) -> None:
        if capacity < 1:
            raise ValueError("capacity (environment slots) must be at least 1")
        self.seed, self.capacity, self.show_attrs = seed, capacity, show_attrs
        self.idempotency = idempotency
        self.replies: OrderedDict[str, asyncio.Future] = OrderedDict()
        self.policy = policy if policy is not None else PolicyConfig()
        self.tasks = generate_tasks(seed)
        self.pool = SlotPool(capacity)
        self.slots = [Slot() for _ in range(capacity)]
        self.counters = dict.fromkeys(
            ("requests", "resets", "resets_waited", "interacts", "invalid_actions", "terminations", "releases",
             "episodes_done", "chat_completions", "replays"), 0)

    # ------------------------------------------------------------------------------------------ ASGI
    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        if size > MAX_BODY:
            status, payload = 413, {"result": {"error": "request body too large (limit 16 MiB)"}}
        else:
            work = asyncio.ensure_future(self.handle(scope["method"], scope["path"], b"".join(chunks)))
            gone = asyncio.ensure_future(_disconnected(receive))
            await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not work.done():  # the client left while its reset waited for a slot: stop waiting, take none
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
                return
            gone.cancel()
            status, payload = work.result()
        data = orjson.dumps(payload)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    async def handle(self, method: str, path: str, raw: bytes) -> tuple[int, Any]:
        """Dispatch one request; returns (HTTP status, JSON-able payload)."""
        self.counters["requests"] += 1
        route = path.rstrip("/") or "/"
        if route == "/api/shop_agent":
            if method != "POST":
                return 405, {"result": {"error": "use POST /api/shop_agent"}}
            try:
                body = orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                body = None
            if not isinstance(body, dict):  # the real server answers 200 here
                return 200, {"result": {"error": "No JSON data provided"}}
            if "rollout_session_id" in body:
                return await self._slime(body)
            return await self._shop_env_once(body)
        if route == "/healthz" and method == "GET":
            return 200, self.health()
        if route == "/v1/stats" and method == "GET":
            return 200, {"active_leases": self.capacity - len(self.pool.free), "free_slots": len(self.pool.free),
                         "waiting_resets": sum(1 for w in self.pool.waiters if not w.done()), **self.counters}
        if route in ("/v1/models", "/v1/chat/completions"):
            return await self._policy(method, route, raw)
        return 404, {"error": f"no route for {method} {path}; the shop is POST /api/shop_agent, health GET /healthz"}

    def health(self) -> dict:
        out = {"ready": True, "environment_slots": self.capacity, "free_slots": len(self.pool.free),
               "tasks": len(self.tasks.tasks), "environment_version": ENVIRONMENT_VERSION,
               "primary_reward": PRIMARY_REWARD, "observation_version": OBSERVATION_VERSION,
               "debug_ui": "/debug-ui", "replay_ui": "/replay-ui"}
        if self.idempotency:
            out["idempotency_keys"] = True
        return out

    # ------------------------------------------------------------------------------------------ shop_env
    @staticmethod
    def _err(status: int, message: str) -> tuple[int, dict]:
        return status, {"result": {"error": message}}

    async def _shop_env_once(self, body: dict) -> tuple[int, dict]:
        """``_shop_env`` with idempotency keys: a repeated ``request_id`` gets its first answer, not applied again."""
        key = body.get("request_id")
        if not self.idempotency or not isinstance(key, str) or not key:
            return await self._shop_env(body)
        first = self.replies.get(key)
        if first is not None:
            self.counters["replays"] += 1
            return await asyncio.shield(first)  # also while the first is still being answered
        first = self.replies[key] = asyncio.get_running_loop().create_future()
        while len(self.replies) > REPLY_CACHE:
            self.replies.popitem(last=False)
        try:
            answer = await self._shop_env(body)
        except BaseException:  # cancelled (the client left a waiting reset): nothing was applied, forget the key
            self.replies.pop(key, None)
            first.cancel()
            raise
        first.set_result(answer)
        return answer

    async def _shop_env(self, body: dict) -> tuple[int, dict]:
        action, env_idx, lease_id = body.get("action"), body.get("env_idx"), body.get("lease_id")
        if action == "release_all":
            for slot in self.slots:
                slot.episode, slot.rollout_session_id = None, None
            self.pool.reset()
            return 200, {"result": {"message": "All environments have been initialized"}}
        if action == "release_one":
            if not _is_int(env_idx) or not lease_id:
                return self._err(400, "release_one requires a valid env_idx and lease_id")
            if not self.pool.validate(env_idx, lease_id):
                return self._err(409, f"stale or invalid lease for environment {env_idx}")
            self.slots[env_idx].episode = None
            self.pool.release(env_idx, lease_id)
            self.counters["releases"] += 1
            return 200, {"result": {"message": f"Environment {env_idx} has been released"}}
        if action == "reset":
            if env_idx is not None:
                return self._err(400, "reset must not include env_idx; the server assigns a slot")
            if not self.pool.free or self.pool.waiters:
                self.counters["resets_waited"] += 1
            slot = await self.pool.acquire()
            lease = self.pool.lease_ids[slot]
            try:
                result = self._reset(slot, body)
            except Exception as e:  # the real server rolls the new lease back and answers 500
                self.slots[slot].episode = None
                self.pool.release(slot, lease)
                return self._err(500, str(e))
            self.counters["resets"] += 1
            return 200, {"result": {**result, "lease_id": lease}}
        if action not in ("interact", "terminate"):
            return self._err(400, f"unsupported action: {action!r}")
        if not _is_int(env_idx) or not lease_id:
            return self._err(400, f"{action} requires a valid env_idx and lease_id")
        if not self.pool.validate(env_idx, lease_id):
            return self._err(409, f"stale or invalid lease for environment {env_idx}")
        episode = self.slots[env_idx].episode
        try:
            if episode is None:
                raise RuntimeError(f"environment {env_idx} has no session; reset first")
            if action == "interact":
                result = self._interact(env_idx, episode, body.get("response"))
            else:
                result = self._terminate(env_idx, episode, body.get("termination_reason", "action_limit"))
        except (EpisodeDone, RuntimeError, ValueError, TypeError) as e:
            return self._err(500, str(e))
        return 200, {"result": {**result, "lease_id": lease_id}}

    def _reset(self, slot: int, body: dict) -> dict:
        idx = body.get("idx")
        if idx is None:
            raise ValueError("reset action requires idx parameter")
        if not _is_int(idx):
            raise ValueError("task idx must be an integer")
        task = self.tasks.by_id.get(idx)
        if task is None:
            raise KeyError(f"unknown or inactive task_id {idx}")
        if_persona = bool(body.get("if_persona", False))
        mode = str(body.get("interaction_mode", "single_turn"))
        episode = Episode(task, self.seed, slot, mode, show_attrs=self.show_attrs, if_persona=if_persona)
        self.slots[slot].episode = episode
        out = {
            "task_instruction": task.instruction,
            "observation": episode.observation(),
            "message": f"Task {idx} started",
            "env_idx": slot,
            "idx": idx,
            "task_mode": "persona" if if_persona else "standard",
            "interaction_mode": mode,
            "environment_version": ENVIRONMENT_VERSION,
            "observation_state": episode.state(),
        }
        if body.get("include_private_goal", False):
            out.update(private_task_instruction=episode.goal["instruction_text"],
                       goal_options=list(episode.goal["goal_options"]), reason_key=episode.goal["reason_key"])
        out["user_persona"] = persona_profile(task.persona)  # the real server sends the goal's persona always
        return out

    def _interact(self, env_idx: int, episode: Episode, response: Any) -> dict:
        if response is None:
            raise ValueError("interact action requires response parameter")
        if not isinstance(response, str):
            raise TypeError("interact response must be a string such as search[...] or click[...]")
        status = episode.step(extract_action(response))
        self.counters["interacts"] += 1
        feedback = status["action_feedback"]
        if not feedback["valid"]:
            self.counters["invalid_actions"] += 1
        done = status["done"]
        if done:
            self.counters["episodes_done"] += 1
        out = {
            "done": done,
            "reward": status["reward"],
            "observation": episode.observation(),
            "message": "Continue interaction" if feedback["valid"] else "Invalid action",
            "env_idx": env_idx,
            "idx": episode.session_id,
            "reward_detail": status["reward_detail"] if done else {},
            "purchase": status["purchase"] if done else {},
            "goal": status["goal"] if done else {},
            "over": done,
            "observation_state": episode.state(),
            "action_feedback": feedback,
        }
        if done:
            out["termination_reason"] = status["termination_reason"]
        return out

    def _terminate(self, env_idx: int, episode: Episode, reason: Any) -> dict:
        status = episode.terminate(str(reason))
        self.counters["terminations"] += 1
        self.counters["episodes_done"] += 1
        return {
            "done": True,
            "over": True,
            "reward": status["reward"],
            "observation": episode.observation(),
            "message": f"Episode terminated: {reason}",
            "env_idx": env_idx,
            "idx": episode.session_id,
            "reward_detail": status["reward_detail"],
            "purchase": status["purchase"],
            "goal": status["goal"],
            "termination_reason": status["termination_reason"],
            "observation_state": episode.state(),
        }

    # ------------------------------------------------------------------------------------------ pi-slime
    async def _slime(self, body: dict) -> tuple[int, dict]:
        action, rsid = body.get("action"), body.get("rollout_session_id")
        if action == "status":
            sessions = [{"env_idx": i, "rollout_session_id": s.rollout_session_id, "task_id": s.episode.task.task_id,
                         "done": s.episode.done}
                        for i, s in enumerate(self.slots) if s.episode is not None and s.rollout_session_id]
            return 200, {"result": {"capacity": self.capacity, "free": len(self.pool.free),
                                    "active": self.capacity - len(self.pool.free), "sessions": sessions}}
        if not isinstance(rsid, str) or not rsid:
            return 400, {"error": "rollout_session_id must be a non-empty string"}
        if action == "reset":
            slot = await self.pool.acquire()
            lease = self.pool.lease_ids[slot]
            try:
                result = self._reset(slot, {"idx": body.get("idx")})
            except Exception as e:
                self.slots[slot].episode = None
                self.pool.release(slot, lease)
                return 400, {"error": str(e)}
            self.slots[slot].rollout_session_id = rsid
            self.counters["resets"] += 1
            return 200, {"result": {"env_idx": slot, "rollout_session_id": rsid,
                                    "instruction": f"购物任务：\n{result['task_instruction']}\n\n{result['observation']}"}}
        if action not in ("interact", "release_one"):
            return 400, {"error": f"unsupported action: {action!r}; use reset, interact, release_one or status"}
        env_idx = body.get("env_idx")
        if not _is_int(env_idx) or not 0 <= env_idx < self.capacity:
            return 400, {"error": f"env_idx must be a slot number in [0, {self.capacity})"}
        slot = self.slots[env_idx]
        if slot.episode is None or slot.rollout_session_id is None:
            if action == "release_one":
                return 200, {"result": {"env_idx": env_idx, "released": False}}
            return 404, {"error": f"env_idx {env_idx} holds no session (released, or never reset); reset again"}
        if slot.rollout_session_id != rsid:
            return 409, {"error": f"env_idx {env_idx} belongs to another rollout session"}
        if action == "release_one":
            self._slime_release(env_idx)
            return 200, {"result": {"env_idx": env_idx, "released": True}}
        response = body.get("response")
        if not isinstance(response, str):
            return 400, {"error": "response must be a string such as search[...] or click[...]"}
        r = self._interact(env_idx, slot.episode, response)
        out = {"instruction": r["observation"], "done": r["done"], "over": False,
               "reward": float(r["reward_detail"].get("r_loose", 0.0)) if r["done"] else 0.0,
               "env_idx": env_idx, "action_feedback": r["action_feedback"]}
        if r["done"]:
            self._slime_release(env_idx)  # this dialect's server frees the slot itself: over = true
            out.update(over=True, reward_detail=r["reward_detail"], purchase=r["purchase"] or {"asin": None},
                       goal=r["goal"], termination_reason=r["termination_reason"])
        return 200, {"result": out}

    def _slime_release(self, env_idx: int) -> None:
        self.slots[env_idx].episode, self.slots[env_idx].rollout_session_id = None, None
        self.pool.release(env_idx)
        self.counters["releases"] += 1

    # ------------------------------------------------------------------------------------------ policy
    async def _policy(self, method: str, route: str, raw: bytes) -> tuple[int, Any]:
        if not self.policy.enabled:
            return 404, PolicyError(404, "not_found", "the scripted policy is disabled").body()
        if route == "/v1/models":
            if method != "GET":
                return 405, PolicyError(405, "method_not_allowed", "use GET").body()
            return 200, list_models(self.policy)
        if method != "POST":
            return 405, PolicyError(405, "method_not_allowed", "use POST").body()
        try:
            body = orjson.loads(raw or b"{}")
            self.counters["chat_completions"] += 1
            if isinstance(body, dict) and body.get("model") == teacher.TEACHER_MODEL:  # synth-reasoning's teacher
                return 200, teacher.completion(body)
            answer = chat_completion(body, self.policy)
            delay = request_latency_s(body, self.policy)
        except orjson.JSONDecodeError:
            return 400, PolicyError(400, "invalid_json", "the request body is not valid JSON").body()
        except PolicyError as e:
            return e.status, e.body()
        if delay:
            await asyncio.sleep(delay)
        return 200, answer


def create_app(seed: int = 0, capacity: int = DEFAULT_SLOTS, policy: PolicyConfig | None = None,
               show_attrs: bool = False, idempotency: bool = True) -> SimApp:
    """Build the ASGI app: ``shop_env`` + pi-slime shop dialects and the scripted policy, one seed's tasks.

    ``capacity`` is the number of environment slots (the real server's ``SHOPSIM_ENV_SLOTS``, 20 by default);
    ``show_attrs`` offers the ``attributes`` subpage on product pages (off by default, as on the real server);
    ``idempotency=False`` makes it forget ``request_id`` and drop ``idempotency_keys`` from ``/healthz``, as the
    real server (fault tests use it to stand for one).
    """
    return SimApp(seed=seed, capacity=capacity, policy=policy, show_attrs=show_attrs, idempotency=idempotency)


def serve(host: str = "127.0.0.1", port: int = 8765, seed: int = 0, **kw: Any) -> None:
    """Run :func:`create_app` under uvicorn (blocking). ``kw`` goes to :func:`create_app`."""
    import uvicorn

    uvicorn.run(create_app(seed=seed, **kw), host=host, port=port, log_level="warning")
