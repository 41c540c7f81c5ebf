"""ChatModel: one OpenAI-compatible chat-completions call (OpenAI, vLLM, SGLang, the scripted policy).

The client is injected (``httpx.AsyncClient``), so the same code talks to a remote server, a local
vLLM, or the embedded policy through an ASGI transport. Retries: connection errors, 408, 409, 429
(honouring ``Retry-After``, capped at 30 s), 500/502/503/504 and a 200 whose body is cut short, with
jittered exponential backoff (``backoff_base_s * 2**attempt``, capped at 30 s, times U(0.5, 1)), at most
``max_retries`` retries, then :class:`ModelUnavailable`. 400/401/403/404/422 are not retried: they raise
:class:`ModelHTTPError` saying what to fix (401 names the variable ``model.api_key_env`` points at). A
chat completion changes nothing on the server, so a retry is always safe (docs/reliability.md). The API
key lives only in the client's headers, never in a returned value; it is masked out of any server text
quoted in an error.

A 200 answer is checked against the tool protocol the way ShopSimRL's client does (its order of
checks matters: the first failing check names the error). A response that breaks it is not an
exception: the output carries ``protocol_error`` ``{code, message}`` (or ``policy_failure`` with
code ``generation_length`` when the generation hit ``max_tokens`` without exactly one call) and the
runtime turns it into feedback for the model. The codes are the constants of :mod:`protocol_codes`
(ShopSimRL's own, in the order of the checks: ``invalid_json_response``, ``invalid_response_body``,
``missing_choices``, ``invalid_choice``, ``invalid_message``, ``invalid_tool_calls``, ``invalid_tool_call``,
``missing_function``, ``missing_tool_call_id``, ``missing_tool_name``, ``invalid_arguments_type``,
``invalid_arguments_json``, ``invalid_arguments_object``, ``unavailable_tool``, then ``generation_length``,
``tool_call_count``, ``mixed_content``, ``empty_response``). ``tool_calls`` holds the calls parsed before the
failing check.

Token ids (``model.record_tokens``, docs/usage.md "Recording token ids"): with ``ChatOptions.record_tokens`` each
request also carries ``return_token_ids: true`` and ``logprobs: true`` (before ``extra_body``, which may override
them); without it the body is exactly as before. The answer's ids are read by :func:`turn_tokens` (vLLM's
``prompt_token_ids`` + ``choices[0].token_ids``, SGLang's ``choices[0].prompt_token_ids`` + ``token_ids`` or
``meta_info.output_token_logprobs``) into ``ModelOutput.tokens``. A chat completion without them raises
:class:`TokenIdsMissing` (the run stops: the episodes would be half recorded); a 200 body that is not JSON is
retried like a cut-short one (it cannot be recorded).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..core import protocol_codes as pc
from ..core.config import Model, public_url
from ..core.errors import ModelError, ModelHTTPError, ModelUnavailable

RETRYABLE = {408, 409, 429, 500, 502, 503, 504}
HINTS = {
    400: "the server rejected the request: check model.sampling, model.extra_body and the tool schema it was sent",
    401: "authentication failed: check that model.api_key_env names a variable holding a valid key",
    403: "the key may not use this model: check the key's permissions or model.name",
    404: "not found: check model.base_url (it should end in /v1) and model.name",
    422: "the server could not process the request body: check model.extra_body and model.sampling",
}
BACKOFF_CAP_S = 30.0
TOKEN_FIELDS = {"return_token_ids": True, "logprobs": True}  # what record_tokens adds to every request
SERVER_TOKEN_HINT = (
    "vLLM's OpenAI server answers them from version 0.10.2 on (`return_token_ids`), SGLang's in versions whose chat "
    "request takes `return_token_ids` (older ones: add `return_prompt_token_ids: true` and `return_meta_info: true` "
    "to model.extra_body); hosted APIs return none: set model.record_tokens: false to run without recording them")


class TokenIdsMissing(ModelError):
    """``model.record_tokens`` is on and the server's answer carries no (or malformed) token ids: the run stops."""


