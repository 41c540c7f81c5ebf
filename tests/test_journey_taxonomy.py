"""Journey: one vocabulary of protocol-error codes, from a native run and from an ingested ShopSimRL run to the
error taxonomy, through the installed CLI.

A user runs the noisy demo policy (`shopsim-wh run`), asks `shopsim-wh sql` what went wrong and gets specific labels
(none in `protocol_other`); then ingests a ShopSimRL run directory whose steps carry the original runtime's codes
(written here as raw JSON lines) and gets the same labels for them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shopsim_wh.core.protocol_codes import LABELS

from . import shopsimrl_raw as raw
from .journeys import noisy_run, ok, shopsim

# the original runtime's codes the ingested record carries, and the label a user should see for each
ORIGINAL = {"invalid_tool_arguments": "protocol_invalid_arguments", "missing_function": "protocol_malformed_tool_call",
            "empty_response": "protocol_empty_response", "tool_call_count": "protocol_tool_call_count",
            "mixed_content": "protocol_mixed_content"}
FEEDBACK = "上一轮未执行任何环境动作。请基于同一页面重新作答，只调用一个当前提供的函数工具，不要输出可见文本。"


def _call(cid: str, args: dict) -> dict:
    return {"call_id": cid, "name": "click", "arguments": args, "raw_arguments": json.dumps(args)}


def _wire(call: dict) -> dict:
    return {"id": call["call_id"], "type": "function",
            "function": {"name": call["name"], "arguments": call["raw_arguments"]}}


def _protocol_turn(k: int, obs: str, tools: list, code: str, calls: list, content: str | None) -> tuple[dict, list]:
    """One repaired turn as shopsimrl/runtime.py records it: the step and the messages it appends."""
    error = {"code": code, "message": f"{code}: the turn broke the tool protocol"}
    feedback = {"type": "tool_protocol_error", **error, "instruction": FEEDBACK, "available_tools": ["click"]}
    model = {"content": content, "reasoning": None, "tool_calls": calls, "finish_reason": "tool_calls", "usage": {},
             "response_id": f"resp-{k}", "metadata": {}, "latency_ms": 10.0, "protocol_error": error,
             "policy_failure": None, "raw_response": {"choices": [{"finish_reason": "tool_calls"}]}}
    step = {"step_index": k, "observation": obs, "tools": tools, "model": model, "action": None, "environment": None,
            "protocol_error": error, "protocol_feedback": feedback}
    text = json.dumps(feedback, ensure_ascii=False, separators=(",", ":"))
    if calls:
        msgs = [{"role": "assistant", "content": content, "tool_calls": [_wire(c) for c in calls]},
                *({"role": "tool", "tool_call_id": c["call_id"], "content": text} for c in calls)]
    else:
        msgs = ([{"role": "assistant", "content": content}] if content else []) + [{"role": "user", "content": text}]
    return step, msgs


def repaired_record(j: dict, prov: dict) -> dict:
    """A purchase after five repaired turns, one per original code."""
    rec = raw.record(j, prov, 1.0, {"r_type": 1.0, "r_att": 1.0, "r_option": 1.0, "r_price": 1.0})
    buy = rec["steps"][0]
    obs, tools = buy["observation"], buy["tools"]
    turns = [("invalid_tool_arguments", [_call("c1", {"value": "buy now", "why": "it fits"})], None),
             ("missing_function", [], None),
             ("empty_response", [], None),
             ("tool_call_count", [_call("c2", {"value": "buy now"}), _call("c3", {"value": "buy now"})], None),
             ("mixed_content", [_call("c4", {"value": "buy now"})], "I will buy it now.")]
    steps, msgs = [], []
    for k, (code, calls, content) in enumerate(turns, start=1):
        step, m = _protocol_turn(k, obs, tools, code, calls, content)
        steps.append(step)
        msgs += m
    rec["steps"] = [*steps, {**buy, "step_index": len(steps) + 1}]
    rec["conversation"] = rec["conversation"][:2] + msgs + rec["conversation"][2:]
    return rec


def length_record(j: dict, prov: dict) -> dict:
    """A first turn that ran out of tokens: the runtime terminates the episode with generation_length."""
    rec = raw.record(j, prov, 0.0, {})
    failure = {"code": "generation_length",
               "message": "model generation reached max_tokens before returning exactly one valid tool call"}
    model = {"content": None, "reasoning": "让我想想" * 50, "tool_calls": [], "finish_reason": "length", "usage": {},
             "response_id": "resp-len", "metadata": {}, "latency_ms": 30.0, "protocol_error": None,
             "policy_failure": failure, "raw_response": {"choices": [{"finish_reason": "length"}]}}
    buy = rec["steps"][0]
    rec["steps"] = [{"step_index": 1, "observation": buy["observation"], "tools": buy["tools"], "model": model,
                     "policy_failure": failure, "action": None, "environment": None}]
    zero = {c: 0.0 for c in ("r_type", "r_att", "r_option", "r_price", "r_loose", "r_strict")}
    rec["final"] = {"observation": "任务已终止。", "observation_state": {"page_type": "terminal", "search_available": False,
                                                                   "actions": []},
                    "reward": 0.0, "done": True, "over": True, "reward_detail": {**zero, "r_success": 0},
                    "purchase": {}, "termination_reason": "generation_length"}
    rec["conversation"] = rec["conversation"][:2]
    return rec


@pytest.fixture(scope="module")
def wh(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("journey-taxonomy")
    noisy_run(tmp_path_factory, tmp / "wh")  # `shopsim-wh run` of the noisy demo policy (persona on), 8 x 2
    jobs = [raw.job("val", 101), raw.job("val", 102)]
    prov = raw.provenance(raw.NO_SKILLS)
    run_dir = raw.write_run(tmp / "runs", "original-codes", [repaired_record(jobs[0], prov),
                                                              length_record(jobs[1], prov)],
                            plan_doc=raw.plan("original-codes", jobs, raw.NO_SKILLS))
    ok(shopsim("ingest", run_dir, "--warehouse", tmp / "wh", "--quiet"))
    return tmp / "wh"


def sql(wh: Path, query: str, **params) -> list[dict]:
    args = [a for k, v in params.items() for a in ("-p", f"{k}={v}")]
    return json.loads(ok(shopsim("sql", query, "--warehouse", wh, "--format", "json", *args)).stdout)


def test_a_noisy_run_gets_a_specific_label_for_every_protocol_error(wh):
    labels = sql(wh, "SELECT l.code, l.detail, count(*) AS n FROM error_labels AS l JOIN runs AS r USING (run_id) "
                     "WHERE r.experiment = $exp AND l.category = 'protocol' GROUP BY ALL ORDER BY ALL", exp="noisy")
    steps = sql(wh, "SELECT protocol_error, count(*) AS n FROM steps JOIN runs USING (run_id) "
                    "WHERE experiment = $exp AND protocol_error IS NOT NULL GROUP BY ALL", exp="noisy")
    assert {r["detail"]: r["code"] for r in labels} == {r["protocol_error"]: LABELS[r["protocol_error"]] for r in steps}
    assert sum(r["n"] for r in labels) == sum(r["n"] for r in steps)  # one label per protocol-error turn
    assert "protocol_other" not in {r["code"] for r in labels}
    # the demo's noise exercises the vocabulary: several codes, several labels
    assert len({r["detail"] for r in labels}) >= 4 and len({r["code"] for r in labels}) >= 3, labels
    # a protocol-error turn sends nothing to the environment, so its calls are no invalid_action
    assert not sql(wh, "SELECT * FROM error_labels AS l WHERE code = 'invalid_action' "
                       "AND detail IN (SELECT code FROM protocol_codes)")


def test_the_original_runtimes_codes_get_the_same_labels(wh):
    rows = sql(wh, "SELECT e.task_id, l.step_idx, l.code, l.detail FROM error_labels AS l "
                   "JOIN episodes AS e USING (run_id, episode_id) JOIN runs AS r USING (run_id) "
                   "WHERE r.experiment = $exp AND l.category = 'protocol' ORDER BY l.step_idx", exp="original-codes")
    assert [(r["task_id"], r["detail"], r["code"]) for r in rows] == [(101, c, label) for c, label in ORIGINAL.items()]
    assert [r["step_idx"] for r in rows] == [0, 1, 2, 3, 4]
    length = sql(wh, "SELECT primary_failure, primary_step_idx FROM episode_primary_failure AS p "
                     "JOIN runs AS r USING (run_id) WHERE r.experiment = $exp AND p.task_id = 102",
                 exp="original-codes")
    assert length == [{"primary_failure": "generation_length", "primary_step_idx": 0}]
    # the codes the ingested steps hold are ShopSimRL's, untouched
    stored = sql(wh, "SELECT protocol_error, policy_failure FROM steps JOIN runs USING (run_id) "
                     "WHERE experiment = $exp ORDER BY episode_id, step_idx", exp="original-codes")
    assert [r["protocol_error"] for r in stored if r["protocol_error"]] == list(ORIGINAL)
    assert [r["policy_failure"] for r in stored if r["policy_failure"]] == ["generation_length"]


def test_the_vocabulary_is_a_view_a_user_can_read(wh):
    rows = sql(wh, "SELECT code, label, original FROM protocol_codes WHERE code IN "
                   "('invalid_tool_arguments', 'generation_length', 'unavailable_tool')")
    by_code = {r["code"]: r for r in rows}
    assert by_code["invalid_tool_arguments"]["original"].startswith("shopsimrl/runtime.py")
    assert by_code["generation_length"]["label"] == "generation_length"
    assert LABELS["unavailable_tool"] == by_code["unavailable_tool"]["label"] == "protocol_unknown_tool"
