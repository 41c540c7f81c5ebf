"""ShopSimRL Trace2Skill round directories written in ShopSimRL's own formats, from facts.

``write_round`` writes ``round-000/{analysis,gate}/`` as ShopSimRL's online analysis and online gate leave it
(``candidate_pool.json``, both ``proposal_ledger.jsonl``, ``contributions.json``, ``selected_skillbank.json``,
``summary.json``, ``online_gate_manifest.json``, ``selected_skill.md``, and the local-only ``failure_cards.jsonl`` and
``mask_assignments.json``); ``write_cold_start`` a cold start's ``initial_skillbank.json`` with the local
``evidence_cards.jsonl``, ``cluster_batches.jsonl`` and ``initial_skill_draft.json``. The ids and figures are
round-000's real ones (tests/fixtures/shopsimrl_artifacts: ``round000_loop.json``, ``round000_expected.json``,
``round000_pairs.csv``); the texts are placeholders. Written with the standard library only; no code of ShopSimRL and
nothing of shopsim-wh's writers is used (the formats are facts read from its ``trace2skill.py``,
``online_validation.py``, ``skills.py`` and the published ``artifacts/``, see docs/loop.md).
"""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "shopsimrl_artifacts"
COMPONENTS = ("r_att", "r_loose", "r_option", "r_price", "r_strict", "r_success", "r_type")
GOLD_ASIN = "B0GOLD12345"  # a failure card's privileged audit holds it; it must never reach a table


def fingerprint(value) -> str:
    """``schemas.fingerprint``: sha256 of sorted-key, compact JSON with non-ASCII kept."""
    return hashlib.sha256(json.dumps(value, ensure_ascii=False, sort_keys=True,
                                     separators=(",", ":")).encode()).hexdigest()


def facts() -> dict:
    loop = json.loads((FIXTURES / "round000_loop.json").read_text())
    expected = json.loads((FIXTURES / "round000_expected.json").read_text())
    with open(FIXTURES / "round000_pairs.csv", newline="") as f:
        pairs = list(csv.DictReader(f))
    return {**loop, "expected": expected, "pairs": pairs}


def online_mask(mask_seed: int, split: str, task_id: int, sample_id: int, slots: list[tuple[str, list[str]]]) -> list:
    """ShopSimRL's online mask rule: per slot, absent or exactly one of its versions."""
    chosen = []
    for slot_id, versions in slots:
        digest = hashlib.sha256(f"{mask_seed}:{split}:{task_id}:{sample_id}:{slot_id}".encode()).digest()
        pick = int.from_bytes(digest[:8], "big") % (len(versions) + 1)
        if pick:
            chosen.append(versions[pick - 1])
    return chosen


def card_trajectory(card_id: str) -> str:
    """``failure-{episode}-01`` -> the episode id."""
    return card_id.removeprefix("failure-").removesuffix("-01")


def _write(path: Path, doc, indent: int | None = 2) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, ensure_ascii=False, indent=indent), encoding="utf-8")


def _content(title: str) -> str:
    return (f"### {title}\n\n- Applies when: 占位\n- Procedure:\n  1. 占位步骤\n- Verify: 占位\n- Avoid: 占位")


def slots_of(fx: dict) -> list[tuple[str, list[str]]]:
    out: dict[str, list[str]] = {}
    for s in fx["expected"]["slots"]:
        out.setdefault(s["slot_id"], []).append(s["version"])
    return list(out.items())


