"""Environment adapters: ShopSimulator's ``shop_env`` server and the pi-slime single-endpoint dialect.

Both return :class:`EnvStep`, so the runtime never knows which dialect it speaks.

``shop_env`` (dialect ``shop_env``, wire format in docs/sim_protocol.md): every action is ``POST /api/shop_agent``
and every answer is ``{"result": {...}}``. ``reset`` carries ``idx``, ``if_persona``,
``include_private_goal: false`` and ``interaction_mode: single_turn`` but never ``env_idx`` (the
server assigns a slot, blocking until one is free, so a reset's read timeout is ``lease_timeout_s``, and
running out of it is :class:`LeaseTimeout`); ``interact``,
``terminate`` and ``release_one`` carry ``env_idx`` and ``lease_id``. An error is
``{"result": {"error": "..."}}`` with HTTP 400 (bad field), 409 (stale lease) or 500; it becomes an
:class:`EnvServerError` with the server's message and what to do. Every page must be
``observation_state`` version ``shopping-observation-v7``; any other version is an
:class:`ObservationVersionError` naming it. ``GET /healthz`` is read once per run
(:func:`read_health`). The top-level ``reward`` is ``r_strict``.

``pi-slime`` (the slime example's server): the same path without leases (``rollout_session_id``
instead), the page text in ``instruction``, no ``observation_state`` (clickables are parsed from
``[button] ... [button_]`` in the text, fidelity ``parsed_text``), no ``terminate`` (the adapter
releases the slot and reports a zero-reward terminal itself); its ``reward`` is ``r_loose``.

The private goal never leaves this module: a terminal answer's ``goal`` is reduced to
``right_product`` (purchased asin equals the goal's; else ``reward_detail.target_asin_match``), and
the payloads kept for storage drop ``env_idx``, ``lease_id``, ``goal`` and the private reset fields. With
``persona`` off (``environment.persona: false``) neither does the persona: the reset's ``user_persona``, which
shop_env sends whatever ``if_persona`` says, is dropped here, so no prompt renders it and nothing stores it.
``close`` releases the slot and is idempotent.

Faults (docs/reliability.md): a request that got no usable answer (connection refused or reset, timeout,
truncated or non-JSON body, 429, 500/502/503/504) is retried up to ``ENV_RETRIES`` times with jittered
backoff (``Retry-After`` honoured) only when that cannot apply an action twice: always when the request
never reached the server (connect error) or the answer was 429; otherwise only against a server that
announces ``idempotency_keys: true`` in ``/healthz`` (the embedded one): every shop_env request then carries
a fresh ``request_id`` that its retries repeat, and the server answers a repeat from its reply cache instead
of applying it again. Any other failure raises :class:`EnvUnavailable`: the episode fails (a ``failures``
row, never a reward) and the runner re-runs it from reset.

Leases (docs/reliability.md, "Leases and time limits"): ``release_one`` is always retried (a repeat of a release
that was applied answers 409, which means the slot is no longer ours: nothing to do); a release that still gets no
answer is kept in the run's :class:`LeaseBook` and tried again at the run's end. A reset whose answer was lost (or
that timed out or was cancelled while waiting for a slot) may hold a slot whose lease id we never saw; nothing but
``release_all`` can free it, so the book counts it (``lost``) and the runner decides (``environment.exclusive``).
"""

from __future__ import annotations

import asyncio
import random
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..core.config import Environment, public_url
from ..core.errors import (
    EnvironmentError_,
    EnvProtocolError,
    EnvUnavailable,
    EnvUnreachable,
    ObservationVersionError,
)

