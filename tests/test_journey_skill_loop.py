"""Issue 30, part C: the research loop closed inside the warehouse, on the embedded default, through the installed
CLI: a bare val run -> `skills mine` (rule templates from the taxonomy) -> `skills add` (a planted placebo and a
planted leak) -> `skills review` (every candidate accepted) -> `skills snapshot` (the leak left out by the gold
firewall) -> a masked treatment run with ShopSimRL's online mask rule -> `gate --rule strictly-positive-top-k` ->
`skills select` (the selected SkillBank and its proposal ledger) -> a run with the selected bank.

The runs are real episodes of the embedded server and scripted policy at temperature 0 (deterministic: the policy
selects options and checks prices only when a skill says so). About the placebo: ShopSimRL's rule has no
significance test, so an inert skill is kept whenever its coefficient comes out positive; on 64 val tasks the
placebo was kept for 4 of the experiment seeds 1-6, on 32 for 2 of seeds 1-5 (docs/skills.md "What the gate can
and cannot tell"). This journey runs 32 tasks on seed 1, where it is not: the assertion holds the loop's bookkeeping (a non-positive candidate never
reaches the selected bank, and its fate is in the ledger), not a power claim about the rule.
"""

from __future__ import annotations

import json
import stat

import pytest

from .journeys import ok, shopsim

TASKS = 32
CONFIG = f"""experiment: {{name: loop-bare, seed: 1}}
tasks: {{split: val, sample_size: {TASKS}, repeats: 1}}
model: {{name: scripted-strong, base_url: embedded, checkpoint_id: scripted-strong@v1, send_seed: true,
        sampling: {{temperature: 0.0}}}}
environment: {{url: embedded}}
skills: {{path: null}}
"""
PLACEBO = "### Take a breath\n\n- Applies when: always\n- Procedure:\n  1. Take a moment before each action.\n"


def test_this_journey_runs_the_tutorials_loop_config():
    """tests/test_tutorial.py stops before section 8: this file runs it, on the tutorial's own `loop.yaml`."""
    import re

    import yaml

    from .conftest import REPO

    text = (REPO / "docs" / "tutorial.md").read_text()
    block = re.search(r"^```yaml file=loop\.yaml\n(.*?)^```", text, re.S | re.M).group(1)
    assert yaml.safe_load(block) == yaml.safe_load(CONFIG)
    for command in ("skills mine", "skills add", "skills review", "skills snapshot", "--rule strictly-positive-top-k",
                    "skills select"):
        assert command in text.split("<!-- tutorial: skills loop -->")[1], command


def _json(res) -> dict:
    return json.loads(ok(res).stdout)


