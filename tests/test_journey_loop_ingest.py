"""Journey: ShopSimRL's Trace2Skill round artifacts -> ``shopsim-wh ingest`` -> joinable tables -> ``shopsim-wh sql``.

The round directory (round-000's real ids and figures, placeholder texts) and the v4 run directories it cites are
written in ShopSimRL's own formats by tests/shopsimrl_loop_raw.py and tests/shopsimrl_raw.py; every answer below is
read back through the installed CLI and compared with the files' figures.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests import shopsimrl_loop_raw as loop
from tests import shopsimrl_raw as raw
from tests.journeys import ok, shopsim

FX = loop.facts()
EX = FX["expected"]
VAL_TASKS = [19, 20, 30, 31]  # the first observations of round 000's gate
COLD_EPISODE = "task-000100__sample-000"  # a train episode a cold-start success card analysed


def _sql(cwd: Path, query: str, **params) -> list[dict]:
    args = [a for k, v in params.items() for a in ("-p", f"{k}={v}")]
    return json.loads(ok(shopsim("sql", "-w", "wh", "--format", "json", query, *args, cwd=cwd)).stdout)


def _runs(root: Path) -> str:
    """A train run holding the episodes the cards analysed, and round 000's bare and masked val runs (4 tasks);
    returns the bare run's ShopSimRL plan fingerprint (contributions.json's bare_baseline names it)."""
    bbef_cards = FX["ledger"][3]["source_card_ids"]
    train_jobs = [raw.job("train", 100 + n) for n in range(len(bbef_cards) + 1)]
    prov = raw.provenance(raw.NO_SKILLS)
    detail = {"r_type": 1.0, "r_att": 1.0, "r_option": 1.0, "r_price": 1.0, "r_loose": 1.0, "r_strict": 1.0,
              "r_success": 1.0}
    train = [raw.record(j, prov, 1.0, detail) for j in train_jobs]
    for rec, card in zip(train[1:], bbef_cards, strict=True):  # online retries keep ShopSimRL's retry episode ids
        rec["episode_id"] = loop.card_trajectory(card)
    raw.write_run(root, "train-traces", train, raw.plan("train-traces", train_jobs, raw.NO_SKILLS))
    pairs = {int(p["task_id"]): p for p in FX["pairs"]}
    jobs = [raw.job("val", t) for t in VAL_TASKS]
    bare_plan = raw.plan("val-bare", jobs, raw.NO_SKILLS)
    raw.write_run(root, "val-bare", [raw.record(j, prov, float(pairs[j["task_id"]]["bare_reward"]),
                                                {m: float(pairs[j["task_id"]][f"bare_{m}"]) for m in loop.COMPONENTS})
                                     for j in jobs], bare_plan)
    slots = loop.slots_of(FX)
    included = [loop.online_mask(EX["mask_seed"], "val", t, 0, slots) for t in VAL_TASKS]
    masks = raw.mask_assignments(jobs, included, EX["columns"], [{"slot_id": s, "versions": v} for s, v in slots],
                                 EX["mask_seed"], FX["pool_sha256"])
    masks["assignment_sha256"] = FX["assignment_sha256"]  # the published gate's (its texts are not ours)
    skills = raw.masked_skills(EX["columns"], FX["pool_sha256"], masks)
    treat = [raw.record(j, raw.provenance(skills), float(pairs[j["task_id"]]["masked_reward"]),
                        {m: float(pairs[j["task_id"]][f"masked_{m}"]) for m in loop.COMPONENTS}, inc)
             for j, inc in zip(jobs, included, strict=True)]
    raw.write_run(root, "val-masked", treat, raw.plan("val-masked", jobs, skills), masks)
    return raw.fingerprint(bare_plan)


@pytest.fixture(scope="module")
def wh(tmp_path_factory) -> dict:
    cwd = tmp_path_factory.mktemp("loop")
    plan_fp = _runs(cwd / "runs")
    ok(shopsim("ingest", "runs", "-w", "wh", "--quiet", cwd=cwd))
    art = cwd / "artifacts"
    loop.write_round(art, plan_fp)
    loop.write_cold_start(art, [COLD_EPISODE])
    first = json.loads(ok(shopsim("ingest", "artifacts", "-w", "wh", "--output", "json", cwd=cwd)).stdout)
    again = json.loads(ok(shopsim("ingest", "artifacts", "-w", "wh", "--output", "json", cwd=cwd)).stdout)
    return {"cwd": cwd, "first": first, "again": again}


def test_round_lands_once_and_reingest_adds_nothing(wh):
    first = {f["run_id"]: f for f in wh["first"]["files"]}
    assert set(first) == {"round-000", "cold-start"}
    assert all(f["status"] == "landed" and f["format"] == "shopsimrl-trace2skill" for f in first.values())
    assert [f["status"] for f in wh["again"]["files"]] == ["already_present"] * 2
    assert wh["again"]["units_already_present"] == 2 and wh["again"]["units_read"] == 0
    counts = _sql(wh["cwd"], "select run_id, count(*) as n from loop_artifacts group by run_id order by run_id")
    assert counts == [{"run_id": "cold-start", "n": 4}, {"run_id": "round-000", "n": 11}]
    assert _sql(wh["cwd"], "select count(*) as n from gate_results where run_id = 'round-000'") == [{"n": 1}]


def test_gate_figures_equal_contributions_json(wh):
    rows = _sql(wh["cwd"], "select name, beta, rank, status from gate_coefficients where run_id = 'round-000'")
    got = {r["name"]: r for r in rows}
    coefs = EX["estimates"]["reward"]["coefficients"]
    assert len(got) == 16
    for c in FX["contributions"]:
        g = got[c["intervention_id"]]
        assert (g["beta"], g["rank"], g["status"]) == (coefs[c["intervention_id"]], c["rank"], c["status"])
    g = _sql(wh["cwd"], "select decision, selected, n_pairs, budget, bare_checkpoint_id, decided_at, "
             "json_extract(coefficients, '$[0].auxiliary.r_att')::double as aux, bare_run, treatment_run, "
             "json_extract(result, '$.estimates.reward.masked_mean')::double as masked_mean from gate_results")[0]
    assert json.loads(g["selected"]) == EX["selected_intervention_ids"]
    assert (g["decision"], g["n_pairs"], g["budget"]) == ("pass", 400, 10)
    assert g["bare_checkpoint_id"] == "round-000-checkpoint"
    assert g["aux"] == EX["estimates"]["r_att"]["coefficients"]["chunk-27a7e5bb9344"] == 0.04146044735621404
    assert g["masked_mean"] == 0.7916607142857143
    assert g["bare_run"].startswith("shopsimrl-v4.") and g["treatment_run"].startswith("shopsimrl-v4.")
    assert g["bare_run"] != g["treatment_run"]
    means = _sql(wh["cwd"], "select avg(reward) as m, avg(bare_reward) as b, count(*) as n from gate_observations")[0]
    assert means["n"] == 400
    assert means["m"] == pytest.approx(EX["estimates"]["reward"]["masked_mean"], abs=1e-12)
    assert means["b"] == pytest.approx(EX["estimates"]["reward"]["bare_mean"], abs=1e-12)
    first = _sql(wh["cwd"], "select episode_id, mask, reward, bare_reward, delta_reward from gate_observations "
                 "where position = 1")[0]
    assert first == {"episode_id": "task-000019__sample-000", "mask": "[1,0,0,1,1,1,1,0,1,1,1,1,1,1,0,0]",
                     "reward": 1.0, "bare_reward": 0.0, "delta_reward": 1.0}


def test_ledger_pool_and_bank_figures(wh):
    cwd = wh["cwd"]
    fates = _sql(cwd, "select candidate_id, validation_result, estimated_effect, contribution_rank, pool_sha256 "
                 "from proposal_ledger where ledger = 'gate' order by line")
    assert [f["candidate_id"] for f in fates] == [x["candidate_id"] for x in FX["ledger"]]
    assert {f["candidate_id"]: f["validation_result"] for f in fates} == {
        "online-6f027bfd79ba53d1": "rewrite_loser", "online-8e3e179b9270814a": "selected",
        "online-9f5ef47f8e1b2bee": "non_positive", "online-bbef274e1764d953": "selected",
        "online-bf7be6b73666b096": "non_positive", "online-43fef639d72271bd": "non_positive"}
    bbef = next(f for f in fates if f["candidate_id"] == "online-bbef274e1764d953")
    assert (bbef["estimated_effect"], bbef["contribution_rank"]) == (0.07390903939347465, 1)
    assert {f["pool_sha256"] for f in fates} == {FX["pool_sha256"]}
    pool = _sql(cwd, "select entry, count(*) as n, min(pool_sha256) as sha, min(current_skillbank_sha256) as bank "
                "from candidate_pools group by entry order by entry")
    assert pool == [{"entry": "candidate", "n": 6, "sha": FX["pool_sha256"], "bank": FX["current_skillbank_sha256"]},
                    {"entry": "current", "n": 10, "sha": FX["pool_sha256"], "bank": FX["current_skillbank_sha256"]}]
    art = cwd / "artifacts" / "round-000"
    pool_doc = json.loads((art / "analysis" / "candidate_pool.json").read_text())
    recomputed = loop.fingerprint({k: v for k, v in pool_doc.items() if k not in ("created_at", "pool_sha256")})
    assert _sql(cwd, "select declared_sha256, recomputed_sha256 from loop_artifacts where kind = 'candidate_pool.json'") \
        == [{"declared_sha256": FX["pool_sha256"], "recomputed_sha256": recomputed}]
    bank_sha = loop.fingerprint(json.loads((art / "gate" / "selected_skillbank.json").read_text()))
    banks = _sql(cwd, "select run_id, bank_sha256, skills, origin from skillbanks order by run_id")
    assert banks[1] == {"run_id": "round-000", "bank_sha256": bank_sha, "skills": 7, "origin": "ingested"}
    skills = _sql(cwd, "select skill_id, candidate_id, estimated_effect, contribution_rank from skillbank_skills "
                  "where bank_sha256 = $b order by position", b=bank_sha)
    assert [s["candidate_id"] for s in skills] == EX["selected_intervention_ids"]
    assert skills[-1] == {"skill_id": "online-bbef274e1764d953", "candidate_id": "online-bbef274e1764d953",
                          "estimated_effect": 0.07390903939347465, "contribution_rank": 1}
    assert _sql(cwd, "select count(*) as n, count(distinct assignment_sha256) as a, min(assignment_sha256) as sha "
                "from mask_assignments") == [{"n": 400, "a": 1, "sha": FX["assignment_sha256"]}]


def test_lineage_from_selected_skill_to_episodes_and_coefficient(wh):
    cwd = wh["cwd"]
    rows = _sql(cwd, "select card_id, episode_run_id, task_id, gate_coefficient, gate_rank, gate_status "
                "from loop_skill_evidence where round_id = 'round-000' and skill_id = $s and via = 'ledger' "
                "order by card_id", s="online-bbef274e1764d953")
    assert [r["card_id"] for r in rows] == sorted(FX["ledger"][3]["source_card_ids"])
    assert all(r["episode_run_id"] and r["episode_run_id"].startswith("shopsimrl-v4.") for r in rows)
    assert {(r["gate_coefficient"], r["gate_rank"], r["gate_status"]) for r in rows} == {
        (0.07390903939347465, 1, "selected")}
    assert sorted(r["task_id"] for r in rows) == [101, 102, 103, 104]
    chunk = _sql(cwd, "select card_id, source_trajectory_id, episode_run_id, gate_coefficient from loop_skill_evidence "
                 "where round_id = 'round-000' and skill_id = $s", s=loop.COLD_CHUNK)
    assert chunk == [{"card_id": f"success-{COLD_EPISODE}-01", "source_trajectory_id": COLD_EPISODE,
                      "episode_run_id": chunk[0]["episode_run_id"], "gate_coefficient": 0.04670235093096396}]
    assert chunk[0]["episode_run_id"] is not None
    steps = _sql(cwd, "select count(*) as n from loop_card_steps where card_id = $c", c=f"success-{COLD_EPISODE}-01")
    assert steps == [{"n": 1}]
    obs = _sql(cwd, "select episode_id, treatment_run, bare_run, reward, treatment_episode_reward, bare_reward, "
               "bare_episode_reward from loop_gate_observations where treatment_episode_reward is not null order by position")
    assert [o["episode_id"] for o in obs] == [f"task-{t:06d}__sample-000" for t in VAL_TASKS]
    assert all(o["reward"] == o["treatment_episode_reward"] and o["bare_reward"] == o["bare_episode_reward"]
               and o["bare_run"] for o in obs)
    assert _sql(cwd, "select count(distinct treatment_run) as t, count(distinct bare_run) as b "
                "from loop_gate_observations") == [{"t": 1, "b": 1}]


def test_no_gold_lands(wh):
    cards = _sql(wh["cwd"], "select card_id, audit, terminal_trials from evidence_cards where channel = 'failure'")
    assert len(cards) == 8
    assert all(set(json.loads(c["audit"])) == set(loop_audit_keys()) and c["terminal_trials"] == 1 for c in cards)
    dump = ok(shopsim("sql", "-w", "wh", "--format", "csv", "select * from evidence_cards", cwd=wh["cwd"])).stdout
    assert loop.GOLD_ASIN not in dump and "B0CHOSEN999" not in dump and "gold_asin" not in dump


def loop_audit_keys() -> tuple:
    return ("failure_surface", "earliest_divergence", "oracle_comparison", "replay_evidence", "minimal_repair",
            "repair_validation_result")


def test_bad_and_changed_files_write_nothing(wh, tmp_path):
    cwd = wh["cwd"]
    before = _sql(cwd, "select count(*) as n from loop_artifacts")
    bad = tmp_path / "round-001"
    shutil.copytree(cwd / "artifacts" / "round-000", bad)
    doc = json.loads((bad / "gate" / "contributions.json").read_text())
    doc["contributions"][3]["coefficient"] = "high"
    (bad / "gate" / "contributions.json").write_text(json.dumps(doc))
    res = shopsim("ingest", str(bad), "-w", str(cwd / "wh"), cwd=cwd)
    assert res.returncode == 2
    out = res.stdout + res.stderr
    assert "contributions.json" in out and "contributions[3]" in out and "'coefficient'" in out
    changed = tmp_path / "again" / "round-000"
    shutil.copytree(cwd / "artifacts" / "round-000", changed)
    ledger = changed / "analysis" / "proposal_ledger.jsonl"
    ledger.write_text(ledger.read_text().replace("占位", "改过"))
    res = shopsim("ingest", str(changed), "-w", str(cwd / "wh"), cwd=cwd)
    assert res.returncode == 2 and "immutable" in res.stdout + res.stderr and "runs rm round-000" in res.stdout
    assert _sql(cwd, "select count(*) as n from loop_artifacts") == before
    assert _sql(cwd, "select count(*) as n from loop_artifacts where run_id = 'round-001'") == [{"n": 0}]
