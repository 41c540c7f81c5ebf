"""ChatModel: one OpenAI-compatible chat-completions call (OpenAI, vLLM, SGLang, the scripted policy).

The client is injected (``httpx.AsyncClient``), so the same code talks to a remote server, a local
vLLM, or the embedded policy through an ASGI transport. Retries: connection errors, 408, 429
(honouring ``Retry-After``) and 500/502/503/504, with jittered exponential backoff. 400/401/403/404/422
are not retried: they raise :class:`ModelHTTPError` saying what to fix. The API key lives only in the
client's headers, never in a returned value.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from .errors import ModelError, ModelHTTPError, ModelUnavailable

RETRYABLE = {408, 429, 500, 502, 503, 504}
HINTS = {
    400: "the server rejected the request: check model.sampling, model.extra_body and the tool schema it was sent",
    401: "authentication failed: check that model.api_key_env names a variable holding a valid key",
    403: "the key may not use this model: check the key's permissions or model.name",
    404: "not found: check model.base_url (it should end in /v1) and model.name",
    422: "the server could not process the request body: check model.extra_body and model.sampling",
}


@dataclass
class ToolCall:
    id: str | None
    name: str | None
    arguments: str  # raw JSON text as sent by the model


@dataclass
class ModelOutput:
    content: str | None
    reasoning: str | None
    tool_calls: list[ToolCall]
    finish_reason: str | None
    response_id: str | None
    model: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_ms: float
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


class ChatModel:
    def __init__(
        self,
        client: httpx.AsyncClient,
        model: str,
        *,
        temperature: float = 0.6,
        top_p: float = 1.0,
        max_tokens: int = 4096,
        extra_body: dict[str, Any] | None = None,
        max_retries: int = 5,
        backoff_base_s: float = 0.5,
        backoff_cap_s: float = 30.0,
    ):
        self.client = client
        self.model = model
        self.sampling = {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens}
        self.extra_body = dict(extra_body or {})
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s

    def request_body(self, messages: list[dict], tools: list[dict], seed: int) -> dict:
        body = {"model": self.model, "messages": messages, "tools": tools, "tool_choice": "auto",
                "seed": seed, **self.sampling}
        body.update(self.extra_body)
        return body

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(float(retry_after), self.backoff_cap_s)
            except ValueError:
                pass
        return min(self.backoff_cap_s, self.backoff_base_s * 2**attempt) * random.uniform(0.5, 1.0)

    async def generate(self, messages: list[dict], tools: list[dict], seed: int) -> ModelOutput:
        body = self.request_body(messages, tools, seed)
        last: str = ""
        for attempt in range(self.max_retries + 1):
            t0 = time.perf_counter()
            try:
                resp = await self.client.post("chat/completions", json=body)
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                last = f"{type(exc).__name__}: {exc}"
                retry_after = None
            else:
                latency_ms = (time.perf_counter() - t0) * 1000
                if resp.status_code == 200:
                    return parse_response(resp.json(), latency_ms)
                text = resp.text[:500]
                if resp.status_code not in RETRYABLE:
                    raise ModelHTTPError(resp.status_code, text, HINTS.get(resp.status_code, "check the model server's logs"))
                last = f"HTTP {resp.status_code}: {text}"
                retry_after = resp.headers.get("retry-after")
            if attempt < self.max_retries:
                await asyncio.sleep(self._delay(attempt, retry_after))
        raise ModelUnavailable(
            f"model server at {self.client.base_url} failed {self.max_retries + 1} times (last: {last}); "
            "check that it is up, or raise model.max_retries"
        )


def parse_response(doc: dict, latency_ms: float) -> ModelOutput:
    try:
        choice = doc["choices"][0]
        msg = choice.get("message") or {}
    except (KeyError, IndexError, TypeError):
        raise ModelError(f"chat-completions response has no choices[0]: {str(doc)[:300]}") from None
    calls = []
    for tc in msg.get("tool_calls") or []:
        fn = tc.get("function") or {}
        args = fn.get("arguments")
        calls.append(ToolCall(tc.get("id"), fn.get("name"), args if isinstance(args, str) else _dumps(args)))
    usage = doc.get("usage") or {}
    return ModelOutput(
        content=msg.get("content"),
        reasoning=msg.get("reasoning_content") or msg.get("reasoning"),
        tool_calls=calls,
        finish_reason=choice.get("finish_reason"),
        response_id=doc.get("id"),
        model=doc.get("model"),
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        latency_ms=latency_ms,
        raw=doc,
    )


def _dumps(obj: Any) -> str:
    import json

    return json.dumps(obj, ensure_ascii=False)
