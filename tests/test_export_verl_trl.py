"""Journey: verl's RL parquet, verl's multi-turn SFT parquet and a TRL GRPO prompt dataset, from the warehouses
users have, loaded where each trainer loads them.

One warehouse per module: a real `shopsim-wh run` of the embedded default (the noisy scripted policy, personas on:
protocol errors, failed and successful episodes) plus, through `shopsim-wh ingest`, a ShopSimRL v4 run directory
(tests/fixtures/ingest/shopsimrl_v4: persona in the system prompt, the private goal in the environment's answers)
and a real third-party Claude Code session with sub-agents. Each shape is exported with the installed CLI, then:

- verl-rl: `datasets.load_dataset("parquet", ...)` as verl's RLHFDataset reads it, and the fields its
  `__getitem__` and the tool agent loop read (prompt_key "prompt", extra_info.index / tools_kwargs /
  interaction_kwargs, tools_kwargs[name]["create_kwargs"]); verl's dataset module needs torch (not installed here),
  so its documented contract is asserted rather than the class run.
- verl-sft: read as verl's MultiTurnSFTDataset reads it (pandas, pyarrow dtypes, nested values as lists and dicts:
  messages_key "messages", tools_key "tools") and as `datasets` reads it, rendered through a chat template.
- trl-grpo: TRL's `is_conversational` and `maybe_apply_chat_template(row, tok, tools=json.loads(row["tools"]))`
  with a tokenizer built by the `tokenizers` library (no model, no download, no torch).

And no exported string holds the private goal, nor (by default) the persona, although the warehouse holds the
persona (so the check can fail).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from shopsim_wh.sim.tasks import generate_tasks, persona_profile

from .helpers import write_config
from .journeys import ok, shopsim
from .test_export_templates import chat_tokenizer

FIX = Path(__file__).resolve().parent / "fixtures"
V4_RUN = FIX / "ingest" / "shopsimrl_v4"  # written from facts (README.md there)
CLAUDE = FIX / "third_party" / "claude_code_session-share"  # a real session with five sub-agents (SOURCES.md)
KINDS = ("verl-rl", "verl-sft", "trl-grpo")
PERSONA_HEADER = "用户个人文档："


def tokenizer(template: str = "qwen3"):
    """A tokenizer with a real chat template and no vocabulary worth the name (tokenizers + transformers only)."""
    return chat_tokenizer(template)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("verl-trl")
    wh = tmp / "wh"
    cfg = write_config(tmp / "run.yaml", experiment={"name": "verl-trl", "seed": 3},
                       tasks={"split": "train", "sample_size": 2, "repeats": 2}, model={"name": "scripted-noisy"},
                       environment={"persona": True}, runtime={"max_steps": 10, "concurrency": 4})
    ok(shopsim("run", cfg, "--warehouse", wh, "--quiet"))
    ok(shopsim("ingest", V4_RUN, CLAUDE, "--warehouse", wh))
    out = {}
    for kind in KINDS:  # verl-sft: failed episodes too, so that their messages are seen untrainable
        extra = ["--where", "status = 'completed'"] if kind == "verl-sft" else []
        ok(shopsim("export", kind, "--warehouse", wh, "--out", tmp / kind, "--quiet", *extra))
        out[kind] = sorted((tmp / kind).glob("*.parquet"))
    return {"wh": wh, "shards": out, "facts": _facts(wh)}


def _facts(wh: Path) -> dict:
    """What the warehouse says (read with DuckDB, not through the exports)."""
    from shopsim_wh.engines.db import connect

    con = connect(wh)
    q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    facts = {
        "shop_tasks": {(r[0], r[1], r[2]) for r in q(
            "SELECT e.task_id, e.split, r.environment_version FROM episodes e JOIN runs r USING (run_id) "
            "WHERE r.source_format IN ('shopsim-wh-runner', 'shopsimrl-v4')")},
        "first_messages": {(r[0], r[1]): (r[2], r[3]) for r in q(
            "SELECT run_id, episode_id, max(CASE WHEN msg_idx = 0 THEN content END), "
            "max(CASE WHEN msg_idx = 1 THEN content END) FROM messages WHERE agent_id = 'main' GROUP BY ALL")},
        "episodes": {(r[0], r[1]): {"source_format": r[2], "success": r[3], "task_id": r[4]} for r in q(
            "SELECT run_id, episode_id, source_format, coalesce(r_success = 1, reward IS NULL), task_id "
            "FROM episodes WHERE status = 'completed'")},
        "clean_turns": {(r[0], r[1], r[2]): r[3] for r in q(
            "SELECT run_id, episode_id, agent_id, count(*) FILTER (WHERE protocol_error IS NULL AND "
            "policy_failure IS NULL) FROM steps GROUP BY ALL")},
        "manifest_hash": dict(q("SELECT run_id, split_manifest_hash FROM runs")),
        "persona_stored": q(f"SELECT count(*) FROM messages WHERE content LIKE '%{PERSONA_HEADER}%'")[0][0],
        "runner_tasks": [r[0] for r in q("SELECT task_id FROM episodes WHERE source_format = 'shopsim-wh-runner'")],
    }
    con.close()
    return facts


def _load(shards: list[Path]):
    import datasets

    return datasets.load_dataset("parquet", data_files=[str(s) for s in shards], split="train")


def strip_persona(system: str) -> str:
    """The system prompt without its persona section (the layout the runner and ShopSimRL share)."""
    head, sep, _ = system.partition("\n\n" + PERSONA_HEADER)
    return head if sep else system


def test_verl_rl_rows_are_the_tasks_prompts_with_verls_contract(built):
    import pyarrow.parquet as pq

    schema = pq.read_schema(built["shards"]["verl-rl"][0])
    for col in ("reward_model", "extra_info"):
        assert str(schema.field(col).type).startswith("struct<"), (col, schema.field(col).type)
    assert str(schema.field("prompt").type).startswith("list<element: struct<role: string, content: string>")
    ds = _load(built["shards"]["verl-rl"])
    facts = built["facts"]
    rows = list(ds)
    # one row per (task, split) of a shop environment: the runner's repeats and the v4 task's two samples collapse,
    # the Claude Code session (no environment to replay it in) gives none
    assert {(r["task_id"], r["split"], r["environment_version"]) for r in rows} == facts["shop_tasks"]
    assert len(rows) == len(facts["shop_tasks"]) == 4
    assert {r["source_format"] for r in rows} == {"shopsim-wh-runner", "shopsimrl-v4"}
    tok = tokenizer()
    for r in rows:
        assert (r["data_source"], r["ability"]) == ("shopsimulator", "agent-shopping")
        system, user = facts["first_messages"][(r["run_id"], r["episode_id"])]
        assert r["prompt"] == [{"role": "system", "content": strip_persona(system)}, {"role": "user", "content": user}]
        assert user.startswith("购物任务：\n")
        truth = json.loads(r["reward_model"]["ground_truth"])
        assert r["reward_model"]["style"] == "rule"
        want = {"environment": "shopsimulator", "environment_version": r["environment_version"],
                "primary_reward": "r_strict", "split": r["split"], "task_id": r["task_id"],
                "split_manifest_hash": facts["manifest_hash"][r["run_id"]]}  # the runner's; none for v4 traces
        assert truth == {k: v for k, v in want.items() if v is not None} and list(truth) == sorted(truth)
        # what RLHFDataset.__getitem__ and ToolAgentLoop read
        extra = r["extra_info"]
        assert (extra["split"], extra["index"], extra["task_id"]) == (r["split"], r["task_id"], r["task_id"])
        for tool in ("search", "click"):
            create = extra["tools_kwargs"].get(tool, {}).get("create_kwargs", {})
            assert (create["task_id"], create["split"], create["environment"]) == (r["task_id"], r["split"],
                                                                                 "shopsimulator")
        assert extra["interaction_kwargs"]["name"] == "shopsimulator"
        assert extra["interaction_kwargs"]["task_id"] == r["task_id"] and extra["need_tools_kwargs"] is True
        # RLHFDataset's prompt-length filter renders the prompt with the generation prompt
        text = tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False)
        assert text.endswith("<|im_start|>assistant\n") and user in text


def _nested(value):
    """verl's convert_nested_value_to_list_recursive: numpy arrays and lists to lists, dicts kept."""
    import numpy as np

    if isinstance(value, dict):
        return {k: _nested(v) for k, v in value.items()}
    if isinstance(value, list | np.ndarray):
        return [_nested(v) for v in list(value)]
    return value


