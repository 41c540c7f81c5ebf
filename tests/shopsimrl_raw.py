"""ShopSimRL run directories written as raw JSON lines, the way the original runtime and store write them.

``runs/<name>/traces.jsonl`` (one ``shopsimrl-episode-v4`` record per line, ``json.dumps(ensure_ascii=False)`` plus
a newline, as ``store.RunStore.save_trace`` appends them), ``manifest.json`` (``shopsimrl-run-manifest-v1``: the
semantic plan of ``cli._semantic_plan`` and its ``plan_fingerprint``, ``schemas.fingerprint``) and, for a masked gate
run, ``mask_assignments.json`` (``online_validation.build_online_assignments``). Written with the standard library
only: nothing of shopsim-wh's writers (``synth_v4``, ``dump``) is used, and no code of ShopSimRL is copied (its
formats are facts read from ``shopsimrl/runtime.py``, ``store.py``, ``schemas.py``, ``cli.py``, ``skills.py``,
``online_validation.py`` and the published ``artifacts/eval/*/comparison.json``).

Each episode is the shortest one the runtime records: the reset lands on a product page, the model calls ``click``
with ``buy now`` once, the environment answers ``done`` with the reward: one step, a four-message conversation.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

TRACE_SCHEMA = "shopsimrl-episode-v4"
ACTION_PROTOCOL = "openai-function-tools-repair-v3"
SYSTEM_PROMPT = "你是一个购物助手。每一轮只调用一个当前提供的函数工具。"

# the identities of the published qwen35-4b runs (artifacts/eval/qwen35-4b-test-base-s0/comparison.json)
MODEL = {"provider": "openai_compatible_http", "checkpoint_id": "qwen35-4b-base-hf", "model": "Qwen/Qwen3.5-4B",
         "base_url": "http://127.0.0.1:30000/v1",
         "transport": {"timeout_seconds": 180.0, "max_retries": 3, "retry_backoff_seconds": 1.0},
         "sampling": {"temperature": 0.6, "max_tokens": 4096, "top_p": 1.0, "send_seed": False,
                      "tool_choice": "auto", "extra_body": {"enable_thinking": True}}}
ENVIRONMENT = {"adapter": "shopsimulator_http", "base_url": "http://127.0.0.1:5700", "persona": True,
               "interaction_mode": "single_turn"}
OBSERVED_ENVIRONMENT = {**ENVIRONMENT, "environment_version": "shopsimulator-paper-aligned-v8",
                        "observation_version": "shopping-observation-v7"}
PROMPT = {"prompt_version": "shopsim-shopping-agent-tools-v2",
          "system_prompt_sha256": hashlib.sha256(SYSTEM_PROMPT.encode()).hexdigest(),
          "skill_renderer_version": "plain-skill-context-v1"}
RUNTIME = {"max_steps": 30, "action_protocol": ACTION_PROTOCOL}
NO_SKILLS = {"provider": "none"}


def fingerprint(value) -> str:
    """``schemas.fingerprint``: sha256 of sorted-key, compact JSON with non-ASCII kept."""
    return hashlib.sha256(json.dumps(value, ensure_ascii=False, sort_keys=True,
                                     separators=(",", ":")).encode()).hexdigest()


def episode_seed(seed: int, task_id: int, sample_id: int) -> int:
    """``evaluation._episode_seed``."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{task_id}:{sample_id}".encode("ascii")).digest()[:4], "big")


def job(split: str, task_id: int, sample_id: int = 0, seed: int = 20260901) -> dict:
    return {"task_id": task_id, "sample_id": sample_id, "seed": episode_seed(seed, task_id, sample_id), "split": split}


def provenance(skills: dict, **changes) -> dict:
    """What ``AgentRuntime.run`` records; ``changes`` replace whole sections (e.g. ``model=...``)."""
    prov = {"model": copy.deepcopy(MODEL), "environment": dict(OBSERVED_ENVIRONMENT), "prompt": dict(PROMPT),
            "skills": skills, "runtime": dict(RUNTIME)}
    prov.update(changes)
    return prov


def skill(skill_id: str) -> dict:
    """``Skill.to_dict()``."""
    content = f"策略 {skill_id}：购买前核对规格与价格。"
    return {"skill_id": skill_id, "content": content, "version": "1", "metadata": {},
            "content_sha256": fingerprint(content)}


_CLICK = {"type": "function", "function": {
    "name": "click", "description": "点击当前页面的一个可用按钮、商品或规格选项。",
    "parameters": {"type": "object", "properties": {"value": {"type": "string", "enum": ["buy now"],
                                                               "description": "必须逐字选择当前可点击值之一。"}},
                   "required": ["value"], "additionalProperties": False}}}


