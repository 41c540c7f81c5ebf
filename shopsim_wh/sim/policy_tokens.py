"""The scripted policy's token ids, in the built-in tokenizer ``builtin:shopsim-bytes-v1``, answered as vLLM does.

A chat request with ``return_token_ids: true`` gets the prompt the way a vLLM server tokenizes it, top-level
``prompt_token_ids`` = the ids of ``render(messages, tools, add_generation_prompt=True)``, and
``choices[0].token_ids`` = the ids of what the policy "sampled": the assistant content, then
``tool_call_text(call)`` of each call, then ``<|im_end|>`` (a ``length`` answer is cut short: its truncated
reasoning, no ``<|im_end|>``). So the completion is exactly what the template renders for the assistant message the
runtime appends, and the next turn's prompt continues it whenever the rendering of the earlier messages is
unchanged. The reasoning of other answers is not part of the sampled ids (the template never renders it).

With ``logprobs: true``, ``choices[0].logprobs.content[]`` holds one ``{token, logprob, bytes, top_logprobs}``
per completion id. The logprobs are **synthetic**: ``log(U(0.5, 1))`` per token, drawn from a seed made of the same
request hash that decides the policy's choice, so equal requests get equal values; they are no model's
probabilities. Nothing else of the answer changes (``usage`` stays the policy's estimate), and without those
request keys the answer is byte for byte what it was.
"""

from __future__ import annotations

import math
import random
from typing import Any

from ..core.tokenizer import builtin, tool_call_text

_TOKENIZER = builtin()


def completion_text(message: dict, finish_reason: str | None) -> str:
    """The text the policy sampled for ``message`` (see the module docstring)."""
    if finish_reason == "length":
        return message.get("reasoning_content") or ""
    calls = "".join(tool_call_text(c) for c in message.get("tool_calls") or [])
    return (message.get("content") or "") + calls + _TOKENIZER.eos


def _logprob_entries(ids: list[int], seed: str) -> list[dict]:
    rng = random.Random(seed + ":logprobs")
    out = []
    for i in ids:
        token = _TOKENIZER.decode([i])
        raw = bytes([i - _TOKENIZER.OFFSET]) if i >= _TOKENIZER.OFFSET else token.encode("utf-8")
        out.append({"token": token, "logprob": round(math.log(0.5 + 0.5 * rng.random()), 6), "bytes": list(raw),
                    "top_logprobs": []})
    return out


def attach(answer: dict, body: dict[str, Any], tools: list[dict] | None, seed: str) -> dict:
    """Add the token fields ``body`` asks for to a policy ``answer`` (in place; returned)."""
    if not (body.get("return_token_ids") or body.get("logprobs")):
        return answer
    choice = answer["choices"][0]
    ids = _TOKENIZER.encode(completion_text(choice["message"], choice.get("finish_reason")))
    if body.get("return_token_ids"):
        answer["prompt_token_ids"] = _TOKENIZER.chat_ids(body["messages"], tools, add_generation_prompt=True)
        choice["token_ids"] = ids
    if body.get("logprobs"):
        choice["logprobs"] = {"content": _logprob_entries(ids, seed)}
    return answer
