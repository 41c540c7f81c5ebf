"""Journey: a user's own ShopSimRL run directories -> `shopsim-wh ingest` -> `gate` / `compare`, through the installed
CLI. The run directories are raw JSON lines in the original's format (tests/shopsimrl_raw.py), built from the
published per-job numbers in tests/fixtures/shopsimrl_artifacts; the answers are the published ones.

Issue 27, item 1: an ingested run carries its identity (manifest.json's plan, else its records' provenance), so the
gate and compare run on it with ShopSimRL's own alignment checks, and refuse, naming the field, when it differs.
"""

from __future__ import annotations

import csv
import json

import pytest

from shopsim_wh.rollout.skills import assign_mask

from . import shopsimrl_raw as raw
from .journeys import ok, shopsim

FIXTURES = raw.Path(__file__).parent / "fixtures" / "shopsimrl_artifacts"
EXP = json.loads((FIXTURES / "round000_expected.json").read_text())
PAIRS = list(csv.DictReader((FIXTURES / "round000_pairs.csv").open()))
EXPECTED = json.loads((FIXTURES / "expected_comparisons.json").read_text())
OUTCOMES = list(csv.DictReader((FIXTURES / "test_task_outcomes.csv").open()))
COLUMNS = EXP["columns"]
REWRITES = {s["version"]: s["slot_id"] for s in EXP["slots"] if s["version"] != s["slot_id"]}
METRICS = ("reward", "r_att", "r_loose", "r_option", "r_price", "r_strict", "r_success", "r_type")
POOL = "692abcce" * 8
BANK = ["chunk-27a7e5bb9344", "chunk-a9e98e128a35"]
JSON_BANK = {"provider": "json_skillbank", "schema_version": "shopsimrl-skillbank-v1", "bank_version": "1",
             "bank_sha256": "f" * 64, "max_skills": None}


def _ingest(root, wh) -> dict[str, str]:
    """Run directory name -> run id, from `shopsim-wh ingest --output json`."""
    doc = json.loads(ok(shopsim("ingest", root, "-w", wh, "--output", "json", "-q")).stdout)
    assert doc["records_rejected"] == 0
    assert all(f["status"] in ("landed", "attached") for f in doc["files"]), doc["files"]
    return {f["path"].split("/")[-2]: f["run_id"] for f in doc["files"] if f["status"] == "landed"}


def _slots() -> list[dict]:
    slots: dict[str, list[str]] = {}
    for s in EXP["slots"]:
        slots.setdefault(s["slot_id"], []).append(s["version"])
    return [{"slot_id": k, "old_version_id": k if v[0] == k else None, "versions": v} for k, v in slots.items()]


@pytest.fixture(scope="module")
def round000(tmp_path_factory):
    """The round-000 online gate: the bare validation run, its masked gate run (with manifest.json and
    mask_assignments.json) and the same gate run without manifest or provenance."""
    tmp = tmp_path_factory.mktemp("round000")
    jobs = [raw.job(r["split"], int(r["task_id"]), int(r["sample_id"])) for r in PAIRS]
    included = [assign_mask(COLUMNS, j, EXP["mask_seed"], "online", REWRITES) for j in jobs]
    masks = raw.mask_assignments(jobs, included, COLUMNS, _slots(), EXP["mask_seed"], POOL)
    masked = raw.masked_skills(COLUMNS, POOL, masks)

    def recs(side, prov, with_skills):
        return [raw.record(j, prov, float(r[f"{side}_reward"]), {m: float(r[f"{side}_{m}"]) for m in METRICS[1:]},
                           inc if with_skills else ())
                for j, r, inc in zip(jobs, PAIRS, included, strict=True)]

    runs = tmp / "runs"
    raw.write_run(runs, "round-000-bare-val", recs("bare", raw.provenance(raw.NO_SKILLS), False),
                  raw.plan("round-000-bare-val", jobs, raw.NO_SKILLS))
    raw.write_run(runs, "round-000-gate", recs("masked", raw.provenance(masked), True),
                  raw.plan("round-000-gate", jobs, masked), masks)
    raw.write_run(runs, "round-000-gate-thin", recs("masked", {}, True))
    return tmp / "wh", _ingest(runs, tmp / "wh")


