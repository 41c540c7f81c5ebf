"""Exported sft-* rows render through real chat templates (Qwen2.5, Qwen3, gpt-oss; copies in
tests/fixtures/third_party/chat_templates, licences in SOURCES.md) with transformers' apply_chat_template on a
tokenizer built here (no model, no download, no torch): every tool call's name and arguments appear once,
as a JSON object (not JSON text quoted again), and every tool result as often as the row holds it."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from . import export_fixtures as fx

_fixtures = fx.export_wh, fx.export_con, fx.every_kind
_wh, _con, _kinds = _fixtures  # pytest finds fixtures among module attributes

TEMPLATES = fx.REAL / "chat_templates"
KINDS = ("sft-action", "sft-trajectory", "sft-observation", "sft-subagent", "sft-outcome", "sft-summary")
PER_SOURCE = 2  # rows per (kind, source) rendered


@pytest.fixture(scope="module")
def tokenizers():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    out = {}
    for name in ("qwen2_5", "qwen3", "gptoss"):
        core = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
        core.pre_tokenizer = pre_tokenizers.Whitespace()
        tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", eos_token="<|im_end|>")
        tok.chat_template = (TEMPLATES / f"{name}.jinja").read_text()
        out[name] = tok
    return out


def _rows(every_kind, kind):
    import datasets

    out = every_kind[kind][1]
    ds = datasets.load_dataset("parquet", data_files=[str(f) for f in sorted(out.glob("*.parquet"))], split="train")
    seen: Counter = Counter()
    for row in ds:
        if seen[row["source_format"]] < PER_SOURCE:
            seen[row["source_format"]] += 1
            yield row


def _render(tok, messages, tools):
    return tok.apply_chat_template(messages, tools=tools or None, tokenize=False)


def _header(template: str, name: str) -> str:
    return f"to=functions.{name}" if template == "gptoss" else f'"name": "{name}"'


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _check_results(text: str, messages: list[dict], template: str) -> None:
    """Each tool result is in the text as often as the conversation holds it. gpt-oss's template writes a tool
    result as a JSON string by design (`message.content|tojson`), the others verbatim."""
    contents = [m["content"] for m in messages if isinstance(m.get("content"), str)]
    for m in messages:
        c = m.get("content")
        if m["role"] == "tool" and isinstance(c, str) and len(c) >= 20:
            needle = json.dumps(c, ensure_ascii=False) if template == "gptoss" else c
            assert text.count(needle) == sum(x.count(c) for x in contents), (template, c[:80])


def test_sft_rows_render_through_the_chat_templates(every_kind, tokenizers):
    rendered = Counter()
    for kind in KINDS:
        for row in _rows(every_kind, kind):
            tools = row.get("tools") or []
            conversation = row["messages"] if "messages" in row else row["prompt"] + row["completion"]
            for template, tok in tokenizers.items():
                if template == "gptoss" and any(len(m.get("tool_calls") or []) > 1 for m in conversation):
                    continue  # gpt-oss's format carries one call per assistant message
                full = _render(tok, conversation, tools)
                _check_results(full, conversation, template)
                if "messages" in row:
                    scope, calls = full, [c for m in conversation for c in m.get("tool_calls") or []]
                else:
                    prompt = _render(tok, row["prompt"], tools)
                    scope = full[_common_prefix(full, prompt):]
                    calls = row["completion"][0].get("tool_calls") or []
                for call in calls:
                    fn = call["function"]
                    assert isinstance(fn["arguments"], dict), (kind, fn)
                    same = sum(1 for c in calls if c["function"] == fn)
                    args = json.dumps(fn["arguments"], ensure_ascii=False)
                    assert scope.count(_header(template, fn["name"])) >= same, (kind, template, fn["name"])
                    if fn["arguments"]:
                        assert scope.count(args) == same, (kind, template, args[:200], scope[-600:])
                        assert json.dumps(args, ensure_ascii=False) not in scope  # never JSON text quoted again
                rendered[(kind, template)] += 1
    for kind in KINDS:
        for template in tokenizers:
            assert rendered[(kind, template)] > 0, (kind, template)
