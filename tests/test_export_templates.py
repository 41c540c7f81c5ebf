"""Exported sft-* rows render through real chat templates (Qwen2.5, Qwen3, gpt-oss; copies in
tests/fixtures/third_party/chat_templates, licences in SOURCES.md) with transformers' apply_chat_template on a
tokenizer built here (no model, no download, no torch): every tool call's name and arguments appear once,
as a JSON object (not JSON text quoted again), and every tool result as often as the row holds it."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from . import export_fixtures as fx

_fixtures = fx.export_wh, fx.export_con, fx.every_kind
_wh, _con, _kinds = _fixtures  # pytest finds fixtures among module attributes

TEMPLATES = fx.REAL / "chat_templates"
KINDS = ("sft-action", "sft-trajectory", "sft-observation", "sft-subagent", "sft-outcome", "sft-summary")
PER_SOURCE = 2  # rows per (kind, source) rendered


def chat_tokenizer(name: str):
    """A tokenizer (no model, no download) whose chat template is tests/fixtures/.../chat_templates/<name>.jinja."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", eos_token="<|im_end|>")
    tok.chat_template = (TEMPLATES / f"{name}.jinja").read_text()
    return tok


@pytest.fixture(scope="module")
def tokenizers():
    return {name: chat_tokenizer(name) for name in ("qwen2_5", "qwen3", "gptoss")}


def tool_definitions(text: str, template: str) -> dict[str, str]:
    """{tool name: its definition as the rendered text shows it} from a rendered conversation; a name defined
    twice fails. Qwen templates list one tool JSON per line inside <tools>...</tools>; gpt-oss writes a
    TypeScript ``type NAME = (_: {...}) => any;`` per tool inside ``namespace functions {...}``."""
    defs: list[tuple[str, str]] = []
    if template.startswith("gptoss"):
        if "namespace functions {" in text:
            section = text.split("namespace functions {", 1)[1].split("} // namespace functions", 1)[0]
            defs = [(m.group(1), m.group(0)) for m in re.finditer(r"^type (\w+) = .*?=> any;$", section, re.M | re.S)]
    elif m := re.search(r"<tools>\n(.*?)\n</tools>", text, re.S):  # the intro names "<tools></tools>" first
        defs = [(json.loads(line)["function"]["name"], line) for line in m.group(1).splitlines()]
    names = [n for n, _ in defs]
    assert len(names) == len(set(names)), f"{template}: a tool defined more than once: {sorted(names)}"
    return dict(defs)


def conversation(row: dict) -> tuple[list[dict], list[dict]]:
    """(context, trained): the messages a trainer renders for a row of any kind with a `tools` column, split
    where the trained part starts: the decision's state and action (offline-rl, reasoning-requests), prompt and
    chosen continuation (preference), prompt and every step (prm), prompt and completion, or no context and the
    whole conversation (sft-trajectory)."""
    def msgs(value):
        value = json.loads(value) if isinstance(value, str) else value
        return [json.loads(m) if isinstance(m, str) else m for m in value or []]

    if "state" in row:
        return msgs(row["state"]), msgs(row["action"])
    if "chosen" in row:
        return msgs(row["prompt"]), msgs(row["chosen"])
    if "steps" in row:  # prm's default shape: one struct per step
        return msgs(row["prompt"]), [m for step in row["steps"] for m in msgs(step["completion"])]
    if "completions" in row:  # prm's --prm-shape trl-stepwise
        return msgs(row["prompt"]), [m for step in msgs(row["completions"]) for m in msgs(step)]
    if "completion" in row:
        return msgs(row["prompt"]), msgs(row["completion"])
    if "messages" not in row:  # a prompt-only row (trl-grpo): nothing trained, the prompt rendered with its tools
        return msgs(row["prompt"]), []
    return [], msgs(row["messages"])


def row_tools(row: dict) -> list[dict]:
    """A row's tool schemas: a list of JSON texts or objects, or one JSON text of the list (trl-grpo)."""
    tools = row.get("tools") or []
    tools = json.loads(tools) if isinstance(tools, str) else tools
    return [json.loads(t) if isinstance(t, str) else t for t in tools]


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


ALL_TEMPLATES = tuple(sorted(p.stem for p in TEMPLATES.glob("*.jinja")))  # the training variants too


def check_tools_render(row: dict, toks: dict, rejected: frozenset = frozenset()) -> int:
    """Render ``row`` (any kind with a `tools` column) through every template of ``toks``: each tool name is in
    the row's `tools` once and defined once in the text, and every enum-valued argument of a call the row trains
    (ShopSimRL's `click` value: every turn of a trajectory-level row, the decision of a per-step row) is in that
    tool's enum (merged over the trajectory, or the step's own) and in its rendered definition; calls whose id is
    in ``rejected`` (refused by the environment: ``actions.action_valid`` false) are left out. Returns the
    number of renders."""
    tools = row_tools(row)
    names = [t["function"]["name"] for t in tools]
    assert len(names) == len(set(names)), (row["sample_id"], names)
    schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools}
    context, trained = conversation(row)
    messages = context + trained
    calls = [c["function"] for m in trained if m.get("role") == "assistant" for c in m.get("tool_calls") or []
             if c.get("id") not in rejected]  # a call the environment refused picked no offered value
    picked = []  # (tool, argument value) of every enum-valued argument of a trained call to an offered tool
    for fn in calls:
        props = (schemas.get(fn["name"]) or {}).get("properties") or {}
        for arg, value in (fn["arguments"] or {}).items():
            enum = (props.get(arg) or {}).get("enum")
            if enum is not None:
                assert value in enum, (row["sample_id"], fn["name"], value, enum)
                picked.append((fn["name"], value))
    n = 0
    for template, tok in toks.items():
        if template.startswith("gptoss") and any(len(m.get("tool_calls") or []) > 1 for m in messages):
            continue  # gpt-oss's format carries one call per assistant message
        text = tok.apply_chat_template(messages, tools=tools or None, tokenize=False)
        defs = tool_definitions(text, template)
        assert sorted(defs) == sorted(names), (template, sorted(defs), names)
        for name, value in picked:
            assert value in defs[name], (template, name, value)
        n += 1
    return n


def test_every_tools_kind_defines_each_tool_once_in_every_template(every_kind):
    """Every kind with a `tools` column (ShopSimRL's per-page `click` schemas merged into one; docs/export.md
    "Tool lists"), rendered through every chat template of the fixtures."""
    toks = {name: chat_tokenizer(name) for name in ALL_TEMPLATES}
    kinds = [k for k, (res, out) in every_kind.items() if "tools" in _columns(out) and res.rows]
    assert {"sft-trajectory", "sft-action", "prm", "offline-rl", "kto"} <= set(kinds)  # preference: no pair here
    merged = rendered = 0
    for kind in kinds:
        for row in _rows(every_kind, kind):
            rendered += check_tools_render(row, toks)
            click = next((t for t in row_tools(row) if t["function"]["name"] == "click"), None)
            if click and {"next >", "< prev"} <= set(click["function"]["parameters"]["properties"]["value"]["enum"]):
                merged += 1  # a results page's and a product page's clickables in one schema
    assert rendered > 0 and merged > 0


def _columns(out) -> list[str]:
    return json.loads((out / "manifest.json").read_text())["columns"]