def test_gate_reproduces_the_published_round_000_coefficients(round000):
    wh, ids = round000
    res = ok(shopsim("gate", "--bare", ids["round-000-bare-val"], "--treatment", ids["round-000-gate"],
                     "--rule", "strictly-positive-top-k", "--budget", EXP["active_skill_budget"],
                     "--columns", ",".join(COLUMNS), "--format", "json", "-w", wh))
    doc = json.loads(res.stdout)
    assert doc["observations"] == 400 and doc["decision"] == "pass"
    for metric in METRICS:
        got, want = doc["estimates"][metric], EXP["estimates"][metric]
        assert got["coefficients"] == want["coefficients"], metric  # exact floats, as published
        assert (got["masked_mean"], got["bare_mean"], got["delta_mean"]) == (
            want["masked_mean"], want["bare_mean"], want["delta_mean"]), metric
    assert doc["selected_chunk_ids"] == EXP["selected_intervention_ids"]
    al = doc["alignment"]
    assert al["status"] == "matched" and al["assumed_aligned"] is False and al["vocabulary"] == "shopsimrl"
    assert al["identity_sources"] == {"bare": "shopsimrl-manifest", "treatment": "shopsimrl-manifest"}
    assert set(al["checked_fields"]) == {"model", "environment", "prompt", "runtime", "task_split", "records", "jobs",
                                         "masks"}
    # the decision is data: the gate_results row names the same selection
    rows = json.loads(ok(shopsim("sql", "select decision, selected from gate_results", "--format", "json",
                                 "-w", wh)).stdout)
    assert [(r["decision"], json.loads(r["selected"])) for r in rows] == [("pass", EXP["selected_intervention_ids"])]


def test_gate_on_a_run_without_identity_is_refused_then_assumed_and_says_so(round000):
    wh, ids = round000
    args = ("gate", "--bare", ids["round-000-bare-val"], "--treatment", ids["round-000-gate-thin"],
            "--rule", "strictly-positive-top-k", "--columns", ",".join(COLUMNS), "-w", wh, "--dry-run")
    refused = shopsim(*args)
    assert refused.returncode == 2, refused.stderr
    assert "record no run identity" in refused.stderr and "manifest.json" in refused.stderr
    assert ids["round-000-gate-thin"] in refused.stderr and "--assume-aligned" in refused.stderr
    doc = json.loads(ok(shopsim(*args, "--assume-aligned", "--format", "json")).stdout)
    assert doc["alignment"]["assumed_aligned"] is True and doc["alignment"]["status"] == "assumed"
    assert "alignment ASSUMED by the caller (--assume-aligned)" in " ".join(doc["notes"])
    assert doc["selected_chunk_ids"] == EXP["selected_intervention_ids"]  # the same data, unverified


def _outcome_records(arm: str, prov: dict, skills=()) -> tuple[list[dict], list[dict]]:
    jobs = [raw.job(r["split"], int(r["task_id"]), int(r["sample_id"])) for r in OUTCOMES]
    recs = []
    for j, r in zip(jobs, OUTCOMES, strict=True):
        reward, success = float(r[f"{arm}_reward"]), float(r[f"{arm}_success"])
        recs.append(raw.record(j, prov, reward, {"r_strict": reward, "r_success": success}, skills))
    return jobs, recs


@pytest.fixture(scope="module")
def test_split(tmp_path_factory):
    """qwen35-4b-test-base-s0: the skill-free run and the equipped one; equipped runs that differ in the model or
    the prompt; one whose records carry no provenance and that has no manifest.json."""
    tmp = tmp_path_factory.mktemp("test_split")
    runs = tmp / "runs"
    want = EXPECTED["qwen35-4b-test-base-s0"]
    jobs, recs = _outcome_records(want["bare_arm"], raw.provenance(raw.NO_SKILLS))
    bare_plan = raw.plan("qwen35-4b-test-base-free", jobs, raw.NO_SKILLS)
    raw.write_run(runs, "qwen35-4b-test-base-free", recs, bare_plan)
    _, recs = _outcome_records(want["equipped_arm"], raw.provenance(JSON_BANK), BANK)
    raw.write_run(runs, "qwen35-4b-test-base-s0", recs, raw.plan("qwen35-4b-test-base-s0", jobs, JSON_BANK))
    other = {**raw.MODEL, "model": "Qwen/Qwen3.5-9B"}
    _, recs = _outcome_records(want["equipped_arm"], raw.provenance(JSON_BANK, model=other), BANK)
    raw.write_run(runs, "other-model", recs, raw.plan("other-model", jobs, JSON_BANK, model=other))
    prompt = {**raw.PROMPT, "prompt_version": "shopsim-shopping-agent-tools-v3"}
    _, recs = _outcome_records(want["equipped_arm"], raw.provenance(JSON_BANK, prompt=prompt), BANK)
    raw.write_run(runs, "other-prompt", recs, raw.plan("other-prompt", jobs, JSON_BANK, prompt=prompt))
    _, recs = _outcome_records(want["equipped_arm"], {}, BANK)
    raw.write_run(runs, "no-identity", recs)
    return tmp / "wh", _ingest(runs, tmp / "wh"), bare_plan


