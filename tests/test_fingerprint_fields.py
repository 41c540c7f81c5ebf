"""Every config field is semantic (a resume that changes it is refused, with the diff) or execution (a resume
may change it), by the one classification in shopsim_wh.rollout.runner; a new field in neither set fails here."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from shopsim_wh.core.config import Config, load_config
from shopsim_wh.core.errors import FingerprintMismatch
from shopsim_wh.rollout.runner import (
    EXECUTION_FIELDS,
    IDENTITY_FIELDS,
    SEMANTIC_FIELDS,
    _existing_state,
    check_resume,
    plan,
    run,
)
from shopsim_wh.sim.tasks import default_split_manifest_path
from shopsim_wh.store.warehouse import Warehouse

from .helpers import _merge, write_config

CODE_KEYS = {"split_manifest_version", "prompt_version", "action_protocol"}  # fingerprint keys set by the code


def _files(tmp: Path) -> dict[str, str]:
    """Files the file-valued fields point at (a changed content, so a changed identity)."""
    doc = json.loads(default_split_manifest_path().read_text())
    from shopsim_wh.core.splits import parse_split_manifest

    m = parse_split_manifest(doc, "embedded")
    flat = {"version": "moved", **{s: m.task_ids(s) for s in ("train", "val", "test")}}
    flat["test"] = flat["test"] + flat["val"][-1:]
    flat["val"] = flat["val"][:-1]
    (tmp / "splits.json").write_text(json.dumps(flat))
    (tmp / "bank.json").write_text(json.dumps({"version": "b1", "skills": [{"id": "g1", "content": "Check the price."}]}))
    (tmp / "prompt.txt").write_text("You are a careful shopping agent. Think before you click.\n")
    (tmp / ".env").write_text("SHOPSIM_FP_KEY=not-a-real-key\n")
    return {k: str(tmp / k) for k in ("splits.json", "bank.json", "prompt.txt", ".env")}


SEMANTIC_CASES = {  # field -> changed value (BASE of tests/helpers.py is the stored run)
    "experiment.seed": 4, "tasks.split_manifest": "splits.json", "tasks.split": "train", "tasks.sample_size": 2,
    "tasks.repeats": 2, "model.name": "scripted-noisy", "model.checkpoint_id": "ck2",
    "model.sampling.temperature": 0.0, "model.sampling.top_p": 0.9, "model.sampling.max_tokens": 512,
    "model.extra_body": {"chat_template_kwargs": {"enable_thinking": False}}, "model.send_seed": False,
    "model.tool_choice": "required", "environment.url": "http://127.0.0.1:9", "environment.seed": 1,
    "environment.dialect": "pi-slime", "environment.persona": True, "skills.path": "bank.json",
    "skills.mask_rate": 0.5, "skills.mask_seed": 20260901, "skills.mask_rule": "online", "skills.max_skills": 1,
    "runtime.max_steps": 9, "prompt_template": "prompt.txt",
}
EXECUTION_CASES = {
    "experiment.dotenv": ".env", "model.base_url": "http://127.0.0.1:9/v1", "model.api_key_env": "SHOPSIM_FP_KEY",
    "model.trust_env": True, "model.timeout_s": 3.0, "model.max_retries": 0, "model.retry_backoff_s": 0.0,
    "model.record_tokens": True, "model.tokenizer": "builtin",
    "environment.timeout_s": 5.0, "environment.lease_timeout_s": 9.0, "environment.exclusive": True,
    "environment.trust_env": True, "runtime.concurrency": 1,
    "output.warehouse": "elsewhere", "output.catalog": "bi.duckdb", "runtime.executor": "ray",
    "runtime.ray_address": "ray://127.0.0.1:10001", "runtime.ray_workers": 2,
}


def _leaves(model: type[BaseModel], prefix: str = "") -> set[str]:
    out = set()
    for name, info in model.model_fields.items():
        ann = info.annotation
        sub = next((a for a in (ann, *typing.get_args(ann)) if isinstance(a, type) and issubclass(a, BaseModel)), None)
        out |= _leaves(sub, f"{prefix}{name}.") if sub else {prefix + name}
    return out


def _sections(field: str, value) -> dict:
    *path, leaf = field.split(".")
    node: dict = {leaf: value}
    for part in reversed(path[1:]):
        node = {part: node}
    return {path[0]: node} if path else {leaf: value}


def _changed(tmp: Path, files: dict, field: str, value):
    value = files.get(value, value) if isinstance(value, str) else value
    sections = _merge({"tasks": {"sample_size": 1}}, _sections(field, value))
    return load_config(write_config(tmp / f"{field}.yaml", **sections))


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fp")
    cfg = load_config(write_config(tmp / "base.yaml", tasks={"sample_size": 1}, runtime={"max_steps": 30}))
    res = run(cfg, warehouse=str(tmp / "wh"))
    assert res.completed == 1, res
    fields = _existing_state(Warehouse(tmp / "wh"), "t")[0]
    return tmp, _files(tmp), fields


def test_every_config_field_is_classified_once():
    leaves = _leaves(Config)
    classes = [set(SEMANTIC_FIELDS), set(EXECUTION_FIELDS), set(IDENTITY_FIELDS)]
    unclassified = leaves - set().union(*classes)
    assert not unclassified, f"classify {sorted(unclassified)} in shopsim_wh/rollout/runner.py (SEMANTIC_FIELDS or EXECUTION_FIELDS)"
    assert not set().union(*classes) - leaves, "a classified field no longer exists"
    assert sum(len(c) for c in classes) == len(leaves), "a field is classified twice"
    # ... and every test below covers exactly the classified fields
    assert set(SEMANTIC_CASES) == set(SEMANTIC_FIELDS) and set(EXECUTION_CASES) == set(EXECUTION_FIELDS)


def test_every_fingerprint_key_comes_from_a_classified_field(stored):
    _, _, fields = stored
    named = {k for keys in SEMANTIC_FIELDS.values() for k in keys}
    assert set(fields) - CODE_KEYS == named, "a fingerprint key no semantic field names (or the reverse)"


@pytest.mark.parametrize("field", sorted(SEMANTIC_CASES))
def test_changing_a_semantic_field_is_refused_with_its_diff(stored, field):
    tmp, files, fields = stored
    new = plan(_changed(tmp, files, field, SEMANTIC_CASES[field])).fingerprint_fields
    with pytest.raises(FingerprintMismatch) as err:
        check_resume("t", fields, new)
    assert set(err.value.diff) & set(SEMANTIC_FIELDS[field]), (field, err.value.diff)
    assert set(err.value.diff) <= set(fields) | CODE_KEYS
    key = next(k for k in SEMANTIC_FIELDS[field] if k in err.value.diff)
    assert f"  {key}: stored=" in str(err.value) and "new experiment.name" in str(err.value)


@pytest.mark.parametrize("field", sorted(EXECUTION_CASES))
def test_changing_an_execution_field_is_accepted(stored, field):
    tmp, files, fields = stored
    check_resume("t", fields, plan(_changed(tmp, files, field, EXECUTION_CASES[field])).fingerprint_fields)


def test_resume_itself_refuses_and_accepts(stored, monkeypatch):
    tmp, files, _ = stored
    with pytest.raises(FingerprintMismatch, match="checkpoint_id: stored='ck1' new='ck2'"):
        run(_changed(tmp, files, "model.checkpoint_id", "ck2"), warehouse=str(tmp / "wh"))
    monkeypatch.setenv("SHOPSIM_FP_KEY", "not-a-real-key")
    cfg = load_config(write_config(tmp / "exec.yaml", tasks={"sample_size": 1},
                                   runtime={"concurrency": 1}, model={"timeout_s": 7.0, "max_retries": 1,
                                                                      "api_key_env": "SHOPSIM_FP_KEY"}))
    res = run(cfg, warehouse=str(tmp / "wh"))
    assert (res.planned, res.skipped, res.attempted) == (1, 1, 0)
