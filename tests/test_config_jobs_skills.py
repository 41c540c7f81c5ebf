"""Config validation, split manifests, deterministic jobs and skill banks."""

from __future__ import annotations

import json
import logging

import pytest

from shopsim_wh.core.config import load_config
from shopsim_wh.core.errors import ConfigError
from shopsim_wh.rollout.jobs import EpisodeJob, build_jobs, load_split_manifest
from shopsim_wh.rollout.prompts import PromptBuilder
from shopsim_wh.rollout.runner import plan
from shopsim_wh.rollout.skills import SkillBank

from .conftest import REPO
from .helpers import write_config


def test_unknown_config_keys_and_bad_values_say_which_key(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("experiment: {name: x}\nmodel: {name: m, temprature: 1}\n")
    with pytest.raises(ConfigError, match=r"model\.temprature"):
        load_config(p)
    p.write_text("experiment: {name: 'bad name!'}\nmodel: {name: m}\n")
    with pytest.raises(ConfigError, match=r"experiment\.name"):
        load_config(p)


def test_demo_configs_load():
    for f in (REPO / "configs").glob("*.yaml"):
        cfg = load_config(f)
        assert cfg.experiment.name


def test_jobs_are_deterministic_and_seeds_stable():
    m = load_split_manifest(None)
    a = build_jobs(m, "val", 10, 3, experiment_seed=7)
    b = build_jobs(m, "val", 10, 3, experiment_seed=7)
    assert a == b and len(a) == 30
    assert a[0].episode_id == f"task-{a[0].task_id:06d}__sample-000" and a[1].episode_id.endswith("__sample-001")
    assert EpisodeJob(1982, 0, 1, "val").episode_id == "task-001982__sample-000"
    assert len({j.seed for j in a}) == 30 and all(0 <= j.seed < 2**32 for j in a)
    assert build_jobs(m, "val", 10, 3, experiment_seed=8) != a
    assert EpisodeJob(5, 1, 99, "val").step_seed(0) == 99 and EpisodeJob(5, 1, 99, "val").step_seed(3) == 102
    # explicit ids with holes are kept as they are
    ids = sorted(m.splits["val"])
    assert any(b - a > 1 for a, b in zip(ids, ids[1:], strict=False))


def test_legacy_range_manifest_loads_with_a_warning(tmp_path, caplog):
    p = tmp_path / "legacy.json"
    p.write_text(json.dumps({"version": "old", "task_nums": {"train": 5, "val": 2, "test": 2}}))
    with caplog.at_level(logging.WARNING):
        m = load_split_manifest(str(p))
    assert m.legacy_range and m.splits["val"] == [5, 6]
    assert "cannot express holes" in caplog.text


def test_manifest_with_a_task_in_two_splits_is_refused(tmp_path):
    p = tmp_path / "m.json"
    p.write_text(json.dumps({"version": "v", "train": [1, 2], "val": [2], "test": []}))
    with pytest.raises(ConfigError, match="task 2"):
        load_split_manifest(str(p))


def test_skill_bank_global_task_scoped_masking_and_identity(tmp_path):
    p = tmp_path / "bank.json"
    p.write_text(json.dumps({"version": "b1", "skills": [
        {"id": "g1", "content": "Select every option before buying."},
        {"id": "g2", "content": "Check the price."},
        {"id": "t9", "scope": "task", "task_ids": [9], "content": "For this task, look at the reviews."}]}))
    bank = SkillBank(str(p))
    assert [s.id for s in bank.select({"task_id": 9}, seed=1)] == ["g1", "g2", "t9"]
    assert [s.id for s in bank.select({"task_id": 8}, seed=1)] == ["g1", "g2"]
    # max_skills keeps the first N in scope (ShopSimRL's JsonSkillBank), global skills first
    assert [s.id for s in SkillBank(str(p), max_skills=2).select({"task_id": 9}, seed=1)] == ["g1", "g2"]
    assert [s.id for s in SkillBank(str(p), max_skills=1).select({"task_id": 8}, seed=1)] == ["g1"]
    masked = SkillBank(str(p), mask_rate=0.5)
    picks = [tuple(s.id for s in masked.select({"task_id": 9}, seed=i)) for i in range(200)]
    assert picks == [tuple(s.id for s in masked.select({"task_id": 9}, seed=i)) for i in range(200)]
    assert 0.35 < sum("g1" in p for p in picks) / 200 < 0.65
    assert len(set(picks)) > 4
    ident = bank.identity()
    p.write_text(p.read_text().replace("reviews", "features"))
    assert SkillBank(str(p)).identity() != ident
    prompt = PromptBuilder().system({}, bank.select({"task_id": 9}, 0))
    assert "Select every option" in prompt and '<skill id="t9" version="1">' in prompt and "[可选策略提示]" in prompt


def test_plan_fingerprint_covers_semantics_not_execution(tmp_path):
    base = plan(load_config(write_config(tmp_path / "a.yaml")))
    same = plan(load_config(write_config(tmp_path / "b.yaml", runtime={"concurrency": 64}, output={"warehouse": "/elsewhere"})))
    assert base.fingerprint == same.fingerprint
    for section in ({"runtime": {"max_steps": 9}}, {"model": {"checkpoint_id": "ck2"}}, {"experiment": {"seed": 4}},
                    {"model": {"sampling": {"top_p": 0.9}}}, {"environment": {"dialect": "pi-slime"}},
                    {"environment": {"persona": True}}, {"model": {"send_seed": False}}, {"model": {"tool_choice": "required"}},
                    {"skills": {"max_skills": 1}}, {"skills": {"mask_seed": 20260901}}):
        assert plan(load_config(write_config(tmp_path / "c.yaml", **section))).fingerprint != base.fingerprint, section
