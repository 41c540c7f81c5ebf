"""ChatModel against a real loopback HTTP server that answers with scripted statuses."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from shopsim_wh.errors import ModelHTTPError, ModelUnavailable
from shopsim_wh.model import ChatModel

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


def _call(url: str, **kw):
    async def go():
        async with httpx.AsyncClient(base_url=url + "/v1", headers={"Authorization": "Bearer canary"}) as c:
            m = ChatModel(c, "m", backoff_base_s=0.01, extra_body={"chat_template_kwargs": {"enable_thinking": True}}, **kw)
            return await m.generate([{"role": "user", "content": "hi"}], [], seed=5)
    return asyncio.run(go())


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
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
        _call(url, temperature=0.3, max_tokens=77)
    body = app.bodies[0]
    assert body["seed"] == 5 and body["temperature"] == 0.3 and body["max_tokens"] == 77
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    assert app.auth[0] == "Bearer canary"


def test_connection_errors_exhaust_retries_with_a_clear_message():
    from .conftest import free_port

    with pytest.raises(ModelUnavailable, match="failed 3 times"):
        _call(f"http://127.0.0.1:{free_port()}", max_retries=2)
