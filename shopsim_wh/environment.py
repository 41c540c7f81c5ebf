"""ShopEnvironment adapters for the two dialects of docs/sim_protocol.md.

Both return the same :class:`EnvStep` so the runtime never knows which dialect it speaks. reset
never asks for the private goal; the canonical adapter checks ``observation_version``; ``close`` is
idempotent and safe after a terminal step. The legacy dialect has no observation_state: clickables
are parsed from the page text (``[button] value [button_]``), so its fidelity is ``parsed_text``.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from .errors import EnvProtocolError, ObservationVersionError

KNOWN_OBSERVATION_VERSIONS = {"shopsim-obs-v1"}
BUTTON_RE = re.compile(r"\[button\]\s*(.*?)\s*\[button_\]")


@dataclass
class EnvStep:
    observation: str
    state: dict[str, Any]
    valid: bool = True
    feedback_code: str | None = None
    feedback_message: str | None = None
    done: bool = False
    reward: float | None = None
    reward_detail: dict[str, Any] | None = None
    purchase: dict[str, Any] | None = None
    termination_reason: str | None = None
    right_product: bool | None = None  # computed here; the goal itself is dropped at the boundary
    task: dict[str, Any] = field(default_factory=dict)


def _right_product(goal: dict | None, purchase: dict | None) -> bool | None:
    if not goal or not purchase:
        return None if not goal else False
    return goal.get("asin") is not None and goal.get("asin") == purchase.get("asin")


def _raise_for(resp: httpx.Response, what: str) -> dict:
    try:
        doc = resp.json()
    except ValueError:
        raise EnvProtocolError(f"environment {what}: HTTP {resp.status_code}, body is not JSON: {resp.text[:200]}") from None
    if resp.status_code >= 400:
        err = doc.get("error") if isinstance(doc, dict) else None
        msg = err.get("message") if isinstance(err, dict) else err
        raise EnvProtocolError(f"environment {what}: HTTP {resp.status_code}: {msg or doc}")
    return doc


class CanonicalEnvironment:
    fidelity = "canonical"

    def __init__(self, client: httpx.AsyncClient, action_limit: int | None = None):
        self.client = client
        self.action_limit = action_limit
        self.lease: str | None = None

    def _check_state(self, state: Any) -> dict:
        if not isinstance(state, dict):
            raise EnvProtocolError("environment answered without observation_state; is this a canonical-dialect server?")
        version = state.get("observation_version")
        if version not in KNOWN_OBSERVATION_VERSIONS:
            raise ObservationVersionError(
                f"unknown observation_version {version!r} (known: {sorted(KNOWN_OBSERVATION_VERSIONS)}); "
                "upgrade shopsim-wh or point environment.url at a compatible server")
        return state

    def _to_step(self, doc: dict) -> EnvStep:
        fb = doc.get("action_feedback") or {}
        goal = doc.get("goal")
        return EnvStep(
            observation=doc.get("observation", ""),
            state=self._check_state(doc.get("observation_state")),
            valid=bool(fb.get("valid", True)),
            feedback_code=fb.get("code"),
            feedback_message=fb.get("message"),
            done=bool(doc.get("done")),
            reward=doc.get("reward"),
            reward_detail=doc.get("reward_detail"),
            purchase=doc.get("purchase"),
            termination_reason=doc.get("termination_reason"),
            right_product=_right_product(goal, doc.get("purchase")) if doc.get("done") else None,
        )

    async def reset(self, task_id: int) -> EnvStep:
        body = {"task_id": task_id, "include_private_goal": False, "action_limit": self.action_limit}
        doc = _raise_for(await self.client.post("v1/sessions", json=body), "reset")
        doc.pop("goal", None)  # defensive: never keep a private goal from reset
        self.lease = doc["lease_id"]
        step = EnvStep(doc.get("observation", ""), self._check_state(doc.get("observation_state")))
        task = dict(doc.get("task") or {})
        task.pop("goal", None)
        step.task = task
        return step

    async def step(self, action: str) -> EnvStep:
        return self._to_step(_raise_for(await self.client.post(f"v1/sessions/{self.lease}/step", json={"action": action}), "step"))

    async def terminate(self, reason: str) -> EnvStep:
        resp = await self.client.post(f"v1/sessions/{self.lease}/terminate", json={"reason": reason})
        return self._to_step(_raise_for(resp, "terminate"))

    async def close(self) -> None:
        if self.lease is None:
            return
        lease, self.lease = self.lease, None
        await self.client.delete(f"v1/sessions/{lease}")


class LegacyEnvironment:
    """POST /api/shop_agent: reset / interact / release_one. Clickables parsed from text."""

    fidelity = "parsed_text"

    def __init__(self, client: httpx.AsyncClient, action_limit: int | None = None, endpoint: str = "api/shop_agent"):
        self.client = client
        self.endpoint = endpoint
        self.session_id = uuid.uuid4().hex
        self.env_idx: int | None = None
        self.released = False

    async def _call(self, body: dict, what: str) -> dict:
        doc = _raise_for(await self.client.post(self.endpoint, json={**body, "rollout_session_id": self.session_id}), what)
        if "error" in doc and doc["error"]:
            raise EnvProtocolError(f"environment {what}: {doc['error']}")
        if "result" not in doc:
            raise EnvProtocolError(f"environment {what}: answer has no 'result': {str(doc)[:200]}")
        return doc["result"]

    @staticmethod
    def parse_state(text: str, done: bool = False) -> dict:
        buttons = BUTTON_RE.findall(text)
        search = any(b.lower() == "search" for b in buttons)
        actions = [b for b in buttons if b.lower() != "search"]
        return {"observation_version": "parsed-text", "page": "done" if done else None,
                "search_available": search and not done, "actions": [] if done else actions}

    async def reset(self, task_id: int) -> EnvStep:
        res = await self._call({"action": "reset", "idx": task_id}, "reset")
        self.env_idx = res["env_idx"]
        text = res.get("instruction", "")
        step = EnvStep(text, self.parse_state(text))
        step.task = {"task_id": task_id}
        return step

    def _to_step(self, res: dict) -> EnvStep:
        done = bool(res.get("done"))
        text = res.get("instruction", "")
        if res.get("over"):
            self.released = True
        detail = res.get("reward_detail")
        if detail:
            detail = {k: (float(v) if isinstance(v, bool) else v) for k, v in detail.items()}
        return EnvStep(
            text, self.parse_state(text, done), done=done,
            reward=res.get("reward") if done else None, reward_detail=detail,
            purchase=res.get("purchase"),
            termination_reason=res.get("termination_reason") or (
                ("purchase" if res.get("purchase") else "action_limit") if done else None),
            right_product=_right_product(res.get("goal"), res.get("purchase")) if done else None,
        )

    async def step(self, action: str) -> EnvStep:
        return self._to_step(await self._call({"action": "interact", "env_idx": self.env_idx, "response": action}, "step"))

    async def terminate(self, reason: str) -> EnvStep:
        await self.close()
        zero = {"r_type": 0.0, "r_att": 0.0, "r_option": 0.0, "r_price": 0.0}
        return EnvStep("", self.parse_state("", True), done=True, reward=0.0, reward_detail=zero, termination_reason=reason)

    async def close(self) -> None:
        if self.env_idx is None or self.released:
            return
        self.released = True
        await self._call({"action": "release_one", "env_idx": self.env_idx}, "release")