OBSERVATION_VERSION = "shopping-observation-v7"
KNOWN_OBSERVATION_VERSIONS = frozenset({OBSERVATION_VERSION})
TERMINATION_REASONS = ("action_limit", "generation_length")
LEASE_FIELDS = frozenset({"env_idx", "lease_id"})
PRIVATE_FIELDS = frozenset({"goal", "private_task_instruction", "goal_options", "reason_key"})
PERSONA_FIELDS = frozenset({"user_persona"})
PRIMARY_REWARD = {"shop_env": "r_strict", "pi-slime": "r_loose"}
ENV_RETRIES = 4  # retries of one request that got no usable answer (when retrying is safe, see above)
ENV_BACKOFF_S = 0.1  # base of the jittered exponential backoff between them (capped at ENV_BACKOFF_CAP_S)
ENV_BACKOFF_CAP_S = 5.0
LEASE_TIMEOUT_S = 600.0  # default of environment.lease_timeout_s: a reset's wait for a free slot
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
BUTTON_RE = re.compile(r"\[button\]\s*(.*?)\s*\[button_\]")
PAGE_TITLES = {"页面：搜索首页": "search_home", "页面：搜索结果": "search_results", "页面：商品详情": "product_detail",
               "页面：商品属性页": "information_subpage", "页面：任务已终止": "terminal"}
STATUS_HINTS = {
    400: "the server refused the request as malformed; check that environment.url points at a shop_env server of the "
         "version shopsim-wh speaks (GET /healthz shows it)",
    409: "the lease is stale or invalid: the server restarted or the slot was released by someone else; the episode "
         "is recorded as failed and is retried when you run the same command again",
    500: "the environment server failed on this request; read its log (stepping an already finished session is a 500)",
}


class LeaseTimeout(EnvUnavailable):
    """A reset waited ``lease_timeout_s`` for a free slot (every slot leased) and got no answer."""


@dataclass
class LeaseBook:
    """The run's leases: how many are held now, resets whose lease id was lost, releases still owed."""

    held: int = 0  # adapters between the start of their reset and the end of their release
    lost: int = 0  # resets that may hold a slot whose lease id we never saw (only release_all frees it)
    unreleased: list[tuple[int, str]] = field(default_factory=list)  # (env_idx, lease_id) whose release failed
    reclaimed: int = 0  # release_all sent for lost leases
    gate: asyncio.Event = field(default_factory=asyncio.Event, repr=False)  # clear while a reclaim drains the pool

    def __post_init__(self) -> None:
        self.gate.set()


class EnvServerError(EnvironmentError_):
    """The environment server answered an error (HTTP status + its ``result.error`` message)."""

    def __init__(self, what: str, status: int, message: str):
        self.status = status
        self.server_message = message
        hint = STATUS_HINTS.get(status, "check the environment server's log")
        super().__init__(f"environment {what}: HTTP {status}: {message}\n{hint}")


@dataclass
class EnvStep:
    observation: str
    state: dict[str, Any]
    payload: dict[str, Any] = field(default_factory=dict)  # the public answer as stored (no lease fields, no goal)
    valid: bool = True
    feedback_code: str | None = None
    feedback_message: str | None = None
    done: bool = False
    reward: float | None = None
    reward_detail: dict[str, Any] | None = None
    purchase: dict[str, Any] | None = None
    termination_reason: str | None = None
    right_product: bool | None = None
    task_instruction: str | None = None  # reset only
    persona: Any = None  # reset only: user_persona


def public(payload: dict, hidden: frozenset = LEASE_FIELDS | PRIVATE_FIELDS) -> dict:
    return {k: v for k, v in payload.items() if k not in hidden}


def hidden_fields(persona: bool) -> frozenset:
    """The answer fields an adapter never passes on: the lease, the private goal and, when the run asked for no
    persona (``if_persona: false``), the persona: shop_env sends the goal's ``user_persona`` with every reset
    whatever ``if_persona`` says, and what is not passed on is neither rendered into a prompt nor stored."""
    return LEASE_FIELDS | PRIVATE_FIELDS | (frozenset() if persona else PERSONA_FIELDS)


