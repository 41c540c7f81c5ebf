"""Scripted shopping policy behind an OpenAI-compatible ``/v1/chat/completions`` endpoint.

The policy stands in for a real model and plays fair: it reads only the request (``messages`` and ``tools``),
never the simulator's state or the private goal. It reads the request in the ShopSimRL runtime's format: the task
from the first user message (``购物任务：\n{task_instruction}\n\n{observation}``), the latest page from the newest
``tool`` message, the page's actions from the ``click.value`` enum, search availability from the ``search`` tool,
and its own earlier tool calls from the assistant messages (see ``shopper.py``).

Strategy: search with the task's product words; on the results page open the best match of title and key
attributes by word overlap (optionally skipping items above the stated budget and items already visited); on the
product page choose a value for every option axis (the one the task names, with probability
``p_select_options``, otherwise the first value offered), then ``buy now``. It is deliberately imperfect.

Profiles (``PROFILES``; the request's ``model`` picks one):

- ``scripted-strong``: good but fallible; picks the named value of an option axis only about half the time,
  checks prices half the time; failure injections ~1.5% of calls in total.
- ``scripted-noisy``: random results and random clicks more often, rarely selects options; each failure kind
  at 2-6%.
- ``scripted-weak``: mostly random results, seldom checks anything; failures ~2% each of the first six kinds.

Skill parameters: ``p_select_options``, ``p_check_price`` (behaviour probabilities; temperature sharpens them
toward 0/1, at temperature 0 they become ``p > 0.5``), ``p_random_result``, ``p_random_click``, ``p_inspect``
(noise probabilities, multiplied by ``min(temperature, 1)``, so 0 at temperature 0).

Failure kinds (``FAILURE_KINDS``), each drawn per call with its rate, first hit wins:
``no_tool_call`` (text answer, finish_reason ``stop``), ``multiple_tool_calls`` (two calls),
``malformed_arguments`` (arguments are not JSON), ``unknown_tool`` (a tool name not offered),
``invalid_click`` (well-formed ``click`` whose value is not in the enum), ``length`` (finish_reason ``length``,
truncated reasoning, no call), ``mixed_content`` (the call plus visible text), ``wrong_arguments`` (JSON arguments
with an extra key), ``missing_function`` (a sentence and a call without its ``function`` object). Each surfaces as its own
protocol code (see ``shopsim_wh.core.protocol_codes``). At temperature 0 the profile's default rates are off; rates given explicitly in
``scripted_policy.failure_rates`` (or ``PolicyConfig.overrides``) always apply. Independently, if the reasoning
plus call would exceed ``max_tokens`` (1 token per word), the reply is truncated with finish_reason ``length``.

Skills: the system/developer messages (system prompt, persona, the ``[可选策略提示]`` block of
``<skill id=".." version="..">...</skill>`` entries) are scanned (case-insensitive) for these phrases:

- "select every option" or "choose the size and color options before buying": ``p_select_options`` -> 0.97;
- "check the price" or "stay under the budget": ``p_check_price`` -> 0.97.

Any other text changes nothing but the random draws. Randomness comes from a hash of the request's ``seed`` (when
sent), the model name, ``messages`` and ``tools``: identical requests give identical responses.

Token ids (``return_token_ids: true``, ``logprobs: true`` in the request, as vLLM takes them): the answer then also
carries ``prompt_token_ids``, ``choices[0].token_ids`` and ``choices[0].logprobs`` in the built-in tokenizer
``builtin:shopsim-bytes-v1``, with synthetic logprobs (``policy_tokens.py``); the choice itself is the same.

Per-request overrides: body key ``"scripted_policy": {"failure_rates": {kind: rate}, "p_select_options": x,
..., "ignore_skills": bool, "latency_ms": x}``; the overrides replace profile parameters, recognised skills then
apply on top. ``latency_ms`` makes the server wait that long before answering (as a real model server would),
without blocking other requests: it exercises the runner's concurrency.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from shopsim_wh.sim import policy_tokens
from shopsim_wh.sim.shopper import Shopper, read_view

FAILURE_KINDS = ("no_tool_call", "multiple_tool_calls", "malformed_arguments", "unknown_tool", "invalid_click",
                 "length", "mixed_content", "wrong_arguments", "missing_function")  # new kinds go last: see _rates
SKILL_PARAMS = ("p_select_options", "p_check_price", "p_random_result", "p_random_click", "p_inspect")
SELECT_OPTION_PHRASES = ("select every option", "choose the size and color options before buying")
CHECK_PRICE_PHRASES = ("check the price", "stay under the budget")
CREATED = 1_735_689_600  # fixed: identical requests give byte-identical responses


@dataclass(frozen=True)
class PolicyProfile:
    name: str
    description: str
    p_select_options: float
    p_check_price: float
    p_random_result: float
    p_random_click: float
    p_inspect: float
    failure_rates: Mapping[str, float] = field(default_factory=dict)


def _rates(**kw: float) -> dict[str, float]:
    """A profile's rates, 0 for a kind not named. The draws go in FAILURE_KINDS order and stop at the first hit,
    so a kind appended with rate 0 leaves every answer of a profile unchanged."""
    return {k: float(kw.get(k, 0.0)) for k in FAILURE_KINDS}


PROFILES: dict[str, PolicyProfile] = {
    p.name: p
    for p in (
        PolicyProfile("scripted-strong", "competent scripted shopper; misses options about half the time",
                      p_select_options=0.5, p_check_price=0.5, p_random_result=0.12, p_random_click=0.01,
                      p_inspect=0.1,
                      failure_rates=_rates(no_tool_call=0.003, multiple_tool_calls=0.002,
                                           malformed_arguments=0.003, unknown_tool=0.002, invalid_click=0.003,
                                           length=0.002)),
        PolicyProfile("scripted-noisy", "sloppy shopper: random results and clicks, frequent protocol errors",
                      p_select_options=0.3, p_check_price=0.3, p_random_result=0.35, p_random_click=0.08,
                      p_inspect=0.2,
                      failure_rates=_rates(no_tool_call=0.05, multiple_tool_calls=0.04, malformed_arguments=0.05,
                                           unknown_tool=0.03, invalid_click=0.06, length=0.02, mixed_content=0.03,
                                           wrong_arguments=0.03, missing_function=0.02)),
        PolicyProfile("scripted-weak", "barely competent: mostly random results, rarely checks anything",
                      p_select_options=0.1, p_check_price=0.1, p_random_result=0.7, p_random_click=0.15,
                      p_inspect=0.1,
                      failure_rates=_rates(no_tool_call=0.02, multiple_tool_calls=0.02, malformed_arguments=0.02,
                                           unknown_tool=0.02, invalid_click=0.02, length=0.02)),
    )
}


@dataclass(frozen=True)
class PolicyConfig:
    """Server-side policy settings: which profiles exist and overrides applied to every request."""

    enabled: bool = True
    profiles: Mapping[str, PolicyProfile] = field(default_factory=lambda: dict(PROFILES))
    overrides: Mapping[str, Any] = field(default_factory=dict)


class PolicyError(Exception):
    def __init__(self, status: int, code: str, message: str, type_: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.type = status, code, message, type_

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "code": self.code}}


def list_models(config: PolicyConfig) -> dict:
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": CREATED, "owned_by": "shopsim-wh", "description": p.description}
            for name, p in config.profiles.items()
        ],
    }


def effective_params(profile: PolicyProfile, overrides: Mapping[str, Any], system_text: str,
                     temperature: float) -> tuple[dict[str, float], dict[str, float], list[str]]:
    """Behaviour params, failure rates and recognised skills after overrides, skills and temperature."""
    params = {k: float(getattr(profile, k)) for k in SKILL_PARAMS}
    rates = dict(profile.failure_rates)
    explicit_rates: dict[str, float] = {}
    for key, value in overrides.items():
        if key == "failure_rates":
            explicit_rates.update({k: float(r) for k, r in value.items()})
        elif key in SKILL_PARAMS:
            params[key] = float(value)
    skills: list[str] = []
    if not overrides.get("ignore_skills"):
        low = system_text.lower()
        if any(p in low for p in SELECT_OPTION_PHRASES):
            skills.append("select_options")
            params["p_select_options"] = max(params["p_select_options"], 0.97)
        if any(p in low for p in CHECK_PRICE_PHRASES):
            skills.append("check_price")
            params["p_check_price"] = max(params["p_check_price"], 0.97)
    t = max(0.0, temperature)
    for k in ("p_select_options", "p_check_price"):
        params[k] = _sharpen(params[k], t)
    for k in ("p_random_result", "p_random_click", "p_inspect"):
        params[k] = params[k] * min(t, 1.0)
    if t == 0:
        rates = {}
    rates.update(explicit_rates)
    return params, rates, skills


def _sharpen(p: float, t: float) -> float:
    if t == 0:
        return 1.0 if p > 0.5 else 0.0
    if p <= 0 or p >= 1:
        return p
    a, b = p ** (1 / t), (1 - p) ** (1 / t)
    return a / (a + b)


def _validate_overrides(raw: Any) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise PolicyError(400, "invalid_scripted_policy", "scripted_policy must be an object")
    for key, value in raw.items():
        if key == "failure_rates":
            if not isinstance(value, Mapping) or any(k not in FAILURE_KINDS for k in value):
                raise PolicyError(400, "invalid_scripted_policy",
                                  f"failure_rates keys must be among {list(FAILURE_KINDS)}")
            if any(not isinstance(r, int | float) or not 0 <= r <= 1 for r in value.values()):
                raise PolicyError(400, "invalid_scripted_policy", "failure rates must be numbers in [0, 1]")
        elif key in SKILL_PARAMS:
            if not isinstance(value, int | float) or not 0 <= value <= 1:
                raise PolicyError(400, "invalid_scripted_policy", f"{key} must be a number in [0, 1]")
        elif key == "latency_ms":
            if not isinstance(value, int | float) or not 0 <= value <= 60_000:
                raise PolicyError(400, "invalid_scripted_policy", "latency_ms must be a number in [0, 60000]")
        elif key != "ignore_skills":
            raise PolicyError(400, "invalid_scripted_policy",
                              f"unknown scripted_policy key {key!r}; known: failure_rates, ignore_skills, latency_ms, "
                              + ", ".join(SKILL_PARAMS))
    return dict(raw)


def _merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = {**out.get(k, {}), **v} if k == "failure_rates" else v
    return out


# ------------------------------------------------------------------------------------------ responding

_INVALID_VALUES = ("add to cart", "checkout", "buy it now please", "proceed to payment")


def _tool_call(call_id: str, name: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def request_latency_s(body: Any, config: PolicyConfig) -> float:
    """Seconds the server should wait before answering this request (``latency_ms`` override, default 0)."""
    per_request = body.get("scripted_policy") if isinstance(body, Mapping) else None
    value = (per_request or {}).get("latency_ms", config.overrides.get("latency_ms", 0)) if isinstance(per_request or {}, Mapping) else 0
    return float(value or 0) / 1000


def chat_completion(body: Any, config: PolicyConfig) -> dict:
    """Answer one chat-completions request body; raises :class:`PolicyError` for bad requests."""
    if not isinstance(body, Mapping):
        raise PolicyError(400, "invalid_body", "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise PolicyError(400, "missing_model", "'model' is required")
    profile = config.profiles.get(model)
    if profile is None:
        raise PolicyError(404, "model_not_found", f"The model '{model}' does not exist; known: "
                          + ", ".join(config.profiles))
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise PolicyError(400, "missing_messages", "'messages' must be a non-empty list")
    if body.get("stream"):
        raise PolicyError(400, "unsupported", "streaming is not supported by the scripted policy")
    tools = body.get("tools") if isinstance(body.get("tools"), list) else None
    overrides = _merge(_validate_overrides(config.overrides), _validate_overrides(body.get("scripted_policy")))
    temperature = body.get("temperature")
    temperature = 1.0 if not isinstance(temperature, int | float) else float(temperature)
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")

    key = hashlib.sha256(
        orjson.dumps([body.get("seed"), model, messages, tools], option=orjson.OPT_SORT_KEYS)
    ).hexdigest()
    view = read_view(messages, tools)
    params, rates, skills = effective_params(profile, overrides, view.system_text, temperature)
    decision = Shopper(params, random.Random(key + ":decide")).decide(view)
    if skills:
        decision.reasoning.insert(1, "I keep the guidance from the system prompt in mind.")
    reasoning = " ".join(decision.reasoning)
    arg_name = "query" if decision.name == "search" else "value"
    arguments = json.dumps({arg_name: decision.argument})
    calls = [_tool_call(f"call_{key[:24]}", decision.name, arguments)]
    content, finish = None, "tool_calls"

    fail_rng = random.Random(key + ":fail")
    failure = next((k for k in FAILURE_KINDS if fail_rng.random() < rates.get(k, 0.0)), None)
    if failure == "no_tool_call":
        calls, finish = [], "stop"
        content = f"I would {decision.name} '{decision.argument}' next."
    elif failure == "multiple_tool_calls":
        other = fail_rng.choice(view.clickables) if view.clickables else decision.argument
        calls.append(_tool_call(f"call_{key[24:48]}", "click", json.dumps({"value": other})))
    elif failure == "malformed_arguments":
        calls[0]["function"]["arguments"] = arguments[:-2] + "'"
    elif failure == "unknown_tool":
        calls[0]["function"]["name"] = "buy_now" if decision.name == "click" else "lookup"
    elif failure == "invalid_click":
        bad = next(x for x in _INVALID_VALUES if x not in view.clickables)
        calls[0]["function"].update(name="click", arguments=json.dumps({"value": bad}))
    elif failure == "mixed_content":
        content = f"I will {decision.name} '{decision.argument}'."
    elif failure == "wrong_arguments":
        calls[0]["function"]["arguments"] = json.dumps({arg_name: decision.argument, "reason": "best match"})
    elif failure == "missing_function":  # with a sentence, as a model that half-wrote the call would
        content = f"Calling {decision.name} now."
        del calls[0]["function"]
    words = reasoning.split()
    call_tokens = sum(math.ceil(len(c.get("function", {}).get("arguments", "")) / 4) + 3 for c in calls)
    if failure == "length":
        words = words[: max(1, len(words) // 2)]
        reasoning, calls, finish = " ".join(words), [], "length"
    if isinstance(max_tokens, int) and max_tokens > 0 and len(words) + call_tokens > max_tokens and calls:
        words = words[:max_tokens]
        reasoning, calls, content, finish = " ".join(words), [], None, "length"
    completion_tokens = len(words) + (call_tokens if calls else 0) + (len(content.split()) if content else 0)
    prompt_chars = len(orjson.dumps(messages)) + (len(orjson.dumps(tools)) if tools else 0)
    prompt_tokens = math.ceil(prompt_chars / 4)
    message: dict[str, Any] = {"role": "assistant", "content": content, "reasoning_content": reasoning}
    if calls:
        message["tool_calls"] = calls
    return policy_tokens.attach({
        "id": f"chatcmpl-{key[:24]}",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "system_fingerprint": "shopsim-scripted-v1",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }, body, tools, key)


def profile_with(profile: PolicyProfile, **changes: Any) -> PolicyProfile:
    """A copy of ``profile`` with some fields replaced (for custom registries in ``PolicyConfig``)."""
    return dataclasses.replace(profile, **changes)
