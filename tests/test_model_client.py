"""ChatModel against a real loopback HTTP server that answers with scripted statuses."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from shopsim_wh.core.errors import ModelHTTPError, ModelUnavailable
from shopsim_wh.rollout.model import ChatModel, ChatOptions

from .conftest import read_body, serve_asgi

OK = {"id": "chatcmpl-1", "model": "m", "choices": [{"finish_reason": "tool_calls", "message": {
    "role": "assistant", "content": None, "reasoning_content": "think",
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "click", "arguments": "{\"value\": \"x\"}"}}]}}],
    "usage": {"prompt_tokens": 11, "completion_tokens": 3}}


class Scripted:
    """Answers POST /v1/chat/completions with the next (status, headers) in the script, then 200."""

    def __init__(self, script):
        self.script = list(script)
        self.bodies: list[dict] = []
        self.auth: list[str | None] = []

    async def __call__(self, scope, receive, send):
        body = await read_body(receive)
        self.bodies.append(json.loads(body))
        self.auth.append(dict(scope["headers"]).get(b"authorization", b"").decode() or None)
        status, headers = self.script.pop(0) if self.script else (200, {})
        payload = json.dumps(OK if status == 200 else {"error": {"message": f"status {status}"}}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")] + [(k.encode(), v.encode()) for k, v in headers.items()]})
        await send({"type": "http.response.body", "body": payload})


CLICK = {"type": "function", "function": {"name": "click", "parameters": {"type": "object"}}}


def _call(url: str, tools=(CLICK,), **kw):
    async def go():
        async with httpx.AsyncClient(base_url=url + "/v1", headers={"Authorization": "Bearer canary"}) as c:
            opts = ChatOptions(backoff_base_s=0.01, extra_body={"chat_template_kwargs": {"enable_thinking": True}}, **kw)
            m = ChatModel(c, "m", opts)
            return await m.generate([{"role": "user", "content": "hi"}], list(tools), seed=5)
    return asyncio.run(go())


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504])
def test_retryable_statuses_are_retried(status):
    app = Scripted([(status, {}), (status, {})])
    with serve_asgi(app) as url:
        out = _call(url)
    assert len(app.bodies) == 3
    assert out.tool_calls[0].name == "click" and out.reasoning == "think" and out.prompt_tokens == 11
    assert out.response_id == "chatcmpl-1" and out.latency_ms > 0


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_client_errors_are_not_retried_and_say_what_to_fix(status):
    app = Scripted([(status, {})])
    with serve_asgi(app) as url, pytest.raises(ModelHTTPError) as err:
        _call(url)
    assert len(app.bodies) == 1
    assert err.value.status == status and "check" in str(err.value)


def test_retry_after_is_honoured():
    app = Scripted([(429, {"retry-after": "0.3"})])
    import time

    with serve_asgi(app) as url:
        t0 = time.perf_counter()
        _call(url)
        assert time.perf_counter() - t0 >= 0.3


def test_request_carries_seed_sampling_extra_body_and_key():
    app = Scripted([])
    with serve_asgi(app) as url:
        _call(url, temperature=0.3, max_tokens=77, send_seed=True, tool_choice="required")
        _call(url, top_p=None)
    body = app.bodies[0]
    assert body["seed"] == 5 and body["temperature"] == 0.3 and body["max_tokens"] == 77
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    assert body["tools"] == [CLICK] and body["tool_choice"] == "required"
    assert app.auth[0] == "Bearer canary"
    # the seed is sent only with send_seed (ShopSimRL's released configs send none); top_p null is left out
    assert "seed" not in app.bodies[1] and "top_p" not in app.bodies[1] and app.bodies[1]["tool_choice"] == "auto"


def test_connection_errors_exhaust_retries_with_a_clear_message():
    from .conftest import free_port

    with pytest.raises(ModelUnavailable, match="failed 3 times"):
        _call(f"http://127.0.0.1:{free_port()}", max_retries=2)


class Answers:
    """Answers every chat-completions request with the next body of a list (status 200)."""

    def __init__(self, bodies):
        self.bodies = list(bodies)

    async def __call__(self, scope, receive, send):
        await read_body(receive)
        body = self.bodies.pop(0)
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": raw})


def _msg(finish="tool_calls", **message):
    return {"id": "r", "choices": [{"finish_reason": finish, "message": {"role": "assistant", **message}}]}


def _fn(name="click", args='{"value": "x"}', call_id="c1", type_="function"):
    return {"id": call_id, "type": type_, "function": {"name": name, "arguments": args}}


# (response body, expected code, expected number of calls parsed before the failing check)
PROTOCOL_CASES = [
    (b"not json", "invalid_json_response", 0),
    ([1, 2], "invalid_response_body", 0),
    ({"choices": []}, "missing_choices", 0),
    ({"choices": ["x"]}, "invalid_choice", 0),
    ({"choices": [{"finish_reason": "stop"}]}, "invalid_message", 0),
    (_msg(tool_calls={"a": 1}), "invalid_tool_calls", 0),
    (_msg(tool_calls=[_fn(type_="code")]), "invalid_tool_call", 0),
    (_msg(tool_calls=[{"id": "c1", "type": "function"}]), "missing_function", 0),
    (_msg(tool_calls=[_fn(call_id="")]), "missing_tool_call_id", 0),
    (_msg(tool_calls=[_fn(name="")]), "missing_tool_name", 0),
    (_msg(tool_calls=[{"id": "c1", "type": "function", "function": {"name": "click", "arguments": {"value": "x"}}}]),
     "invalid_arguments_type", 0),
    (_msg(tool_calls=[_fn(), _fn(args='{"value": ', call_id="c2")]), "invalid_arguments_json", 1),
    (_msg(tool_calls=[_fn(args="[1]")]), "invalid_arguments_object", 0),
    (_msg(tool_calls=[_fn(name="search")]), "unavailable_tool", 1),
    (_msg(tool_calls=[_fn(), _fn(call_id="c2")]), "tool_call_count", 2),
    (_msg(finish="stop", content="I would click x."), "tool_call_count", 0),
    (_msg(content="Clicking x.", tool_calls=[_fn()]), "mixed_content", 1),
]


@pytest.mark.parametrize("body,code,parsed", PROTOCOL_CASES, ids=[c[1] for c in PROTOCOL_CASES])
def test_protocol_checks_name_the_first_failing_rule(body, code, parsed):
    with serve_asgi(Answers([body])) as url:
        out = _call(url)
    assert out.protocol_error is not None and out.protocol_error["code"] == code, out.protocol_error
    assert out.policy_failure is None and len(out.tool_calls) == parsed and out.protocol_error["message"]


def test_length_without_exactly_one_call_is_a_policy_failure_but_one_valid_call_is_kept():
    with serve_asgi(Answers([_msg(finish="length", content=None, reasoning_content="th" * 50),
                             _msg(finish="length", content=None, tool_calls=[_fn()]),
                             _msg(finish="stop", content="  ")])) as url:
        truncated, kept, empty = _call(url), _call(url), _call(url, tools=())
    assert truncated.policy_failure["code"] == "generation_length" and truncated.protocol_error is None
    assert kept.protocol_error is None and kept.policy_failure is None and kept.tool_calls[0].args == {"value": "x"}
    # without tools nothing requires a call; an answer with neither text nor a call is still empty
    assert empty.protocol_error["code"] == "empty_response"