def right_product(goal: Any, purchase: Any, detail: Any) -> bool | None:
    """Derived outcome fact, the only trace of the private goal that survives."""
    gasin = goal.get("asin") if isinstance(goal, dict) else None
    pasin = purchase.get("asin") if isinstance(purchase, dict) else None
    if gasin is not None:
        return pasin is not None and str(pasin).lower() == str(gasin).lower()
    if isinstance(detail, dict) and detail.get("target_asin_match") is not None:
        return bool(detail["target_asin_match"])
    return None


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _decode(resp: httpx.Response, what: str) -> dict:
    try:
        doc = resp.json()
    except ValueError:
        raise EnvProtocolError(f"environment {what}: HTTP {resp.status_code}, the answer is not JSON: {resp.text[:200]!r}; "
                               "is environment.url a ShopSimulator server (python -m shop_env.pack_api)?") from None
    result = doc.get("result") if isinstance(doc, dict) else None
    if not isinstance(result, dict):
        if resp.status_code >= 400:
            raise EnvServerError(what, resp.status_code, str(doc)[:300])
        raise EnvProtocolError(f"environment {what}: HTTP {resp.status_code}, the answer has no 'result' object: "
                               f"{str(doc)[:200]}; is environment.dialect right for this server?")
    if resp.status_code >= 400 or result.get("error"):
        raise EnvServerError(what, resp.status_code, str(result.get("error") or resp.reason_phrase))
    return result


def _backoff(attempt: int, retry_after: str | None) -> float:
    if retry_after:
        try:
            return min(max(float(retry_after), 0.0), ENV_BACKOFF_CAP_S)
        except ValueError:
            pass
    return min(ENV_BACKOFF_CAP_S, ENV_BACKOFF_S * 2**attempt) * random.uniform(0.5, 1.0)


async def send_with_retries(client: httpx.AsyncClient, endpoint: str, body: dict, timeout, what: str,
                            idempotent: bool) -> dict:
    """POST one shop_env request by the retry rule of the module docstring; the decoded ``result``."""
    for attempt in range(ENV_RETRIES + 1):
        retry_after = None
        try:
            resp = await client.post(endpoint, json=body, timeout=timeout)
        except httpx.HTTPError as exc:
            never_sent = isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))
            if body.get("action") == "reset" and isinstance(exc, httpx.ReadTimeout):
                wait = timeout.read if isinstance(timeout, httpx.Timeout) else timeout
                raise LeaseTimeout(
                    f"environment reset: no answer within {wait:g} s (environment.lease_timeout_s): every slot of the "
                    f"server at {public_url(str(client.base_url))} stayed leased; the episode is recorded as failed "
                    "and retried by the next run of the same command (raise environment.lease_timeout_s, lower "
                    "runtime.concurrency, or free the server's slots)") from None
            problem, safe = f"{type(exc).__name__}: {exc}", never_sent or idempotent
        else:
            never_sent, safe = False, True
            if resp.status_code in RETRY_STATUSES and (idempotent or resp.status_code == 429):
                retry_after = resp.headers.get("retry-after")
                problem = f"HTTP {resp.status_code}: {resp.text[:200]}"
            else:  # the server's own answer (an error answer raises EnvServerError with its message)
                try:
                    return _decode(resp, what)
                except EnvProtocolError as exc:  # not the protocol's body: garbled on the way?
                    if not idempotent:
                        raise EnvUnavailable(f"{exc} (the request may have been applied, so it is not retried)") from None
                    problem = str(exc).split(";")[0]
        if not safe or attempt == ENV_RETRIES:
            tried = f" (tried {attempt + 1} times)" if attempt else ""
            applied = "" if never_sent else (
                "; the outcome is unknown and this server cannot tell a repeat from a new action, so it is not retried"
                if not safe else "")
            raise EnvUnavailable(
                f"environment {what}: {problem}{tried}{applied}; the episode is recorded as failed and re-run from "
                f"reset: check that the server at {public_url(str(client.base_url))} is up and healthy", applied_maybe=not never_sent)
        await asyncio.sleep(_backoff(attempt, retry_after))
    raise AssertionError("unreachable")