def record(j: dict, prov: dict, reward: float, detail: dict, skills: list[str] = ()) -> dict:
    """One completed episode, as ``AgentRuntime.run`` returns it (``reward`` = the environment's top-level one,
    ``detail`` its ``reward_detail``)."""
    eid = f"task-{j['task_id']:06d}__sample-{j['sample_id']:03d}"
    state = {"page_type": "product_detail", "search_available": False, "actions": ["buy now"]}
    obs = f"商品 B0{j['task_id']:08d} 详情页。可点击：buy now"
    call = {"call_id": f"call-{eid}", "name": "click", "arguments": {"value": "buy now"},
            "raw_arguments": '{"value": "buy now"}'}
    answer = {"observation": "已购买。", "observation_state": {"page_type": "done", "search_available": False,
                                                               "actions": []},
              "reward": reward, "done": True, "reward_detail": detail, "termination_reason": "purchase",
              "purchase": {"asin": f"B0{j['task_id']:08d}"}, "action_feedback": {"valid": True}}
    model = {"content": None, "reasoning": "规格已选好，直接购买。", "tool_calls": [call], "finish_reason": "tool_calls",
             "usage": {}, "response_id": f"resp-{eid}", "metadata": {}, "latency_ms": 812.5,
             "protocol_error": None, "policy_failure": None, "raw_response": None}
    system = SYSTEM_PROMPT + "".join(f"\n\n<skill id=\"{s}\">{skill(s)['content']}</skill>" for s in skills)
    return {
        "schema_version": TRACE_SCHEMA, "episode_id": eid, "status": "completed", "job": j, "provenance": prov,
        "started_at": "2026-09-07T12:00:00+00:00", "ended_at": "2026-09-07T12:00:02.250000+00:00",
        "duration_ms": 2250.0,
        "reset": {"task_instruction": f"买一件商品 {j['task_id']}", "observation": obs, "observation_state": state,
                  "user_persona": None, "task_mode": "single_turn"},
        "selected_skills": [skill(s) for s in skills],
        "conversation": [{"role": "system", "content": system}, {"role": "user", "content": obs},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": call["call_id"], "type": "function",
                              "function": {"name": "click", "arguments": call["raw_arguments"]}}]},
                         {"role": "tool", "tool_call_id": call["call_id"], "content": answer["observation"]}],
        "steps": [{"step_index": 1, "observation": obs, "tools": [_CLICK], "model": model, "action": "click[buy now]",
                   "environment": answer}],
        "final": answer, "error": None,
    }


def plan(name: str, jobs: list[dict], skills: dict, **changes) -> dict:
    """``cli._semantic_plan`` of a run of ``jobs``; ``changes`` replace whole sections."""
    split = jobs[0]["split"]
    out = {"pipeline_version": "shopsimrl-v0.4", "experiment": name, "model_id": "qwen35-4b-base",
           "model": copy.deepcopy(MODEL),
           "task_split": {"name": split, "source_path": f"/root/ShopSimRL/data/{split}.json",
                          "split_version": "persona_splits.v1", "persona": True,
                          "task_count": len({j["task_id"] for j in jobs})},
           "jobs": jobs, "environment": dict(ENVIRONMENT),
           "runtime": {"max_steps": 30, "concurrency": 16, "action_protocol": ACTION_PROTOCOL},
           "prompt": dict(PROMPT), "skills": skills}
    out.update(changes)
    return out


def write_run(root: Path, name: str, records: list[dict], plan_doc: dict | None = None,
              masks: dict | None = None) -> Path:
    """``root/name/{traces.jsonl, manifest.json, mask_assignments.json}`` (a manifest only with ``plan_doc``)."""
    d = Path(root) / name
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "traces.jsonl", "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n")
    if plan_doc is not None:
        manifest = {"schema_version": "shopsimrl-run-manifest-v1", "created_at": "2026-09-07T11:59:00+00:00",
                    "plan_fingerprint": fingerprint(plan_doc), "plan": plan_doc}
        (d / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=2), encoding="utf-8")
    if masks is not None:
        (d / "mask_assignments.json").write_text(json.dumps(masks, ensure_ascii=False, indent=2), encoding="utf-8")
    return d


def mask_assignments(jobs: list[dict], included: list[list[str]], columns: list[str], slots: list[dict],
                     mask_seed: int, pool_sha256: str) -> dict:
    """``build_online_assignments``'s document for these jobs and their included skill ids."""
    rows = [{"episode_id": f"task-{j['task_id']:06d}__sample-{j['sample_id']:03d}", **j,
             "mask": [int(c in inc) for c in columns], "included_chunk_ids": inc} for j, inc in
            zip(jobs, included, strict=True)]
    core = {"mask_seed": mask_seed, "pool_sha256": pool_sha256, "columns": columns, "slots": slots,
            "assignments": rows}
    return {"schema_version": "shopsimrl-online-skill-assignments-v1", "created_at": "2026-09-07T11:59:00+00:00",
            **core, "assignment_sha256": fingerprint(core)}


def masked_skills(columns: list[str], pool_sha256: str, masks: dict) -> dict:
    """The plan's ``skills`` of an online gate run: ``AssignedSkillProvider`` over the intervention bank."""
    return {"provider": "assigned_json_skillbank",
            "bank": {"provider": "online_intervention_bank", "pool_sha256": pool_sha256, "skill_ids": columns},
            "assignment": {k: masks[k] for k in ("schema_version", "pool_sha256", "assignment_sha256", "mask_seed")}}