@dataclass(frozen=True)
class TurnTokens:
    """One model turn's token ids as the server returned them."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float] | None  # one per completion id; None when the server sent none (or not one per id)


@dataclass
class ToolCall:
    id: str | None
    name: str | None
    arguments: str  # raw JSON text as sent by the model
    args: dict | None = None  # the decoded object (set when the raw text parsed to one)

    def message_dict(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


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
    raw: Any = field(repr=False, default_factory=dict)
    usage: dict = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    protocol_error: dict | None = None  # {code, message}
    policy_failure: dict | None = None  # {code: generation_length, message}
    tokens: TurnTokens | None = None  # with record_tokens: the turn's ids (see turn_tokens)

    @property
    def rejected(self) -> bool:
        return self.protocol_error is not None or self.policy_failure is not None

    def assistant_message(self) -> dict:
        """The assistant message as it goes back into the conversation (never the reasoning)."""
        msg: dict = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [c.message_dict() for c in self.tool_calls]
        return msg


@dataclass(frozen=True)
class ChatOptions:
    """What a :class:`ChatModel` sends with every request and how it retries (the config's ``model:`` keys)."""

    temperature: float = 0.6
    top_p: float | None = 1.0  # None = not sent
    max_tokens: int = 4096
    extra_body: dict[str, Any] = field(default_factory=dict)  # merged into every request body
    max_retries: int = 5
    backoff_base_s: float = 0.5
    send_seed: bool = False
    tool_choice: str = "auto"
    record_tokens: bool = False  # ask for token ids and logprobs, and require them (TokenIdsMissing)

    @classmethod
    def from_config(cls, m: Model) -> ChatOptions:
        """The options of a config's ``model:`` section (or any section of that shape, e.g. a teacher)."""
        return cls(temperature=m.sampling.temperature, top_p=m.sampling.top_p, max_tokens=m.sampling.max_tokens,
                   extra_body=m.extra_body, max_retries=m.max_retries, backoff_base_s=m.retry_backoff_s,
                   send_seed=m.send_seed, tool_choice=m.tool_choice,
                   record_tokens=bool(getattr(m, "record_tokens", False)))


class ChatModel:
    def __init__(self, client: httpx.AsyncClient, model: str, options: ChatOptions | None = None, *,
                 api_key_env: str | None = None):
        o = options if options is not None else ChatOptions()
        self.client = client
        self.api_key_env = api_key_env
        self.model = model
        self.sampling = {"temperature": o.temperature, "max_tokens": o.max_tokens}
        if o.top_p is not None:
            self.sampling["top_p"] = o.top_p
        self.extra_body = dict(o.extra_body or {})
        self.max_retries = o.max_retries
        self.backoff_base_s = o.backoff_base_s
        self.send_seed = o.send_seed
        self.tool_choice = o.tool_choice
        self.record_tokens = o.record_tokens

    def request_body(self, messages: list[dict], tools: list[dict], seed: int | None) -> dict:
        token_fields = TOKEN_FIELDS if self.record_tokens else {}
        body: dict[str, Any] = {"model": self.model, "messages": messages, **self.sampling, **token_fields,
                                **self.extra_body}
        if seed is not None and self.send_seed:
            body["seed"] = seed
        if tools:
            body["tools"] = tools
            body["tool_choice"] = self.tool_choice
        return body

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(float(retry_after), BACKOFF_CAP_S)
            except ValueError:
                pass
        return min(BACKOFF_CAP_S, self.backoff_base_s * 2**attempt) * random.uniform(0.5, 1.0)

    async def generate(self, messages: list[dict], tools: list[dict], seed: int | None = None) -> ModelOutput:
        body = self.request_body(messages, tools, seed)
        allowed = {t["function"]["name"] for t in tools} if tools else None
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
                    try:
                        doc = resp.json()
                    except ValueError as exc:
                        if not self.record_tokens:
                            return _rejected_output({"text": resp.text[:4000]}, latency_ms,
                                                    pc.INVALID_JSON_RESPONSE, f"model response is not valid JSON: {exc}")
                        last, retry_after = f"HTTP 200 with a body that is not JSON ({exc})", None
                    else:
                        out = parse_response(doc, latency_ms, require_tool_call=bool(tools), allowed_tools=allowed)
                        if self.record_tokens:
                            out.tokens = turn_tokens(doc)
                        return out
                else:
                    text = self._mask(resp.text[:500])
                    if resp.status_code not in RETRYABLE:
                        raise ModelHTTPError(resp.status_code, text, self._hint(resp.status_code))
                    last = f"HTTP {resp.status_code}: {text}"
                    retry_after = resp.headers.get("retry-after")
            if attempt < self.max_retries:
                await asyncio.sleep(self._delay(attempt, retry_after))
        raise ModelUnavailable(
            f"model server at {public_url(str(self.client.base_url))} failed {self.max_retries + 1} times (last: {self._mask(last)}); "
            "check that it is up, or raise model.max_retries"
        )

    def _hint(self, status: int) -> str:
        if status == 401:
            if self.api_key_env:
                return (f"authentication failed: check that the environment variable {self.api_key_env} "
                        "(named by model.api_key_env) holds a valid key for this server")
            if self.client.headers.get("authorization"):
                return "authentication failed: check the key this client sends (model.api_key_env names its variable)"
            return ("authentication failed and no key was sent: check the server's auth and set model.api_key_env "
                    "to the name of the environment variable holding the key")
        return HINTS.get(status, "check the model server's logs")

    def _mask(self, text: str) -> str:
        """Server text with the API key masked (some servers quote the key they were sent)."""
        auth = self.client.headers.get("authorization", "")
        key = auth.split(" ", 1)[1].strip() if " " in auth else ""
        if len(key) >= 8:
            text = text.replace(key, "***")
            text = text.replace(key[: len(key) // 2], "***")  # quoted cut short, as OpenAI's 'sk-abc...' does
        return text


def _rejected_output(raw: Any, latency_ms: float, code: str, message: str) -> ModelOutput:
    return ModelOutput(None, None, [], None, None, None, None, None, latency_ms, raw=raw,
                       protocol_error={"code": code, "message": message})


def _text(value: Any) -> str | None:
    """Content as text: a string, or the concatenated ``text`` parts of a content-part list."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(p["text"] for p in value if isinstance(p, dict) and isinstance(p.get("text"), str))
    return str(value)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def parse_response(doc: Any, latency_ms: float, *, require_tool_call: bool = True,
                   allowed_tools: set[str] | None = None) -> ModelOutput:
    """One chat-completions answer → ModelOutput, with the first protocol check that fails (if any)."""
    is_doc = isinstance(doc, dict)
    usage = doc.get("usage") if is_doc and isinstance(doc.get("usage"), dict) else {}
    out = ModelOutput(
        content=None, reasoning=None, tool_calls=[], finish_reason=None,
        response_id=doc.get("id") if is_doc and isinstance(doc.get("id"), str) else None,
        model=doc.get("model") if is_doc and isinstance(doc.get("model"), str) else None,
        prompt_tokens=_int(usage.get("prompt_tokens")), completion_tokens=_int(usage.get("completion_tokens")),
        latency_ms=latency_ms, raw=doc, usage=usage,
        metadata={k: doc[k] for k in ("created", "system_fingerprint", "service_tier") if k in doc} if is_doc else {},
    )

    def reject(code: str, message: str, policy: bool = False) -> ModelOutput:
        if policy:
            out.policy_failure = {"code": code, "message": message}
        else:
            out.protocol_error = {"code": code, "message": message}
        return out

    if not is_doc:
        return reject(pc.INVALID_RESPONSE_BODY, "model response body must be a JSON object")
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices:
        return reject(pc.MISSING_CHOICES, "model response has no choices")
    choice = choices[0]
    if not isinstance(choice, dict):
        return reject(pc.INVALID_CHOICE, "model response choice must be an object")
    out.finish_reason = choice.get("finish_reason")
    msg = choice.get("message")
    if not isinstance(msg, dict):
        return reject(pc.INVALID_MESSAGE, "model response choice has no message object")
    out.content = _text(msg.get("content"))
    out.reasoning = _text(msg.get("reasoning_content", msg.get("reasoning")))
    raw_calls = msg.get("tool_calls")
    raw_calls = [] if raw_calls is None else raw_calls
    if not isinstance(raw_calls, list):
        return reject(pc.INVALID_TOOL_CALLS, "model tool_calls must be a list")
    for rc in raw_calls:
        if not isinstance(rc, dict) or rc.get("type") != "function":
            return reject(pc.INVALID_TOOL_CALL, "tool call is not an object of type 'function'")
        fn = rc.get("function")
        if not isinstance(fn, dict):
            return reject(pc.MISSING_FUNCTION, "tool call has no function object")
        call_id, name, raw_args = rc.get("id"), fn.get("name"), fn.get("arguments")
        if not isinstance(call_id, str) or not call_id:
            return reject(pc.MISSING_TOOL_CALL_ID, "tool call has no id")
        if not isinstance(name, str) or not name:
            return reject(pc.MISSING_TOOL_NAME, "tool call has no function name")
        if not isinstance(raw_args, str):
            return reject(pc.INVALID_ARGUMENTS_TYPE, "tool call arguments must be a JSON string")
        try:
            args = json.loads(raw_args)
        except json.JSONDecodeError as exc:
            return reject(pc.INVALID_ARGUMENTS_JSON, f"tool call arguments are not valid JSON: {exc}")
        if not isinstance(args, dict):
            return reject(pc.INVALID_ARGUMENTS_OBJECT, "tool call arguments must decode to a JSON object")
        out.tool_calls.append(ToolCall(call_id, name, raw_args, args))
        if allowed_tools is not None and name not in allowed_tools:
            return reject(pc.UNAVAILABLE_TOOL, f"model called a tool this page does not offer: {name}")
    n = len(out.tool_calls)
    if require_tool_call and out.finish_reason == "length" and n != 1:
        return reject(pc.GENERATION_LENGTH, "generation reached max_tokens before returning exactly one valid tool call",
                      policy=True)
    if require_tool_call and n != 1:
        return reject(pc.TOOL_CALL_COUNT, f"model must return exactly one tool call, got {n}")
    if require_tool_call and out.content and out.content.strip():
        return reject(pc.MIXED_CONTENT, "model must not mix natural-language content with an action tool call")
    if not out.tool_calls and not (out.content and out.content.strip()):
        return reject(pc.EMPTY_RESPONSE, f"model returned neither content nor tool calls "
                                        f"(finish_reason={out.finish_reason!r}, reasoning_chars={len(out.reasoning or '')})")
    return out


def _ids(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        return value
    return None


def _floats(values: Any, n: int) -> list[float] | None:
    if not isinstance(values, list) or len(values) != n:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return None
    return [float(v) for v in values]


def turn_tokens(doc: Any) -> TurnTokens:
    """The token ids of one chat-completions answer, or :class:`TokenIdsMissing` naming the server option.

    Prompt ids: vLLM's top-level ``prompt_token_ids``, else SGLang's ``choices[0].prompt_token_ids``. Completion
    ids: ``choices[0].token_ids`` (vLLM, SGLang), else the ids of SGLang's ``choices[0].meta_info.output_token_logprobs``
    (``[logprob, id, text]`` triples). Logprobs: ``choices[0].logprobs.content[].logprob`` (OpenAI's shape, vLLM and
    SGLang), else those triples' logprobs; kept only when there is exactly one per completion id."""
    choice = doc.get("choices") if isinstance(doc, dict) else None
    choice = choice[0] if isinstance(choice, list) and choice and isinstance(choice[0], dict) else None
    if choice is None:
        raise TokenIdsMissing("model.record_tokens is on but the model server's answer is not a chat completion "
                              "with choices, so it carries no token ids; " + SERVER_TOKEN_HINT)
    prompt = _ids(doc.get("prompt_token_ids"))
    prompt = _ids(choice.get("prompt_token_ids")) if prompt is None else prompt
    meta = choice.get("meta_info") if isinstance(choice.get("meta_info"), dict) else {}
    triples = meta.get("output_token_logprobs")
    triples = triples if isinstance(triples, list) and all(isinstance(t, list | tuple) and len(t) >= 2
                                                           for t in triples) else None
    completion = _ids(choice.get("token_ids"))
    if completion is None and triples is not None:
        completion = _ids([t[1] for t in triples])
    missing = [name for name, v in (("prompt_token_ids", prompt), ("completion token_ids", completion)) if v is None]
    if missing:
        raise TokenIdsMissing(f"model.record_tokens is on but the model server's answer carries no {' and no '.join(missing)} "
                              f"(asked for with return_token_ids: true); " + SERVER_TOKEN_HINT)
    content = choice.get("logprobs", {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
    logprobs = _floats([e.get("logprob") if isinstance(e, dict) else None for e in content], len(completion)) \
        if isinstance(content, list) else None
    if logprobs is None and triples is not None:
        logprobs = _floats([t[0] for t in triples], len(completion))
    return TurnTokens(prompt, completion, logprobs)


def model_identity(m: Model, request_format: str) -> dict:
    """What a stored answer's model fingerprint covers (the judge's, a teacher's, a skill writer's): model name,
    base URL, the request format, sampling and extra_body; never the key (only its variable's name is in a config)."""
    return {"model": m.name, "base_url": m.base_url.rstrip("/"), "request_format": request_format,
            "sampling": m.sampling.model_dump(mode="json"), "extra_body": m.extra_body}


def model_fingerprint(m: Model, request_format: str) -> str:
    return hashlib.sha256(json.dumps(model_identity(m, request_format), sort_keys=True).encode()).hexdigest()


def load_model_file(path, cls, keys_hint: str):
    """A YAML file holding a ``model:`` section (a judge's, a teacher's, a skill writer's config) validated as
    ``cls``; its ``dotenv`` resolved against the file's directory. ``keys_hint`` ends the error message."""
    from pathlib import Path

    from pydantic import ValidationError

    from ..core.config_import import read_yaml_mapping
    from ..core.errors import ConfigError

    path = Path(path)
    try:
        cfg = cls.model_validate(read_yaml_mapping(path))
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigError(f"{path}: {'.'.join(str(x) for x in err['loc'])}: {err['msg']}; {keys_hint}") from None
    if cfg.dotenv and not Path(cfg.dotenv).is_absolute():
        cfg.dotenv = str(path.resolve().parent / cfg.dotenv)
    return cfg
