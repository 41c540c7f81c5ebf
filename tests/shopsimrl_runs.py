"""Build warehouse runs from per-job numbers (the ShopSimRL artifact fixtures), through our own writer."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from shopsim_wh.core.schema import to_arrow
from shopsim_wh.store.warehouse import Warehouse

FIXTURES = Path(__file__).parent / "fixtures" / "shopsimrl_artifacts"
COMPONENTS = ("r_type", "r_att", "r_option", "r_price", "r_loose", "r_strict", "r_success")


def fingerprint_fields(split: str, skill_bank: str | None, **extra) -> dict:
    """What a runner run records; only the skill fields differ between a bare run and its treatment."""
    fields = {"job_list_hash": "jobs-of-the-artifact", "experiment_seed": 0, "split": split,
              "split_manifest_hash": "persona_splits.v1", "model_name": "Qwen/Qwen3.5-4B",
              "checkpoint_id": "qwen35-4b-base-hf", "sampling": {"temperature": 0.6, "max_tokens": 4096, "top_p": 1.0},
              "prompt_hash": "shopsim-shopping-agent-tools-v2", "action_limit": 30, "environment_mode": "remote",
              "skill_bank_hash": skill_bank, "skills_mask_seed": None}
    fields.update(extra)
    return fields


def write_run(root: Path, run_id: str, jobs: list[dict], skill_bank: str | None = None, **fp_extra) -> None:
    """jobs: {split, task_id, sample_id, reward, r_* (optional), skills (list of ids, injection order)}."""
    fields = fingerprint_fields(jobs[0]["split"], skill_bank, **fp_extra)
    runs = to_arrow("runs", [{
        "experiment": run_id, "fingerprint": hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:32],
        "fingerprint_fields": json.dumps(fields, sort_keys=True), "source_format": "shopsim-wh-runner",
        "model_name": fields["model_name"], "checkpoint_id": fields["checkpoint_id"], "split": fields["split"],
        "skill_bank_hash": skill_bank, "planned_episodes": len(jobs), "primary_reward": "r_strict"}])
    episodes, skills = [], []
    for j in jobs:
        eid = f"task-{j['task_id']:06d}__sample-{j['sample_id']:03d}"
        row = {"episode_id": eid, "attempt": 1, "experiment": run_id, "task_id": j["task_id"],
               "sample_id": j["sample_id"], "seed": 0, "split": j["split"], "status": "completed", "done": True,
               "reward": j["reward"], "model_steps": j.get("model_steps", 1), "protocol_errors": 0,
               "total_actions": 1, "invalid_actions": 0, "termination_reason": "purchase",
               "skill_ids": json.dumps(j.get("skills", []))}
        row.update({c: j[c] for c in COMPONENTS if c in j})
        episodes.append(row)
        for sid in j.get("skills", []):
            skills.append({"episode_id": eid, "attempt": 1, "skill_id": sid, "skill_version": "1", "scope": "global",
                           "content_hash": hashlib.sha256(sid.encode()).hexdigest(), "content": f"skill {sid}"})
    batches = [("runs", run_id, runs), ("episodes", run_id, to_arrow("episodes", episodes))]
    if skills:
        batches.append(("skills_selected", run_id, to_arrow("skills_selected", skills)))
    with Warehouse(root).writer() as w:
        w.commit(batches)
