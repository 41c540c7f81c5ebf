"""Journey (issue 27, item 3): tool lists a trainer can use.

`shopsim-wh run` (embedded ShopSimulator, a noisy scripted policy, two rollouts per task so preference pairs exist)
plus `shopsim-wh ingest` of traces other projects wrote (ATIF, Claude Code, agent_multi_turn: tools without
per-step lists) -> `shopsim-wh export KIND` for every kind whose columns (`export --list`) hold `tools` -> in each
row each tool name appears once, and rendered through every chat template in tests/fixtures/third_party/
chat_templates each tool is defined once and the `click` enum holds every value the row's trained turns clicked
and the environment accepted (`shopsim-wh sql` over `actions.action_valid`; ShopSimRL offers one `click` schema
per page; docs/export.md "Tool lists")."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from .export_fixtures import FIX, REAL
from .helpers import write_config
from .journeys import ok, shopsim
from .test_export_templates import ALL_TEMPLATES, chat_tokenizer, check_tools_render, row_tools

NEED_MORE_INPUT = {"sft-reasoning"}  # rows only after `synth-reasoning` got a teacher's answers


@pytest.fixture(scope="module")
def journey(tmp_path_factory):
    base = tmp_path_factory.mktemp("journey_tools")
    write_config(base / "c.yaml", tasks={"sample_size": 4, "repeats": 2}, model={"name": "scripted-noisy"})
    ok(shopsim("run", "c.yaml", "-w", "wh", "-q", cwd=base))
    ok(shopsim("ingest", "-w", "wh", "-q", REAL / "atif_login-trace", REAL / "claude_code_session-share",
               FIX / "ingest" / "agent_multi_turn", cwd=base))
    listed = json.loads(ok(shopsim("export", "--list", "--summary-format", "json", "-w", "wh", cwd=base)).stdout)
    kinds = sorted(k["name"] for k in listed if any(c[0] == "tools" for c in k["columns"]))
    rows = {}
    for kind in [*kinds, "ntp"]:
        ok(shopsim("export", kind, "-w", "wh", "-o", f"out/{kind}", "--where", "true", "-f", "jsonl", "--quiet",
                   cwd=base))
        rows[kind] = [json.loads(line) for f in sorted((base / "out" / kind).glob("*.jsonl"))
                      for line in f.read_text().splitlines()]
    refused = json.loads(ok(shopsim("sql", "SELECT call_id FROM actions WHERE NOT action_valid", "-w", "wh",
                                    "-f", "json", cwd=base)).stdout)
    return kinds, rows, frozenset(r["call_id"] for r in refused)


def test_every_kind_with_tools_lists_each_name_once_and_renders_it_once(journey):
    kinds, rows, refused = journey
    assert {"sft-trajectory", "sft-action", "prm", "preference", "offline-rl", "kto"} <= set(kinds)
    toks = {name: chat_tokenizer(name) for name in ALL_TEMPLATES}
    per_kind: Counter = Counter()
    for kind in kinds:
        if kind not in NEED_MORE_INPUT:
            assert rows[kind], f"{kind}: no row; the journey's input misses it"
        seen: Counter = Counter()
        for row in rows[kind]:
            if seen[row.get("source_format")] < 2:  # every row is checked for names; 2 per source rendered
                seen[row.get("source_format")] += 1
                per_kind[kind] += check_tools_render(row, toks, refused)
            names = [t["function"]["name"] for t in row_tools(row)]
            assert len(names) == len(set(names)), (kind, row["sample_id"], names)
    assert all(per_kind[k] > 0 for k in kinds if k not in NEED_MORE_INPUT), per_kind


def test_a_trajectory_row_offers_one_click_with_every_page_value_it_clicked(journey):
    _, rows, refused = journey
    runner = [r for r in rows["sft-trajectory"] if r["source_format"] == "shopsim-wh-runner"]
    assert runner
    for row in runner:
        tools = {t["function"]["name"]: t["function"] for t in row["tools"]}
        assert sorted(tools) == ["click", "search"]
        enum = tools["click"]["parameters"]["properties"]["value"]["enum"]
        assert len(enum) == len(set(enum))
        clicked = [c["function"]["arguments"]["value"] for m in row["messages"] for c in m.get("tool_calls") or []
                   if c["function"]["name"] == "click" and c["id"] not in refused]
        assert clicked and set(clicked) <= set(enum), (row["sample_id"], set(clicked) - set(enum))
    # the trace document lists a tool once too
    for row in rows["ntp"]:
        section = row["text"].split("## tools\n", 1)[1].split("\n\n", 1)[0] if "## tools\n" in row["text"] else ""
        names = [line[2:].split(":", 1)[0] for line in section.splitlines() if line.startswith("- ")]
        assert len(names) == len(set(names)), (row["sample_id"], names)


def test_an_empty_assistant_turn_exports_as_empty_text_every_template_renders(tmp_path):
    """A ShopSimRL record (raw JSON lines) whose first turn was an `empty_response`: the model said nothing and
    called nothing. Exported, that assistant message is empty text (null broke the qwen2.5 template), and the
    trajectory renders through every template."""
    from . import shopsimrl_raw as raw

    j = raw.job("val", 7)
    rec = raw.record(j, raw.provenance(raw.NO_SKILLS), 1.0, {"r_strict": 1.0})
    feedback = {"role": "user", "content": json.dumps({"type": "tool_protocol_error", "code": "empty_response",
                                                       "message": "model returned neither content nor tool calls"})}
    conv = rec["conversation"]
    rec["conversation"] = [*conv[:2], {"role": "assistant", "content": None}, feedback, *conv[2:]]
    empty = {"content": None, "reasoning": None, "tool_calls": [], "finish_reason": "stop", "usage": {},
             "response_id": "resp-empty", "metadata": {}, "latency_ms": 5.0, "raw_response": None,
             "protocol_error": {"code": "empty_response", "message": "model returned neither content nor tool calls"},
             "policy_failure": None}
    first = {**rec["steps"][0], "step_index": 1, "model": empty, "action": None, "environment": None,
             "protocol_feedback": json.loads(feedback["content"])}
    rec["steps"] = [first, {**rec["steps"][0], "step_index": 2}]
    raw.write_run(tmp_path / "runs", "empty-turn", [rec])
    ok(shopsim("ingest", tmp_path / "runs", "-w", tmp_path / "wh"))
    ok(shopsim("export", "sft-trajectory", "--out", tmp_path / "out", "--where", "true", "-f", "jsonl",
               "-w", tmp_path / "wh"))
    [row] = [json.loads(line) for f in sorted((tmp_path / "out").glob("*.jsonl")) for line in f.read_text().splitlines()]
    assistants = [m for m in row["messages"] if m["role"] == "assistant"]
    assert assistants[0]["content"] == "" and not assistants[0].get("tool_calls")
    for name in ALL_TEMPLATES:
        chat_tokenizer(name).apply_chat_template(row["messages"], tools=row["tools"], tokenize=False)