def _sql(query: str, root) -> list[dict]:
    """A check's query, read in-process from the warehouse the CLI wrote (the commands are the seam, not this)."""
    from shopsim_wh.engines.db import connect

    con = connect(root)
    try:
        cur = con.execute(query)
        names = [c[0] for c in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    d = tmp_path_factory.mktemp("loop")
    env = {"SHOPSIM_WH_HOME": str(d / "wh"), "USER": "journey-reviewer"}
    (d / "bare.yaml").write_text(CONFIG)
    (d / "masked.yaml").write_text(CONFIG.replace("loop-bare", "loop-masked").replace(
        "skills: {path: null}", "skills: {path: bank.json, mask_seed: 20260901, mask_rule: online}"))
    (d / "selected.yaml").write_text(CONFIG.replace("loop-bare", "loop-selected").replace(
        "skills: {path: null}", "skills: {path: sel/selected_skillbank.json}"))
    (d / "placebo.md").write_text(PLACEBO)
    ok(shopsim("run", "bare.yaml", "-q", "-w", d / "wh", cwd=d, env=env))

    mined = _json(shopsim("skills", "mine", "--runs", "loop-bare", "-f", "json", cwd=d, env=env))
    placebo = ok(shopsim("skills", "add", "--title", "Placebo", "--content-file", "placebo.md",
                         "--mechanism", "placebo", cwd=d, env=env)).stdout.split()[1]
    # a leak: the title, brand and an offered option of an evidence episode's product page, an ASIN, a task id
    ev = json.loads(_sql("SELECT negative_refs FROM skill_candidates WHERE mechanism = 'option_miss'",
                         d / "wh")[0]["negative_refs"])[0]
    page = _sql("SELECT json_extract_string(observation_state, '$.product.title') AS title, "
                "json_extract_string(observation_state, '$.product.brand') AS brand, "
                "json_extract(observation_state, '$.available_options') AS opts FROM observations "
                f"WHERE run_id = 'loop-bare' AND episode_id = '{ev['episode_id']}' AND page = 'product_detail' "
                "AND json_extract(observation_state, '$.available_options') != '{}' LIMIT 1", d / "wh")[0]
    option = next(v for vs in json.loads(page["opts"]).values() for v in vs if len(v.strip()) >= 6)
    leak_text = f"### Buy it\n\n- Procedure:\n  1. Open {page['title']} and choose {option}.\n"
    leak = ok(shopsim("skills", "add", "--title", "Copy the instance", "--content", leak_text,
                      "--negative", f"loop-bare:{ev['episode_id']}:{ev['step_idx']}", cwd=d, env=env)).stdout.split()[1]

    listed = _json(shopsim("skills", "list", "-f", "json", cwd=d, env=env))["candidates"]
    # the reviewer accepts everything, the placebo and the leak too
    ok(shopsim("skills", "review", *[c["candidate_id"] for c in listed], "--accept", "--reason",
               "reads as general advice", cwd=d, env=env))
    snap = _json(shopsim("skills", "snapshot", "--out", "bank.json", "-f", "json", cwd=d, env=env))
    again = shopsim("skills", "snapshot", "--out", "bank.json", cwd=d, env=env)
    ok(shopsim("run", "masked.yaml", "-q", "-w", d / "wh", cwd=d, env=env))
    gate = shopsim("gate", "--bare", "loop-bare", "--treatment", "loop-masked", "--rule", "strictly-positive-top-k",
                   "--format", "json", cwd=d, env=env)
    selected = _json(shopsim("skills", "select", "--treatment", "loop-masked", "--out", "sel", "-f", "json",
                             cwd=d, env=env))
    ok(shopsim("run", "selected.yaml", "-q", "-w", d / "wh", cwd=d, env=env))
    return {"dir": d, "env": env, "mined": mined, "placebo": placebo, "leak": leak, "listed": listed, "snap": snap,
            "again": again, "gate": gate, "selected": selected}


def test_mine_clusters_the_taxonomy_into_candidates_with_evidence(loop):
    d, env = loop["dir"], loop["env"]
    mechanisms = {c["mechanism"]: c for c in loop["mined"]["candidates"]}
    assert {"option_miss", "over_budget"} <= set(mechanisms)
    assert all(c["candidate_id"].startswith("online-") and len(c["candidate_id"]) == 23 for c in mechanisms.values())
    # every negative ref is a labelled step of its mechanism, every positive ref a strict success's step
    bad = _sql("""SELECT c.candidate_id, r.episode_id FROM skill_candidates c,
                  unnest(from_json(c.negative_refs, '[{"run_id":"VARCHAR","episode_id":"VARCHAR","step_idx":"INTEGER"}]')) t(r)
                  WHERE c.mechanism = 'option_miss' AND NOT EXISTS (SELECT 1 FROM error_labels l WHERE l.run_id = r.run_id
                  AND l.episode_id = r.episode_id AND l.step_idx = r.step_idx AND l.code = 'option_miss')""", d / "wh")
    assert bad == []
    bad = _sql("""SELECT r.episode_id FROM skill_candidates c,
                  unnest(from_json(c.positive_refs, '[{"run_id":"VARCHAR","episode_id":"VARCHAR","step_idx":"INTEGER"}]')) t(r)
                  LEFT JOIN episodes e ON e.run_id = r.run_id AND e.episode_id = r.episode_id
                  LEFT JOIN steps s ON s.run_id = r.run_id AND s.episode_id = r.episode_id AND s.step_idx = r.step_idx
                  WHERE c.builder = 'rules' AND (s.step_idx IS NULL OR NOT coalesce(e.r_success = 1, false))""", d / "wh")
    assert bad == []
    n = _sql("SELECT count(*) AS n FROM skill_candidates WHERE mechanism = 'option_miss'", d / "wh")[0]["n"]
    assert n == 1
    # mining again adds nothing
    again = _json(shopsim("skills", "mine", "--runs", "loop-bare", "-f", "json", cwd=d, env=env))
    assert again["candidates"] == [] and set(again["already_mined"]) == {c["candidate_id"] for c in mechanisms.values()}


def test_the_firewall_blocks_the_leak_and_nothing_flagged_reaches_a_bank(loop):
    d, env = loop["dir"], loop["env"]
    state = {c["candidate_id"]: c for c in _json(shopsim("skills", "list", "-f", "json", cwd=d, env=env))["candidates"]}
    assert state[loop["leak"]]["state"] == "blocked"
    assert {f["finding"] for f in state[loop["leak"]]["findings"]} == {
        "copies_instance_product_title", "copies_instance_brand", "copies_gold_option"}
    assert all(c["state"] == "accepted" for cid, c in state.items() if cid != loop["leak"])
    assert loop["leak"] not in loop["snap"]["skills"] and loop["placebo"] in loop["snap"]["skills"]
    assert [x["candidate_id"] for x in loop["snap"]["left_out"]] == [loop["leak"]]
    # in no bank of the warehouse (the snapshot, the selection) is a candidate with a finding
    flagged = _sql("SELECT s.bank_sha256, s.skill_id FROM skillbank_skills s JOIN skill_firewall f "
                   "ON f.candidate_id = s.candidate_id", d / "wh")
    assert flagged == []
    banks = _sql("SELECT bank_sha256, skills FROM skillbanks ORDER BY created_at", d / "wh")
    assert [b["bank_sha256"] for b in banks] == [loop["snap"]["bank_sha256"], loop["selected"]["selected_skillbank_sha256"]]


def test_the_snapshot_is_an_immutable_traceable_skillbank(loop):
    from shopsim_wh.rollout.jobs import sha256_json
    from shopsim_wh.rollout.skills import SkillBank

    d = loop["dir"]
    doc = json.loads((d / "bank.json").read_text())
    assert doc["schema_version"] == "shopsimrl-skillbank-v1" and sha256_json(doc) == loop["snap"]["bank_sha256"]
    assert not (d / "bank.json").stat().st_mode & stat.S_IWUSR
    assert loop["again"].returncode == 2 and "never overwritten" in loop["again"].stderr
    for s in doc["skills"]:
        meta = s["metadata"]
        assert meta["review"]["decision"] == "accept" and meta["review"]["reviewer"] == "journey-reviewer"
        assert meta["firewall"]["findings"] == [] and len(meta["firewall"]["checks"]) == 7
        assert meta["evidence"]["negative_refs"] or s["skill_id"] == loop["placebo"]
    assert SkillBank(str(d / "bank.json")).size == len(doc["skills"])  # usable as skills.path


def test_the_gate_selects_skills_that_raise_reward_and_not_the_placebo(loop):
    d = loop["dir"]
    ok(loop["gate"])
    gate = json.loads(loop["gate"].stdout)
    coef = {c["chunk_id"]: c for c in gate["contributions"]}
    options = next(c["candidate_id"] for c in loop["mined"]["candidates"] if c["mechanism"] == "option_miss")
    assert coef[options]["rank"] == 1 and coef[options]["status"] == "selected"
    assert coef[loop["placebo"]]["coefficient"] <= 0 and coef[loop["placebo"]]["status"] == "non_positive"
    assert loop["leak"] not in coef  # never injected: it was in no bank
    sel = json.loads((d / "sel" / "selected_skillbank.json").read_text())
    assert [s["skill_id"] for s in sel["skills"]] == loop["selected"]["selected_intervention_ids"]
    assert set(loop["selected"]["selected_intervention_ids"]) == set(gate["selected_chunk_ids"])
    assert loop["placebo"] not in loop["selected"]["selected_intervention_ids"]
    assert all(s["metadata"]["estimated_effect"] > 0 for s in sel["skills"])
    reward = {r["run_id"]: r["reward"] for r in _sql(
        "SELECT run_id, avg(reward) AS reward FROM episodes GROUP BY run_id", d / "wh")}
    assert reward["loop-selected"] > reward["loop-bare"] + 0.2  # the selected bank helps the embedded policy


def test_the_proposal_ledger_records_every_candidates_fate(loop):
    d = loop["dir"]
    lines = [json.loads(x) for x in (d / "sel" / "proposal_ledger.jsonl").read_text().splitlines()]
    fates = {x["candidate_id"]: x["validation_result"] for x in lines}
    assert set(fates) == {c["candidate_id"] for c in loop["listed"]}
    assert fates == loop["selected"]["fates"]
    assert fates[loop["leak"]] == "gold_firewall_violation" and fates[loop["placebo"]] == "non_positive"
    for x in lines:
        assert {"candidate_id", "operation", "target_chunk_id", "source_card_ids", "failure_mechanism",
                "proposal_checkpoint", "stage", "consolidation_cluster_id", "replacement_family_id", "content",
                "validation_result", "estimated_effect", "contribution_rank", "notes"} <= set(x)
        if x["validation_result"] in ("selected", "non_positive", "budget_excluded"):
            assert x["validation_history"][0]["intervention_id"] == x["candidate_id"]
            assert x["estimated_effect"] is not None
    again = shopsim("skills", "select", "--treatment", "loop-masked", "--out", "sel", cwd=d, env=loop["env"])
    assert again.returncode == 2 and "never overwritten" in again.stderr