async def read_health(client: httpx.AsyncClient, dialect: str) -> dict:
    """``GET /healthz`` of a shop_env server, checked: it must speak an observation version we know."""
    if dialect != "shop_env":
        return {"primary_reward": PRIMARY_REWARD[dialect], "observation_version": None, "environment_version": None}
    for attempt in range(ENV_RETRIES + 1):  # a GET changes nothing: always safe to retry
        try:
            resp = await client.get("healthz")
            doc = resp.json()
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            if attempt == ENV_RETRIES:
                raise EnvUnreachable(f"environment server at {public_url(str(client.base_url))} refused the connection "
                                     f"({type(exc).__name__}: {exc}): start it (python -m shop_env.pack_api, or "
                                     "`shopsim-wh sim serve`) or fix environment.url in the config",
                                     url=public_url(str(client.base_url))) from None
        except (httpx.HTTPError, ValueError) as exc:
            if attempt == ENV_RETRIES:
                raise EnvProtocolError(f"environment healthz at {public_url(str(client.base_url))}: {type(exc).__name__}: {exc}; start "
                                       "the server (python -m shop_env.pack_api) or fix environment.url") from None
        else:
            if resp.status_code not in RETRY_STATUSES or attempt == ENV_RETRIES:
                break
        await asyncio.sleep(_backoff(attempt, None))
    if resp.status_code != 200 or not isinstance(doc, dict):
        raise EnvProtocolError(f"environment healthz at {public_url(str(client.base_url))}: HTTP {resp.status_code}: {str(doc)[:200]}")
    version = doc.get("observation_version")
    if version not in KNOWN_OBSERVATION_VERSIONS:
        raise ObservationVersionError(
            f"environment at {public_url(str(client.base_url))} speaks observation_version {version!r}; shopsim-wh knows "
            f"{sorted(KNOWN_OBSERVATION_VERSIONS)}: upgrade shopsim-wh or point environment.url at a compatible server")
    return doc


@dataclass(frozen=True)
class AdapterOptions:
    """How an adapter talks to its server: the config's ``environment:`` persona and timeouts, and whether the server
    honours ``request_id`` (``GET /healthz``: ``idempotency_keys``; shop_env only)."""

    persona: bool = False
    timeout_s: float = 60.0
    lease_timeout_s: float = LEASE_TIMEOUT_S  # a reset's wait for a free slot
    idempotent: bool = False
    interaction_mode: str = "single_turn"  # shop_env only
    endpoint: str = "api/shop_agent"

    @classmethod
    def from_config(cls, env: Environment, idempotent: bool = False) -> AdapterOptions:
        return cls(persona=env.persona, timeout_s=env.timeout_s, lease_timeout_s=env.lease_timeout_s,
                   idempotent=idempotent)