def test_compare_reproduces_the_published_comparison_with_its_alignment(test_split):
    wh, ids, bare_plan = test_split
    want = EXPECTED["qwen35-4b-test-base-s0"]
    # by the names the user gave their runs (each experiment holds one run; its id is shopsimrl-v4.<hash>)
    res = ok(shopsim("compare", "qwen35-4b-test-base-free", "qwen35-4b-test-base-s0", "--format", "json", "-w", wh))
    doc = json.loads(res.stdout)
    assert ids["qwen35-4b-test-base-free"].startswith("shopsimrl-v4.")
    # the same two runs, paired by their manifests' job lists, in the checkpoint_compare view
    pair = json.loads(ok(shopsim("sql", "select n_pairs from checkpoint_compare where $a in (run_a, run_b) and "
                                 "$b in (run_a, run_b)", "-p", f"a={ids['qwen35-4b-test-base-free']}",
                                 "-p", f"b={ids['qwen35-4b-test-base-s0']}", "-f", "json", "-w", wh)).stdout)
    assert pair == [{"n_pairs": 400}]
    assert doc["paired"]["pairs"] == want["pairs"] == 400
    assert {k: doc["paired"]["bootstrap"][k] for k in want["bootstrap"]} == want["bootstrap"]
    for metric, exp in want["metrics"].items():
        got = doc["paired"]["metrics"][metric]
        assert {k: got[k] for k in exp} == exp, metric  # exact floats, as published
    plan, traces = doc["alignment"]["plan"], doc["alignment"]["traces"]
    assert plan["status"] == "matched" and doc["alignment"]["assumed_aligned"] is False
    assert {"model", "prompt", "runtime", "environment", "task_split", "jobs", "records"} <= set(plan["checked_fields"])
    assert plan["bare_plan_fingerprint"] == raw.fingerprint(bare_plan)
    assert traces["status"] == "matched" and traces["pairs"] == 400 and traces["equipped_chunk_ids"] == BANK
    assert traces["bare"]["model"] == [raw.MODEL] and traces["equipped"]["environment"] == [raw.OBSERVED_ENVIRONMENT]


@pytest.mark.parametrize(("command", "treatment", "field", "bare_value", "treatment_value"), [
    ("compare", "other-model", "model", "Qwen/Qwen3.5-4B", "Qwen/Qwen3.5-9B"),
    ("gate", "other-prompt", "prompt", "shopsim-shopping-agent-tools-v2", "shopsim-shopping-agent-tools-v3"),
])
def test_a_treatment_that_differs_beyond_the_skills_is_refused_naming_the_field(test_split, command, treatment, field,
                                                                                bare_value, treatment_value):
    wh, ids, _ = test_split
    bare, other = ids["qwen35-4b-test-base-free"], ids[treatment]
    args = (bare, other, "--samples", "10") if command == "compare" else ("--bare", bare, "--treatment", other,
                                                                          "--dry-run")
    res = shopsim(command, *args, "-w", wh)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "differ in more than the skills" in res.stderr
    line = next(x for x in res.stderr.splitlines() if x.strip().startswith(f"{field}: bare="))
    left, right = line.split(" equipped=" if command == "compare" else " treatment=")
    assert bare_value in left and treatment_value in right, line
    named = {x.strip().split(":")[0] for x in res.stderr.splitlines() if ": bare=" in x}
    assert named == {field}  # only the section that differs (its records' copy is not listed twice)


def test_compare_of_a_run_without_identity_is_refused_then_assumed_and_says_so(test_split):
    wh, ids, _ = test_split
    args = ("compare", ids["qwen35-4b-test-base-free"], ids["no-identity"], "-w", wh, "--samples", "50")
    refused = shopsim(*args)
    assert refused.returncode == 2
    assert "record no run identity" in refused.stderr and "its records carry no provenance" in refused.stderr
    doc = json.loads(ok(shopsim(*args, "--assume-aligned", "--format", "json")).stdout)
    assert doc["alignment"]["assumed_aligned"] is True and doc["alignment"]["plan"]["status"] == "assumed"
    assert doc["paired"]["metrics"]["reward"]["mean_difference"] == \
        EXPECTED["qwen35-4b-test-base-s0"]["metrics"]["reward"]["mean_difference"]
    text = ok(shopsim(*args, "--assume-aligned")).stdout
    assert "alignment ASSUMED" in text and "not checked" in text