def test_verl_sft_rows_train_the_assistant_turns_of_successful_episodes(built):
    import pandas as pd

    facts = built["facts"]
    shards = built["shards"]["verl-sft"]
    frame = pd.concat([pd.read_parquet(s, dtype_backend="pyarrow") for s in shards])  # MultiTurnSFTDataset's read
    as_verl = [(_nested(m), _nested(t)) for m, t in zip(frame["messages"], frame["tools"], strict=True)]
    rows = list(_load(shards))
    assert len(rows) == len(as_verl) == len(frame)
    seen = Counter()
    untrainable_assistant = 0
    for r, (messages, tools) in zip(rows, as_verl, strict=True):
        ep = facts["episodes"][(r["run_id"], r["episode_id"])]
        seen[(ep["source_format"], ep["success"], r["agent_role"] != "main")] += 1
        names = [t["function"]["name"] for t in r["tools"]]
        assert len(names) == len(set(names)) and [t["function"]["name"] for t in tools] == names
        assert all(isinstance(t["function"]["parameters"], dict) for t in r["tools"])  # datasets decodes the JSON
        assert [m["role"] for m in messages] == [m["role"] for m in r["messages"]]
        trainable = [m for m in messages if m["trainable"]]
        assert all(m["role"] == "assistant" for m in trainable)
        assert all(m["loss_mask"] == int(m["trainable"]) for m in messages)
        if ep["source_format"] != "claude-code":  # one assistant message per turn that kept the protocol
            assert len(trainable) == (facts["clean_turns"][(r["run_id"], r["episode_id"], r["agent_id"])]
                                      if ep["success"] else 0)
        elif ep["success"]:
            assert trainable and len(trainable) == sum(m["role"] == "assistant" for m in messages)
        untrainable_assistant += sum(m["role"] == "assistant" and not m["trainable"] for m in messages)
        # the tool calls a trainer learns: pandas hands arguments over as JSON text (OpenAI's wire format), datasets
        # as objects; Qwen3's template prints either as the same object
        tok = tokenizer()
        text = tok.apply_chat_template(messages, tools=tools or None, tokenize=False)
        for m, d in zip(messages, r["messages"], strict=True):
            for call, dcall in zip(m["tool_calls"] or [], d["tool_calls"] or [], strict=True):
                args = call["function"]["arguments"]
                assert isinstance(args, str) and json.loads(args) == dcall["function"]["arguments"]
                if isinstance(dcall["function"]["arguments"], dict):
                    assert f'"arguments": {args}}}' in text
    assert untrainable_assistant > 0  # failed episodes and protocol-error turns: the flag can fail
    assert {k for k in seen if k[0] == "shopsimrl-v4"} == {("shopsimrl-v4", True, False), ("shopsimrl-v4", False, False)}
    assert seen[("claude-code", True, True)] == 5 and seen[("claude-code", True, False)] == 1  # sub-agents: own rows
    assert any(k[0] == "shopsim-wh-runner" for k in seen)