def write_round(root: Path, bare_plan_fingerprint: str | None = None, name: str = "round-000") -> Path:
    """``root/round-000/`` with every file of the published round plus the local failure cards and assignments."""
    fx = facts()
    ex = fx["expected"]
    d = Path(root) / name
    coefs = ex["estimates"]["reward"]["coefficients"]
    rows = {r["intervention_id"]: r for r in fx["contributions"]}
    current = [r["intervention_id"] for r in fx["contributions"] if r["kind"] == "current"]
    ledger = fx["ledger"]
    _write(d / "analysis" / "analysis_summary.json", {
        "schema_version": "shopsimrl-online-failure-analysis-v1", "created_at": "2026-09-06T14:50:45.600000+00:00",
        "triage_groups": 87, "analyzed_cards": 87, "eligible_cards": 61, "candidates": 6,
        "proposal_history_records": 0, "evidence_only_card_ids": [],
        "candidate_pool_path": "runs/round-000/analysis/candidate_pool.json",
        "current_skillbank_sha256": fx["current_skillbank_sha256"], "compilation_input_sha256": "0" * 64})
    pool = {"schema_version": "shopsimrl-skill-candidate-pool-v1", "created_at": fx["pool_created_at"],
            "round_id": fx["round_id"], "proposal_checkpoint": fx["proposal_checkpoint"],
            "current_skillbank_sha256": fx["current_skillbank_sha256"],
            "current_skills": [{"skill_id": c, "version": "paired-delta-positive-1", "content": _content(c),
                                "metadata": {"workflow_stage": "占位"}} for c in current],
            "candidates": [{"candidate_id": x["candidate_id"], "operation": x["operation"],
                            "target_chunk_id": x["target_chunk_id"], "content": _content(x["candidate_id"]),
                            "metadata": {"title": x["candidate_id"], "failure_mechanism": "占位",
                                         "evidence_card_ids": x["source_card_ids"],
                                         "consolidation_cluster_id": "cluster-" + x["candidate_id"][7:],
                                         "proposal_checkpoint": fx["proposal_checkpoint"]}} for x in ledger],
            "pool_sha256": fx["pool_sha256"]}  # the published value: the placeholder texts hash to another
    _write(d / "analysis" / "candidate_pool.json", pool)
    analysis_rows = [{"candidate_id": x["candidate_id"], "operation": x["operation"],
                      "target_chunk_id": x["target_chunk_id"], "source_card_ids": x["source_card_ids"],
                      "failure_mechanism": "占位", "proposal_checkpoint": fx["proposal_checkpoint"], "stage": "online",
                      "consolidation_cluster_id": "cluster-" + x["candidate_id"][7:],
                      "replacement_family_id": x["target_chunk_id"], "content": _content(x["candidate_id"]),
                      "validation_result": None, "estimated_effect": None, "contribution_rank": None, "notes": None}
                     for x in ledger]
    (d / "analysis" / "proposal_ledger.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in analysis_rows), encoding="utf-8")
    gate_rows = []
    for r in analysis_rows:
        c = rows[r["candidate_id"]]
        event = {"proposal_checkpoint": fx["proposal_checkpoint"], "evaluation_checkpoint": fx["evaluation_checkpoint"],
                 "validation_estimator": fx["estimator"], "bare_validation_observations_sha256": "1" * 64,
                 "intervention_id": r["candidate_id"], "validation_result": c["status"],
                 "estimated_effect": coefs[r["candidate_id"]], "contribution_rank": c["rank"],
                 "pool_sha256": fx["pool_sha256"], "assignment_sha256": fx["assignment_sha256"]}
        gate_rows.append({**r, **event, "validation_history": [event]})
    (d / "gate").mkdir(parents=True, exist_ok=True)
    (d / "gate" / "proposal_ledger.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in gate_rows), encoding="utf-8")
    # the local failure cards of two candidates (bbef's and 8e3e's evidence), gold in their privileged audit
    cards = []
    for cid in ledger[1]["source_card_ids"] + ledger[3]["source_card_ids"]:
        cards.append({"schema_version": "shopsimrl-evidence-card-v3", "card_id": cid,
                      "source_trajectory_id": card_trajectory(cid), "channel": "failure", "stage": "online",
                      "status": "PROPOSE_ADD",
                      "privileged_audit": {"gold_asin": GOLD_ASIN, "chosen_asin": "B0CHOSEN999",
                                           "failure_surface": "占位", "earliest_divergence": "占位",
                                           "oracle_comparison": "占位", "replay_evidence": "占位",
                                           "minimal_repair": "占位", "repair_validation_result": "占位"},
                      "deployable_abstraction": {"failure_mechanism": "占位机制", "applicable_when": "占位",
                                                 "observable_trigger": "占位", "corrective_procedure": "占位",
                                                 "verification_step": "占位", "target_chunk_id": "",
                                                 "proposed_content": "占位"},
                      "audit_action_summary": [{"trial_index": 1, "step_index": 1, "action": "search[占位]",
                                                "valid": True, "page_type": "search_results"}],
                      "audit_transcript": [], "terminal_trials": [{"trial_index": 1, "terminal_action": "buy now",
                                                                   "reward": 1.0, "purchase": {"asin": GOLD_ASIN},
                                                                   "success": True}],
                      "successful_counterfactual_trials": 1, "grounded_live_actions": 1, "firewall_findings": [],
                      "forced_no_proposal_reason": None, "eligible_for_consolidation": True,
                      "created_at": "2026-09-06T14:40:00+00:00", "input_fingerprint": "2" * 64})
    (d / "analysis" / "failure_cards.jsonl").write_text(
        "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cards), encoding="utf-8")
    # the gate
    slots = slots_of(fx)
    columns = ex["columns"]
    table, assignments = [], []
    for p in fx["pairs"]:
        task, sample = int(p["task_id"]), int(p["sample_id"])
        inc = online_mask(ex["mask_seed"], p["split"], task, sample, slots)
        eid = f"task-{task:06d}__sample-{sample:03d}"
        masked = {m: float(p[f"masked_{m}"]) for m in COMPONENTS}
        bare = {m: float(p[f"bare_{m}"]) for m in COMPONENTS}
        table.append({"episode_id": eid, "split": p["split"], "task_id": task, "sample_id": sample,
                      "mask": [int(c in inc) for c in columns], "included_chunk_ids": inc,
                      "reward": float(p["masked_reward"]), "bare_reward": float(p["bare_reward"]),
                      "delta_reward": float(p["masked_reward"]) - float(p["bare_reward"]),
                      "reward_detail": masked, "bare_reward_detail": bare,
                      "delta_reward_detail": {m: masked[m] - bare[m] for m in COMPONENTS}})
        assignments.append({"episode_id": eid, "task_id": task, "sample_id": sample, "seed": 0, "split": p["split"],
                            "mask": [int(c in inc) for c in columns], "included_chunk_ids": inc,
                            "slot_states": {s: next((v for v in vs if v in inc), None) for s, vs in slots}})
    estimates = {m: {"intercept": 0.0, "coefficients": e["coefficients"], "observations": fx["observations"],
                     **{k: e[k] for k in ("masked_mean", "bare_mean", "delta_mean")}}
                 for m, e in ex["estimates"].items()}
    bare_means = {m: e["bare_mean"] for m, e in ex["estimates"].items()}
    bare_baseline = {"run_dir": "runs/qwen35-4b-val-round-000-bare", "plan_fingerprint": bare_plan_fingerprint,
                     "observations_sha256": "1" * 64, "observations": 400, "requested_observations": 400,
                     "dropped_observations": 0, "checkpoint_id": fx["evaluation_checkpoint"],
                     "mean_outcomes": bare_means}
    contributions = {
        "schema_version": "shopsimrl-online-chunk-contributions-v2", "created_at": fx["contributions_created_at"],
        "estimator": {"name": fx["estimator"], "formula": "R_i - B_i = C_i^T beta + epsilon_i",
                      "fit_intercept": False, "baseline": "same_task_bare_validation", "primary_outcome": "reward",
                      "rewrite_rule": "mutually_exclusive_family_argmax_old_on_tie",
                      "selection_rule": "rewrite_winners_then_strictly_positive_top_k"},
        "pool_sha256": fx["pool_sha256"], "assignment_sha256": fx["assignment_sha256"],
        "observations": fx["observations"], "requested_observations": 400, "dropped_episode_ids": [],
        "active_skill_budget": ex["active_skill_budget"],
        "selected_intervention_ids": ex["selected_intervention_ids"],
        "selected_count": len(ex["selected_intervention_ids"]),
        "replacement_winners": {s: next(r["intervention_id"] for r in fx["contributions"]
                                        if r["logical_chunk_id"] == s and r["status"] != "rewrite_loser")
                                for s, _ in slots},
        "estimates": estimates,
        "contributions": [{**r, "coefficient": coefs[r["intervention_id"]],
                           "auxiliary_coefficients": {m: ex["estimates"][m]["coefficients"][r["intervention_id"]]
                                                      for m in COMPONENTS}} for r in fx["contributions"]],
        "observations_table": table, "bare_baseline": bare_baseline}
    _write(d / "gate" / "contributions.json", contributions)
    _write(d / "gate" / "mask_assignments.json", {
        "schema_version": "shopsimrl-online-skill-assignments-v1", "created_at": "2026-09-06T14:51:00+00:00",
        "mask_seed": ex["mask_seed"], "pool_sha256": fx["pool_sha256"], "columns": columns,
        "slots": [{"slot_id": s, "old_version_id": s if s.startswith("chunk-") else None, "versions": vs}
                  for s, vs in slots],
        "assignments": assignments, "assignment_sha256": fx["assignment_sha256"]})
    skills = []
    for sid in ex["selected_intervention_ids"]:
        r = rows[sid]
        skills.append({"skill_id": r["logical_chunk_id"], "version": "candidate" if r["kind"] == "candidate"
                       else "paired-delta-positive-1", "enabled": True, "content": _content(sid),
                       "metadata": {"validation_result": "selected", "estimated_effect": coefs[sid],
                                    "contribution_rank": r["rank"], "selected_intervention_id": sid}})
    _write(d / "gate" / "selected_skillbank.json", {
        "schema_version": "shopsimrl-skillbank-v1", "bank_version": "online-round-000-selected-v1",
        "metadata": {"round_id": fx["round_id"], "pool_sha256": fx["pool_sha256"],
                     "assignment_sha256": fx["assignment_sha256"], "active_skill_budget": 10,
                     "selected_count": len(skills), "selected_intervention_ids": ex["selected_intervention_ids"]},
        "skills": skills})
    (d / "gate" / "selected_skill.md").write_text(
        "# Shopping Skill\n\n> Active skill frozen by online randomized validation.\n\n"
        + "\n\n".join(s["content"] for s in skills) + "\n", encoding="utf-8")
    _write(d / "gate" / "summary.json", {
        "schema_version": "shopsimrl-eval-summary-v2", "created_at": "2026-09-06T15:03:00+00:00",
        "counts": {"requested": 400, "trace_files": 1, "completed": 400, "failed": 0, "scored": 400, "coverage": 1.0},
        "primary": {"reward_mean": ex["estimates"]["reward"]["masked_mean"], "reward_sem": 0.02,
                    "success_rate": ex["estimates"]["r_success"]["masked_mean"]}})
    _write(d / "gate" / "online_gate_manifest.json", {
        "schema_version": "shopsimrl-online-validation-gate-v2", "created_at": "2026-09-06T15:03:27+00:00",
        "status": "complete", "config": {"name": fx["round_id"], "mask_seed": ex["mask_seed"], "active_skill_budget": 10},
        "input": {"proposal_checkpoint": fx["proposal_checkpoint"], "pool_sha256": fx["pool_sha256"],
                  "assignment_sha256": fx["assignment_sha256"],
                  "model": {"checkpoint_id": fx["evaluation_checkpoint"], "model": "Qwen/Qwen3.5-4B"}},
        "output": {"selected_chunk_ids": [rows[s]["logical_chunk_id"] for s in ex["selected_intervention_ids"]]}})
    return d


COLD_CHUNK = "chunk-1f8d27322e9f"  # compiled from success-batch-007-cluster-09 (spec: its real cluster)
COLD_CLUSTER = "success-batch-007-cluster-09"


def write_cold_start(root: Path, card_episodes: list[str]) -> Path:
    """``root/cold-start/``: the published ``initial_skillbank.json`` (one chunk per current skill of round 000, the
    real ids, placeholder texts) and the local ``evidence_cards.jsonl`` (one success card per episode of
    ``card_episodes``, all in ``COLD_CLUSTER``), ``cluster_batches.jsonl`` and ``initial_skill_draft.json``."""
    fx = facts()
    d = Path(root) / "cold-start"
    current = [r["intervention_id"] for r in fx["contributions"] if r["kind"] == "current"]
    clusters = {c: [COLD_CLUSTER] if c == COLD_CHUNK else [f"failure-batch-001-cluster-{n:02d}"]
                for n, c in enumerate(current, 1)}
    _write(d / "initial_skillbank.json", {
        "schema_version": "shopsimrl-skillbank-v1", "bank_version": "cold-start-draft-pre-validation",
        "metadata": {"draft_schema_version": "shopsimrl-initial-skill-draft-v2",
                     "gate_status": {"gate_a": "not_run", "gate_b": "not_run"}, "active_skill_budget": 10},
        "skills": [{"skill_id": c, "version": "draft-1", "enabled": True, "content": _content(c),
                    "metadata": {"workflow_stage": "占位", "draft_only": True, "evidence_cluster_ids": clusters[c],
                                 "validation_result": None}} for c in current]})
    cards = [{"schema_version": "shopsimrl-evidence-card-v3", "card_id": f"success-{e}-01", "source_trajectory_id": e,
              "channel": "success", "mechanism": "占位", "applicable_when": "占位", "observed_evidence": "占位",
              "decisive_behavior": "占位", "generalizable_lesson": "占位", "related_chunk_ids": [], "confidence": 0.8,
              "firewall_findings": [], "eligible_for_consolidation": True, "created_at": "2026-08-31T10:00:00+00:00"}
             for e in card_episodes]
    (d / "evidence_cards.jsonl").write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cards),
                                            encoding="utf-8")
    batch = {"batch_id": "success-batch-007", "channel": "success", "input_fingerprint": "3" * 64,
             "clusters": [{"schema_version": "shopsimrl-evidence-cluster-v2", "cluster_id": COLD_CLUSTER,
                           "channel": "success", "batch_id": "success-batch-007", "workflow_stage": "候选验证",
                           "mechanism": "占位", "applicable_when": "占位", "procedure": "占位", "verification": "占位",
                           "common_failure": "占位", "evidence_card_ids": [c["card_id"] for c in cards]}],
             "evidence_only_card_ids": [], "created_at": "2026-08-31T11:00:00+00:00"}
    (d / "cluster_batches.jsonl").write_text(json.dumps(batch, ensure_ascii=False) + "\n", encoding="utf-8")
    _write(d / "initial_skill_draft.json", {
        "schema_version": "shopsimrl-initial-skill-draft-v2", "created_at": "2026-08-31T12:00:00+00:00",
        "stage": "cold_start_draft_pre_validation", "gate_status": {"gate_a": "not_run", "gate_b": "not_run"},
        "validation_dimension_cap": 16, "active_skill_budget": 10, "skill_title": "占位技能",
        "chunks": [{"chunk_id": COLD_CHUNK, "order": 1, "title": "候选验证 - 详情页深度检查", "workflow_stage": "候选验证",
                    "applicable_when": "占位", "procedure": ["第一步", "第二步"], "verification": "占位",
                    "common_failure": "占位", "evidence_cluster_ids": [COLD_CLUSTER]}],
        "evidence_only_cluster_ids": [], "conflicts_resolved": []})
    return d