class ShopEnvAdapter:
    """One instance owns at most one shop_env lease (one episode)."""

    dialect = "shop_env"
    fidelity = "canonical"

    def __init__(self, client: httpx.AsyncClient, options: AdapterOptions | None = None,
                 book: LeaseBook | None = None):
        o = options if options is not None else AdapterOptions()
        self.client = client
        self.lease_timeout_s = o.lease_timeout_s
        self.book = book if book is not None else LeaseBook()
        self.counted = False  # this adapter is in book.held
        self.idempotent = o.idempotent  # the server honours request_id (GET /healthz: idempotency_keys)
        self.persona = o.persona
        self.hidden = hidden_fields(o.persona)
        self.interaction_mode = o.interaction_mode
        self.timeout_s = o.timeout_s
        self.endpoint = o.endpoint
        self.env_idx: int | None = None
        self.lease_id: str | None = None
        self.environment_version: str | None = None
        self.observation_version: str | None = None

    def identity(self) -> dict:
        return {"adapter": "shopsim-wh-shop_env", "base_url": public_url(str(self.client.base_url)),
                "persona": self.persona, "interaction_mode": self.interaction_mode,
                "environment_version": self.environment_version, "observation_version": self.observation_version}

    @property
    def holds_lease(self) -> bool:
        return self.lease_id is not None

    async def _post(self, body: dict, what: str) -> dict:
        # reset queues until a slot is free: its read timeout is the lease wait
        timeout = httpx.Timeout(self.timeout_s, read=self.lease_timeout_s) if body["action"] == "reset" \
            else self.timeout_s
        if self.idempotent:  # a fresh key per request, repeated by its retries (else the real wire format)
            body = {**body, "request_id": uuid.uuid4().hex}
        if body["action"] == "reset":
            try:
                result = await send_with_retries(self.client, self.endpoint, body, timeout, what, self.idempotent)
            except (EnvUnavailable, EnvServerError, asyncio.CancelledError) as exc:
                # it may hold a slot whose lease id we never saw (a gateway's 502 / 504 may follow an applied reset;
                # the server's own 500 rolled its lease back)
                if getattr(exc, "applied_maybe", True) and getattr(exc, "status", 502) in (502, 504):
                    self.book.lost += 1
                raise
        else:
            result = await send_with_retries(self.client, self.endpoint, body, timeout, what,
                                             self.idempotent or body["action"] == "release_one")
        if body["action"] == "reset" and "env_idx" in result and result.get("lease_id"):
            # hold the lease before any check below can fail, so close() releases the slot
            self.env_idx, self.lease_id = int(result["env_idx"]), str(result["lease_id"])
        if body["action"] in ("reset", "interact", "terminate"):
            if not isinstance(result.get("observation"), str):
                raise EnvProtocolError(f"environment {what}: the answer has no rendered observation text")
            state = result.get("observation_state")
            if not isinstance(state, dict):
                raise EnvProtocolError(f"environment {what}: the answer has no observation_state; is this a shop_env "
                                       "server (else set environment.dialect: pi-slime)?")
            version = state.get("observation_version")
            if version not in KNOWN_OBSERVATION_VERSIONS:
                raise ObservationVersionError(
                    f"environment {what}: unknown observation_version {version!r} (known: "
                    f"{sorted(KNOWN_OBSERVATION_VERSIONS)}); upgrade shopsim-wh or point environment.url at a "
                    "compatible server")
        return result

    async def reset(self, task_id: int) -> EnvStep:
        if self.lease_id is not None or self.counted:
            raise EnvProtocolError("this adapter already holds a lease; use one adapter per episode")
        await self.book.gate.wait()  # a reclaim of lost leases (release_all) is draining the pool
        self.book.held += 1
        self.counted = True
        res = await self._post({"action": "reset", "idx": task_id, "if_persona": self.persona,
                                "include_private_goal": False, "interaction_mode": self.interaction_mode}, "reset")
        if self.lease_id is None:
            raise EnvProtocolError("environment reset: the answer has no env_idx / lease_id; is this a shop_env server?")
        if not isinstance(res.get("task_instruction"), str):
            raise EnvProtocolError("environment reset: the answer has no task_instruction")
        self.environment_version = res.get("environment_version")
        self.observation_version = res["observation_state"]["observation_version"]
        payload = public(res, self.hidden)
        return EnvStep(res["observation"], res["observation_state"], payload,
                       task_instruction=res["task_instruction"], persona=payload.get("user_persona"))

    def _to_step(self, res: dict) -> EnvStep:
        fb = res.get("action_feedback") if isinstance(res.get("action_feedback"), dict) else {}
        done = res.get("done") is True
        detail = res.get("reward_detail") if isinstance(res.get("reward_detail"), dict) else None
        if detail is not None:
            detail = public(detail)
        purchase = res.get("purchase") if isinstance(res.get("purchase"), dict) and res.get("purchase") else None
        valid = fb.get("valid")
        payload = public(res, self.hidden)
        if detail is not None:
            payload["reward_detail"] = detail
        return EnvStep(
            res["observation"], res["observation_state"], payload,
            valid=valid is not False,
            feedback_code=None if valid is not False else fb.get("reason"),
            feedback_message=None if valid is not False else fb.get("message"),
            done=done, reward=_number(res.get("reward")), reward_detail=detail, purchase=purchase,
            termination_reason=res.get("termination_reason") if done else None,
            right_product=right_product(res.get("goal"), purchase, detail) if done else None,
        )

    def _lease(self, what: str) -> dict:
        if self.lease_id is None:
            raise EnvProtocolError(f"environment {what} before reset (no lease held)")
        return {"env_idx": self.env_idx, "lease_id": self.lease_id}

    async def step(self, action: str) -> EnvStep:
        return self._to_step(await self._post({"action": "interact", **self._lease("interact"), "response": action},
                                              "interact"))

    async def terminate(self, reason: str) -> EnvStep:
        if reason not in TERMINATION_REASONS:
            raise ValueError(f"termination reason {reason!r}: shop_env accepts {TERMINATION_REASONS}")
        res = await self._post({"action": "terminate", **self._lease("terminate"), "termination_reason": reason},
                               "terminate")
        if res.get("termination_reason") != reason or res.get("done") is not True:
            raise EnvProtocolError(f"environment terminate({reason}) answered done={res.get('done')!r}, "
                                   f"termination_reason={res.get('termination_reason')!r}; restart the environment "
                                   "server with current ShopSimulator code")
        return self._to_step(res)

    async def close(self) -> None:
        try:
            if self.lease_id is not None:
                lease = self._lease("release_one")
                self.env_idx = self.lease_id = None
                await release(self.client, self.endpoint, lease, self.timeout_s, self.book)
        finally:
            if self.counted:
                self.counted = False
                self.book.held -= 1