def test_trl_grpo_prompts_render_through_trl_with_their_tools(built):
    from trl.data_utils import is_conversational, maybe_apply_chat_template

    facts = built["facts"]
    rows = list(_load(built["shards"]["trl-grpo"]))
    assert {(r["task_id"], r["split"], r["environment_version"]) for r in rows} == facts["shop_tasks"]
    tok = tokenizer()
    for r in rows:
        assert isinstance(r["tools"], str) and is_conversational(r)
        tools = json.loads(r["tools"])
        names = [t["function"]["name"] for t in tools]
        assert names and len(names) == len(set(names)) and set(names) <= {"search", "click"}
        text = maybe_apply_chat_template(r, tok, tools=tools)["prompt"]
        assert text.endswith("<|im_start|>assistant\n")
        for t in tools:  # each tool defined once, as offered with the prompt
            assert text.count(json.dumps(t, ensure_ascii=False)) == 1
        assert r["prompt"][-1]["content"] in text and r["environment"] == "shopsimulator"
        # what a reward function or GRPOTrainer's environment reset(**row) receives besides the prompt
        assert {"task_id", "split", "environment", "environment_version"} <= set(r)


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def test_no_export_holds_the_private_goal_or_the_persona(built):
    import pyarrow.parquet as pq

    facts = built["facts"]
    tasks = generate_tasks(0).by_id  # the embedded server's tasks: their private goals and personas
    goals = {tasks[t].goal.goal_signature for t in facts["runner_tasks"]} | {"goal-canary"}
    personas = [persona_profile(tasks[t].persona) for t in facts["runner_tasks"]]
    needles = {PERSONA_HEADER, "园艺师", "偏爱亚麻材质"} | {p[k] for p in personas for k in ("occupation", "preference")}
    assert facts["persona_stored"] > 0  # the warehouse holds personas: the exports leave them out
    for kind, shards in built["shards"].items():
        text = [s for shard in shards for s in _strings(pq.read_table(shard).to_pylist())]
        assert text, kind
        assert not {g for g in goals if any(g in s for s in text)}, kind
        assert not {n for n in needles if any(n in s for s in text)}, kind
