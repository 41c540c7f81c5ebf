"""Raw ASGI app serving the shop in both dialects plus the scripted OpenAI-compatible policy.

Routes (see docs/sim_protocol.md for the exact wire format):

- canonical: ``GET /v1/health``, ``GET /v1/stats``, ``POST /v1/sessions``, ``POST /v1/sessions/{lease}/step``,
  ``POST /v1/sessions/{lease}/terminate``, ``DELETE /v1/sessions/{lease}``;
- legacy single endpoint: ``POST /api/shop_agent`` (``reset`` / ``interact`` / ``release_one`` / ``status``);
- policy: ``GET /v1/models``, ``POST /v1/chat/completions``.

Request handling is synchronous inside one event loop (no awaits while state changes), so no locks are
needed; leases idle for longer than ``lease_ttl_s`` are swept lazily at the start of every request. The app
answers the ASGI ``lifespan`` scope and starts no background task, so it works under
``httpx.ASGITransport`` as well as under uvicorn.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from shopsim_wh.sim.engine import DEFAULT_ACTION_LIMIT, OBSERVATION_VERSION, Episode, EpisodeDone
from shopsim_wh.sim.policy import PolicyConfig, PolicyError, chat_completion, list_models, request_latency_s
from shopsim_wh.sim.tasks import generate_tasks

MAX_BODY = 16 * 1024 * 1024
MAX_ACTION_LIMIT = 1000


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class Lease:
    lease_id: str
    slot: int
    episode: Episode
    last_used: float
    dialect: str  # "canonical" | "legacy"
    rollout_session_id: str | None = None


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class SimApp:
    """The ASGI callable returned by :func:`create_app`."""

    def __init__(self, seed: int = 0, capacity: int = 256, lease_ttl_s: float = 600.0,
                 default_action_limit: int = DEFAULT_ACTION_LIMIT, policy: PolicyConfig | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if capacity < 1 or default_action_limit < 1 or lease_ttl_s <= 0:
            raise ValueError("capacity, default_action_limit and lease_ttl_s must be positive")
        self.seed, self.capacity, self.lease_ttl_s = seed, capacity, lease_ttl_s
        self.default_action_limit = default_action_limit
        self.policy = policy if policy is not None else PolicyConfig()
        self.clock = clock
        self.tasks = generate_tasks(seed)
        self.leases: dict[str, Lease] = {}
        self.slots: dict[int, str] = {}
        self.expired: OrderedDict[str, None] = OrderedDict()
        self.counters = dict.fromkeys(
            ("requests", "leases_opened", "leases_released", "leases_expired", "leases_released_by_server",
             "steps", "invalid_actions", "episodes_done", "terminations", "chat_completions"), 0)

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
            status, payload = 413, {"error": {"code": "payload_too_large", "message": "request body too large"}}
        else:
            meta: dict = {}
            status, payload = self.handle(scope["method"], scope["path"], b"".join(chunks), meta)
            if meta.get("delay_s"):
                await asyncio.sleep(meta["delay_s"])
        data = orjson.dumps(payload)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    # ------------------------------------------------------------------------------------------ routing
    def handle(self, method: str, path: str, raw: bytes, meta: dict | None = None) -> tuple[int, Any]:
        """Dispatch one request; returns (HTTP status, JSON-able payload)."""
        self.counters["requests"] += 1
        self._sweep()
        parts = [p for p in path.split("/") if p]
        if parts == ["api", "shop_agent"]:
            if method != "POST":
                return 405, {"error": "use POST"}
            return self._legacy(raw)
        if parts[:2] == ["v1", "chat"] or parts == ["v1", "models"]:
            return self._policy(method, parts, raw, meta if meta is not None else {})
        try:
            return 200, self._canonical(method, parts, raw)
        except ApiError as e:
            return e.status, {"error": {"code": e.code, "message": e.message}}

    def _canonical(self, method: str, parts: list[str], raw: bytes) -> Any:
        route = tuple(parts)
        if route == ("v1", "health"):
            self._method(method, "GET")
            return {"status": "ok", "observation_version": OBSERVATION_VERSION, "capacity": self.capacity,
                    "active": len(self.leases), "tasks": len(self.tasks.tasks)}
        if route == ("v1", "stats"):
            self._method(method, "GET")
            return {"active_leases": len(self.leases), "capacity": self.capacity, **self.counters}
        if route == ("v1", "sessions"):
            self._method(method, "POST")
            return self._open(self._json(raw))
        if len(parts) == 3 and parts[:2] == ["v1", "sessions"]:
            self._method(method, "DELETE")
            return {"released": self._release(parts[2])}
        if len(parts) == 4 and parts[:2] == ["v1", "sessions"] and parts[3] in ("step", "terminate"):
            self._method(method, "POST")
            body = self._json(raw)
            lease = self._lease(parts[2])
            return self._step(lease, body) if parts[3] == "step" else self._terminate(lease, body)
        raise ApiError(404, "not_found", f"no route for /{'/'.join(parts)}")

    @staticmethod
    def _method(method: str, expected: str) -> None:
        if method != expected:
            raise ApiError(405, "method_not_allowed", f"use {expected}")

    @staticmethod
    def _json(raw: bytes) -> dict:
        try:
            body = orjson.loads(raw or b"{}")
        except orjson.JSONDecodeError as e:
            raise ApiError(422, "bad_request", f"body is not valid JSON: {e}") from None
        if not isinstance(body, dict):
            raise ApiError(422, "bad_request", "body must be a JSON object")
        return body

    # ------------------------------------------------------------------------------------------ leases
    def _sweep(self) -> None:
        now = self.clock()
        for lease in [x for x in self.leases.values() if now - x.last_used > self.lease_ttl_s]:
            self._drop(lease)
            self.counters["leases_expired"] += 1
            self.expired[lease.lease_id] = None
            while len(self.expired) > 100_000:
                self.expired.popitem(last=False)

    def _drop(self, lease: Lease) -> None:
        del self.leases[lease.lease_id]
        del self.slots[lease.slot]

    def _new_lease(self, task_id: Any, action_limit: Any, dialect: str, rsid: str | None = None) -> Lease:
        if not _is_int(task_id):
            raise ApiError(422, "bad_request", "task_id must be an integer")
        task = self.tasks.by_id.get(task_id)
        if task is None:
            raise ApiError(404, "unknown_task", f"no task with id {task_id}")
        if action_limit is None:
            action_limit = self.default_action_limit
        if not _is_int(action_limit) or not 1 <= action_limit <= MAX_ACTION_LIMIT:
            raise ApiError(422, "bad_request", f"action_limit must be an integer in [1, {MAX_ACTION_LIMIT}] or null")
        if len(self.leases) >= self.capacity:
            raise ApiError(503, "no_capacity", f"all {self.capacity} environment slots are leased")
        slot = next(i for i in range(self.capacity) if i not in self.slots)
        lease = Lease("lease-" + secrets.token_hex(12), slot, Episode(task, self.seed, action_limit),
                      self.clock(), dialect, rsid)
        self.leases[lease.lease_id] = lease
        self.slots[slot] = lease.lease_id
        self.counters["leases_opened"] += 1
        return lease

    def _lease(self, lease_id: str) -> Lease:
        lease = self.leases.get(lease_id)
        if lease is None:
            if lease_id in self.expired:
                raise ApiError(410, "lease_expired", f"lease {lease_id} expired after {self.lease_ttl_s}s idle")
            raise ApiError(404, "unknown_lease", f"no active lease {lease_id}")
        lease.last_used = self.clock()
        return lease

    def _release(self, lease_id: str) -> bool:
        lease = self.leases.get(lease_id)
        if lease is None:
            return False
        self._drop(lease)
        self.counters["leases_released"] += 1
        return True

    # ------------------------------------------------------------------------------------------ canonical
    def _open(self, body: dict) -> dict:
        unknown = set(body) - {"task_id", "include_private_goal", "action_limit"}
        if unknown:
            raise ApiError(422, "bad_request", f"unknown fields: {sorted(unknown)}")
        include_goal = body.get("include_private_goal", False)
        if not isinstance(include_goal, bool):
            raise ApiError(422, "bad_request", "include_private_goal must be a boolean")
        lease = self._new_lease(body.get("task_id"), body.get("action_limit"), "canonical")
        ep = lease.episode
        out = {
            "lease_id": lease.lease_id,
            "task": ep.task.public(),
            "observation": ep.observation,
            "observation_state": ep.observation_state(),
            "action_limit": ep.action_limit,
        }
        if include_goal:
            out["goal"] = ep.task.goal.to_dict()
        return out

    def _step(self, lease: Lease, body: dict) -> dict:
        action = body.get("action")
        if not isinstance(action, str):
            raise ApiError(422, "bad_request", "'action' must be a string")
        try:
            result = lease.episode.step(action)
        except EpisodeDone:
            raise ApiError(409, "episode_done", "the episode is already done; release the lease") from None
        self.counters["steps"] += 1
        if not result["action_feedback"]["valid"]:
            self.counters["invalid_actions"] += 1
        if result["done"]:
            self.counters["episodes_done"] += 1
        return result

    def _terminate(self, lease: Lease, body: dict) -> dict:
        reason = body.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise ApiError(422, "bad_request", "'reason' must be a non-empty string")
        try:
            result = lease.episode.terminate(reason)
        except EpisodeDone:
            raise ApiError(409, "episode_done", "the episode is already done") from None
        self.counters["terminations"] += 1
        self.counters["episodes_done"] += 1
        return result

    # ------------------------------------------------------------------------------------------ legacy
    def _legacy(self, raw: bytes) -> tuple[int, Any]:
        try:
            body = orjson.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
        except ValueError as e:
            return 400, {"error": f"bad request: {e}"}
        action = body.get("action")
        try:
            if action == "reset":
                return 200, {"result": self._legacy_reset(body)}
            if action == "interact":
                return 200, {"result": self._legacy_interact(body)}
            if action == "release_one":
                return 200, {"result": self._legacy_release(body)}
            if action == "status":
                return 200, {"result": self._legacy_status()}
        except ApiError as e:
            return e.status, {"error": f"{e.code}: {e.message}"}
        return 400, {"error": f"unknown action {action!r}; expected reset, interact, release_one or status"}

    def _legacy_lease(self, body: dict) -> Lease:
        env_idx = body.get("env_idx")
        if not _is_int(env_idx):
            raise ApiError(400, "bad_request", "env_idx must be an integer")
        lease_id = self.slots.get(env_idx)
        if lease_id is None:
            raise ApiError(404, "unknown_env", f"env_idx {env_idx} is not active (released or expired)")
        lease = self._lease(lease_id)
        rsid = body.get("rollout_session_id")
        if rsid is not None and lease.rollout_session_id is not None and rsid != lease.rollout_session_id:
            raise ApiError(409, "session_mismatch", f"env_idx {env_idx} belongs to another rollout session")
        return lease

    def _legacy_reset(self, body: dict) -> dict:
        rsid = body.get("rollout_session_id")
        lease = self._new_lease(body.get("idx"), body.get("action_limit"), "legacy",
                                rsid if isinstance(rsid, str) else None)
        return {"env_idx": lease.slot, "instruction": lease.episode.observation, "task_id": lease.episode.task.task_id,
                "rollout_session_id": lease.rollout_session_id}

    def _legacy_interact(self, body: dict) -> dict:
        lease = self._legacy_lease(body)
        response = body.get("response")
        if not isinstance(response, str):
            raise ApiError(400, "bad_request", "response must be a string")
        r = self._step(lease, {"action": response})
        out = {"instruction": r["observation"], "done": r["done"], "over": False, "reward": r["reward"] or 0.0,
               "valid": r["action_feedback"]["valid"]}
        if r["done"]:
            self._drop(lease)
            self.counters["leases_released_by_server"] += 1
            out.update(over=True, reward_detail=r["reward_detail"], purchase=r["purchase"] or {"asin": None},
                       goal=r["goal"], termination_reason=r["termination_reason"])
        return out

    def _legacy_release(self, body: dict) -> dict:
        env_idx = body.get("env_idx")
        lease_id = self.slots.get(env_idx) if _is_int(env_idx) else None
        return {"env_idx": env_idx, "released": bool(lease_id) and self._release(lease_id)}

    def _legacy_status(self) -> dict:
        sessions = [
            {"env_idx": x.slot, "task_id": x.episode.task.task_id, "rollout_session_id": x.rollout_session_id,
             "dialect": x.dialect, "done": x.episode.done}
            for x in sorted(self.leases.values(), key=lambda x: x.slot)
        ]
        return {"capacity": self.capacity, "free": self.capacity - len(self.leases), "active": len(self.leases),
                "sessions": sessions}

    # ------------------------------------------------------------------------------------------ policy
    def _policy(self, method: str, parts: list[str], raw: bytes, meta: dict) -> tuple[int, Any]:
        if not self.policy.enabled:
            return 404, PolicyError(404, "not_found", "the scripted policy is disabled").body()
        if parts == ["v1", "models"]:
            return (200, list_models(self.policy)) if method == "GET" else (405, PolicyError(
                405, "method_not_allowed", "use GET").body())
        if parts != ["v1", "chat", "completions"]:
            return 404, PolicyError(404, "not_found", f"no route for /{'/'.join(parts)}").body()
        if method != "POST":
            return 405, PolicyError(405, "method_not_allowed", "use POST").body()
        try:
            body = orjson.loads(raw or b"{}")
            self.counters["chat_completions"] += 1
            answer = chat_completion(body, self.policy)
            meta["delay_s"] = request_latency_s(body, self.policy)
            return 200, answer
        except orjson.JSONDecodeError:
            return 400, PolicyError(400, "invalid_json", "the request body is not valid JSON").body()
        except PolicyError as e:
            return e.status, e.body()


def create_app(seed: int = 0, capacity: int = 256, lease_ttl_s: float = 600.0,
               default_action_limit: int = DEFAULT_ACTION_LIMIT, policy: PolicyConfig | None = None,
               clock: Callable[[], float] = time.monotonic) -> SimApp:
    """Build the ASGI app: canonical + legacy shop dialects and the scripted policy, one seed's tasks."""
    return SimApp(seed=seed, capacity=capacity, lease_ttl_s=lease_ttl_s,
                  default_action_limit=default_action_limit, policy=policy, clock=clock)


def serve(host: str = "127.0.0.1", port: int = 8765, seed: int = 0, **kw: Any) -> None:
    """Run :func:`create_app` under uvicorn (blocking). ``kw`` goes to :func:`create_app`."""
    import uvicorn

    uvicorn.run(create_app(seed=seed, **kw), host=host, port=port, log_level="warning")