async def release(client: httpx.AsyncClient, endpoint: str, lease: dict, timeout_s: float, book: LeaseBook) -> None:
    """``release_one`` of a known lease, retried (always safe, see the module docstring); a 409 means the slot is no
    longer ours (released by an earlier try, a ``release_all`` or a server restart). One that still fails is owed:
    kept in ``book.unreleased`` for the run's end, and raised."""
    body = {"action": "release_one", **lease}
    try:
        await send_with_retries(client, endpoint, body, timeout_s, "release_one", True)
    except EnvServerError as exc:
        if exc.status != 409:
            book.unreleased.append((lease["env_idx"], lease["lease_id"]))
            raise
    except BaseException:
        book.unreleased.append((lease["env_idx"], lease["lease_id"]))
        raise


async def release_all(client: httpx.AsyncClient, endpoint: str, timeout_s: float) -> None:
    """``release_all``: frees every slot of the server (every client's). Only for a server the run has alone."""
    await send_with_retries(client, endpoint, {"action": "release_all"}, timeout_s, "release_all", True)


class PiSlimeAdapter:
    """POST /api/shop_agent with ``rollout_session_id``; clickables parsed from the page text."""

    dialect = "pi-slime"
    fidelity = "parsed_text"

    def __init__(self, client: httpx.AsyncClient, options: AdapterOptions | None = None):
        o = options if options is not None else AdapterOptions()
        self.client = client
        self.lease_timeout_s = o.lease_timeout_s
        self.persona = o.persona
        self.hidden = hidden_fields(o.persona)
        self.timeout_s = o.timeout_s
        self.endpoint = o.endpoint
        self.session_id = uuid.uuid4().hex
        self.env_idx: int | None = None
        self.released = False

    def identity(self) -> dict:
        return {"adapter": "shopsim-wh-pi-slime", "base_url": public_url(str(self.client.base_url)),
                "persona": self.persona, "interaction_mode": "single_turn",
                "environment_version": None, "observation_version": None}

    @property
    def holds_lease(self) -> bool:
        return self.env_idx is not None and not self.released

    async def _call(self, body: dict, what: str) -> dict:
        timeout = httpx.Timeout(self.timeout_s, read=self.lease_timeout_s) if body["action"] == "reset" \
            else self.timeout_s
        try:
            resp = await self.client.post(self.endpoint, json={**body, "rollout_session_id": self.session_id},
                                          timeout=timeout)
        except httpx.ReadTimeout as exc:
            if body["action"] == "reset":
                raise LeaseTimeout(f"environment reset: no answer within {self.lease_timeout_s:g} s "
                                   "(environment.lease_timeout_s): every slot stayed leased; the episode is retried "
                                   "by the next run of the same command") from exc
            raise EnvProtocolError(f"environment {what}: {type(exc).__name__}: {exc}; is the server at "
                                   f"{public_url(str(self.client.base_url))} up?") from exc
        except httpx.HTTPError as exc:
            raise EnvProtocolError(f"environment {what}: {type(exc).__name__}: {exc}; is the server at "
                                   f"{public_url(str(self.client.base_url))} up?") from exc
        try:
            doc = resp.json()
        except ValueError:
            raise EnvProtocolError(f"environment {what}: HTTP {resp.status_code}, the answer is not JSON: "
                                   f"{resp.text[:200]!r}") from None
        if isinstance(doc, dict) and doc.get("error"):
            raise EnvServerError(what, resp.status_code, str(doc["error"]))
        return _decode(resp, what)

    @staticmethod
    def parse_state(text: str, done: bool = False) -> dict:
        """Clickables from the page text: WebShop's ``[button] x [button_]`` markup, or the Chinese layout's
        ``可点击元素：`` list (one ``- value`` per line) with search offered when ``- 支持商品搜索`` is listed."""
        buttons = BUTTON_RE.findall(text)
        if buttons:
            search = any(b.lower() == "search" for b in buttons)
            actions = [b for b in buttons if b.lower() != "search"]
        else:
            lines = text.splitlines()
            search = any(line.strip() == "- 支持商品搜索" for line in lines)
            actions = []
            if "可点击元素：" in (line.strip() for line in lines):
                start = [line.strip() for line in lines].index("可点击元素：") + 1
                for line in lines[start:]:
                    if not line.startswith("- "):
                        break
                    actions.append(line[2:].strip())
        title = next((line.strip() for line in text.splitlines() if line.strip().startswith("页面：")), "")
        page = "terminal" if done else PAGE_TITLES.get(title, "unknown")
        return {"observation_version": "parsed-text", "page_type": page,
                "search_available": not done and search, "actions": [] if done else actions}

    async def reset(self, task_id: int) -> EnvStep:
        res = await self._call({"action": "reset", "idx": task_id}, "reset")
        self.env_idx = res["env_idx"]
        text = res.get("instruction", "")
        return EnvStep(text, self.parse_state(text), public(res, self.hidden), task_instruction=None)

    def _to_step(self, res: dict) -> EnvStep:
        done = bool(res.get("done"))
        text = res.get("instruction", "")
        if res.get("over"):
            self.released = True
        detail = res.get("reward_detail") if isinstance(res.get("reward_detail"), dict) else None
        if detail:
            detail = {k: (float(v) if isinstance(v, bool) else v) for k, v in public(detail).items()}
        purchase = res.get("purchase") if isinstance(res.get("purchase"), dict) and res.get("purchase") else None
        payload = public(res, self.hidden)
        if detail is not None:
            payload["reward_detail"] = detail
        return EnvStep(
            text, self.parse_state(text, done), payload, done=done,
            reward=_number(res.get("reward")) if done else None, reward_detail=detail, purchase=purchase,
            # the server names no reason: a purchase ended it, or its own action limit did
            termination_reason=res.get("termination_reason") or (("purchase" if purchase else "action_limit") if done else None),
            right_product=right_product(res.get("goal"), purchase, detail) if done else None,
        )

    async def step(self, action: str) -> EnvStep:
        return self._to_step(await self._call({"action": "interact", "env_idx": self.env_idx, "response": action}, "interact"))

    async def terminate(self, reason: str) -> EnvStep:
        """No terminate action in this dialect: release the slot and report the zero-reward terminal."""
        await self.close()
        zero = {"r_type": 0.0, "r_att": 0.0, "r_option": 0.0, "r_price": 0.0}
        payload = {"done": True, "reward": 0.0, "reward_detail": zero, "termination_reason": reason,
                   "synthesized_by": "shopsim-wh (the pi-slime dialect has no terminate action)"}
        return EnvStep("", self.parse_state("", True), payload, done=True, reward=0.0, reward_detail=zero,
                       termination_reason=reason)

    async def close(self) -> None:
        if self.env_idx is None or self.released:
            return
        self.released = True
        await self._call({"action": "release_one", "env_idx": self.env_idx}, "release_one")


def make_adapter(dialect: str, client: httpx.AsyncClient, options: AdapterOptions | None = None,
                 book: LeaseBook | None = None):
    if dialect == "shop_env":
        return ShopEnvAdapter(client, options, book)
    if dialect == "pi-slime":
        return PiSlimeAdapter(client, options)
    raise ValueError(f"environment.dialect {dialect!r}: use shop_env or pi-slime")
