"""ShopSimRL experiment YAMLs: read as they are, converted by `config import`, and the same jobs as that runtime.

The original job rules are re-implemented here independently (struct, %-formatting, a hand-written checksum)
from their documentation in docs/config_import.md, and compared with what shopsim-wh plans.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
import struct
import subprocess
import sys

import pytest
import yaml

from shopsim_wh.core.config import Config, load_config
from shopsim_wh.core.config_import import DIRECT, ORIGINAL_KEYS, SPECIAL, convert, import_file
from shopsim_wh.core.errors import ConfigError
from shopsim_wh.rollout.runner import config_json, plan
from shopsim_wh.sim.tasks import load_default_split_manifest

from .conftest import REPO
from .helpers import write_config

CLI = [sys.executable, "-m", "shopsim_wh.cli.main"]


# ------------------------------------------------------------------------ the original rules, independently

def checksum(ids):
    return hashlib.sha256(("[" + ",".join(str(int(t)) for t in ids) + "]").encode()).hexdigest()


def original_jobs(ids, split, seed, sample_size, repeats):
    tasks = random.Random(seed).sample(list(ids), sample_size) if sample_size is not None else list(ids)
    out = []
    for t in tasks:
        for s in range(repeats):
            digest = hashlib.sha256(":".join(map(str, (seed, t, s))).encode()).digest()
            out.append(("task-" + str(t).zfill(6) + "__sample-" + str(s).zfill(3), t, s, struct.unpack(">I", digest[:4])[0], split))
    return out


def ours(jobs):
    return [(j.episode_id, j.task_id, j.sample_id, j.seed, j.split) for j in jobs]


def write_split_file(path, splits, persona=True):
    doc = {"schema_version": "shopsimrl-persona-splits-v1", "version": "shopsimrl-persona-splits-v1",
           "splits": {name: {"role": name, "persona": persona, "task_ids": ids, "task_count": len(ids),
                             "task_ids_sha256": checksum(ids)} for name, ids in splits.items()}}
    path.write_text(json.dumps(doc, indent=1))
    return path


# task ids deliberately unsorted and with holes, so the file order is what matters
VAL = [4410, 17, 902, 33, 1200, 5, 77777, 4123, 61, 300, 2024, 8, 990, 123456, 42]
SPLITS = {"train": [1, 2, 3, 9, 10, 11], "val": VAL, "test": [400, 401, 402]}


def original_yaml(tmp_path, **sections):
    """An experiment YAML in ShopSimRL's shape, laid out as its repository does (configs/ + a split file)."""
    (tmp_path / "configs" / "prompts").mkdir(parents=True, exist_ok=True)
    (tmp_path / "configs" / "prompts" / "persona.txt").write_text("你是购物助手。只调用一个工具。\n", encoding="utf-8")
    write_split_file(tmp_path / "persona_splits.v1.json", SPLITS)
    doc = {
        "experiment": {"name": "qwen35-4b-val", "output_dir": "../runs", "seed": 20260829, "concurrency": 4,
                       "resume": True},
        "tasks": {"split_file": "../persona_splits.v1.json", "split": "val", "sample_size": 7, "repeats": 3},
        "environment": {"base_url": "http://127.0.0.1:5700", "timeout": 30, "persona": None},
        "runtime": {"max_steps": 30},
        "prompt": {"system_prompt_file": "prompts/persona.txt"},
        "skills": {"path": None, "max_skills": None},
        "model": {"id": "qwen35-4b", "name": "Qwen/Qwen3.5-4B", "base_url": "http://127.0.0.1:30000/v1",
                  "api_key_env": None, "temperature": 0.6, "top_p": 0.95, "max_tokens": 2048, "timeout": 180,
                  "max_retries": 8, "trust_env": False, "send_seed": False, "tool_choice": "auto",
                  "extra_body": {"enable_thinking": True, "top_k": 20}, "checkpoint_id": "qwen35-4b-iter80"},
    }
    for name, value in sections.items():
        if value is None:
            doc.pop(name, None)
        else:
            doc[name] = {**doc.get(name, {}), **value}
    path = tmp_path / "configs" / "orig.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------- the jobs

@pytest.mark.parametrize("sample_size,repeats", [(7, 3), (None, 2), (15, 1), (1, 1)])
def test_original_yaml_plans_the_original_jobs(tmp_path, sample_size, repeats):
    path = original_yaml(tmp_path, tasks={"sample_size": sample_size, "repeats": repeats})
    jobs = plan(load_config(path)).jobs
    assert ours(jobs) == original_jobs(VAL, "val", 20260829, sample_size, repeats)
    assert len(jobs) == (sample_size or len(VAL)) * repeats


def test_missing_seed_takes_the_original_default_and_order_is_the_draw(tmp_path):
    path = original_yaml(tmp_path, experiment={"seed": None})
    raw = yaml.safe_load(path.read_text())
    del raw["experiment"]["seed"]
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    jobs = plan(load_config(path)).jobs
    assert ours(jobs) == original_jobs(VAL, "val", 20260828, 7, 3)
    drawn = [j.task_id for j in jobs[::3]]
    assert drawn != sorted(drawn)  # the order drawn is kept, not sorted (this draw happens to be unsorted)
    assert all(j.episode_id.startswith(f"task-{j.task_id:06d}__sample-") for j in jobs)


def test_our_config_on_the_embedded_split_follows_the_same_rules(tmp_path):
    cfg = load_config(write_config(tmp_path / "c.yaml", experiment={"seed": 11}, tasks={"sample_size": 9, "repeats": 2}))
    ids = load_default_split_manifest()["splits"]["val"]["task_ids"]
    assert ours(plan(cfg).jobs) == original_jobs(ids, "val", 11, 9, 2)
    everything = load_config(write_config(tmp_path / "d.yaml", tasks={"sample_size": None, "split": "train"}))
    assert ours(plan(everything).jobs) == original_jobs(
        load_default_split_manifest()["splits"]["train"]["task_ids"], "train", 3, None, 1)


def test_step_seeds_are_episode_seed_plus_step_index_minus_one(tmp_path):
    job = plan(load_config(original_yaml(tmp_path))).jobs[4]
    for step_index in (1, 2, 30):  # the original's 1-based step index
        assert job.step_seed(step_index - 1) == job.seed + step_index - 1


def test_sample_size_larger_than_the_split_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"sample_size=16 must be in \[1, 15\]"):
        plan(load_config(original_yaml(tmp_path, tasks={"sample_size": 16})))


# ------------------------------------------------------------------------------------------- the mapping

def test_every_original_key_maps_to_the_documented_names(tmp_path):
    path = original_yaml(tmp_path, model={"retry_backoff_seconds": 2.5, "stream": True},
                         skills={"max_skills": 3}, experiment={"resume": False})
    raw = yaml.safe_load(path.read_text())
    imp = convert(raw, path.parent)
    c = imp.config
    assert c["experiment"] == {"name": "qwen35-4b-val", "seed": 20260829}
    assert c["tasks"] == {"split": "val", "sample_size": 7, "repeats": 3,
                          "split_manifest": str((tmp_path / "persona_splits.v1.json").resolve())}
    assert c["environment"] == {"url": "http://127.0.0.1:5700", "timeout_s": 30, "dialect": "shop_env",
                                "trust_env": False, "persona": True}
    assert c["runtime"] == {"concurrency": 4, "max_steps": 30}
    assert c["skills"] == {"max_skills": 3, "path": None}
    assert c["prompt_template"] == str((tmp_path / "configs" / "prompts" / "persona.txt").resolve())
    assert c["model"] == {
        "name": "Qwen/Qwen3.5-4B", "base_url": "http://127.0.0.1:30000/v1", "api_key_env": None,
        "sampling": {"temperature": 0.6, "max_tokens": 2048, "top_p": 0.95}, "timeout_s": 180, "max_retries": 8,
        "retry_backoff_s": 2.5, "trust_env": False, "send_seed": False, "tool_choice": "auto",
        "extra_body": {"enable_thinking": True, "top_k": 20}, "checkpoint_id": "qwen35-4b-iter80"}
    notes = "\n".join(imp.notes)
    for key in ("experiment.output_dir", "experiment.resume", "model.id", "model.stream"):
        assert key in notes


def test_absent_keys_take_the_original_defaults(tmp_path):
    path = tmp_path / "minimal.yaml"
    write_split_file(tmp_path / "s.json", SPLITS)
    path.write_text("tasks: {split_file: s.json, split: test}\nmodel: {name: m, base_url: 'http://x/v1'}\n")
    c = convert(yaml.safe_load(path.read_text()), tmp_path, source_name="minimal").config
    assert c["experiment"] == {"name": "minimal", "seed": 20260828}
    assert c["model"]["sampling"] == {"temperature": 0.0, "max_tokens": 512}  # no top_p: the original sends none
    assert (c["model"]["api_key_env"], c["model"]["timeout_s"], c["model"]["max_retries"]) == ("OPENAI_API_KEY", 180.0, 5)
    assert (c["model"]["send_seed"], c["model"]["trust_env"], c["model"]["tool_choice"]) == (True, True, "auto")
    assert c["runtime"] == {"concurrency": 1, "max_steps": 30} and c["tasks"]["repeats"] == 1
    assert c["environment"]["url"] == "http://127.0.0.1:5700" and c["environment"]["timeout_s"] == 30.0


def test_the_converted_config_validates_on_this_build(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        cfg = load_config(original_yaml(tmp_path))
    fields = {f"{s}.{k}" for s, m in Config.model_fields.items()
              if hasattr(m.annotation, "model_fields") for k in m.annotation.model_fields}
    # on a build with the key the value is applied; on an older one a note says it is not
    for key, attr, want in (("model.send_seed", ("model", "send_seed"), False),
                            ("runtime.max_steps", ("runtime", "max_steps"), 30),
                            ("environment.persona", ("environment", "persona"), True)):
        if key in fields:
            assert getattr(getattr(cfg, attr[0]), attr[1]) == want
        else:
            assert key.split(".")[1] in caplog.text
    assert cfg.environment.url == "http://127.0.0.1:5700" and cfg.runtime.concurrency == 4
    assert cfg.model.sampling.max_tokens == 2048 and cfg.model.checkpoint_id == "qwen35-4b-iter80"


def test_mapping_table_is_documented():
    doc = (REPO / "docs" / "config_import.md").read_text()
    rows = re.findall(r"^\| `([a-z_.]+)` \| (`[a-z_.]+`|—) \|", doc, re.M)
    documented = {k for k, _ in rows}
    every = {f"{s}.{k}" for s, keys in ORIGINAL_KEYS.items() for k in keys}
    assert every <= documented, every - documented
    for theirs, (target, _) in DIRECT.items():
        assert (theirs, f"`{target}`") in rows
    for theirs, target in SPECIAL.items():
        assert (theirs, f"`{target}`" if target else "—") in rows


# ------------------------------------------------------------------------------------- import round trip

def test_import_round_trip_plans_the_same_run(tmp_path):
    path = original_yaml(tmp_path)
    out = tmp_path / "converted" / "new.yaml"
    text, notes = import_file(path, out)
    assert out.read_text() == text and text.startswith("# Converted from ShopSimRL config orig.yaml")
    assert any("output_dir" in n for n in notes)
    new = yaml.safe_load(text)
    assert new["tasks"]["split_manifest"] == "../persona_splits.v1.json"  # relative to the new file
    a, b = load_config(path), load_config(out)
    assert a.model_dump() == b.model_dump()
    pa, pb = plan(a), plan(b)
    assert pa.fingerprint == pb.fingerprint and ours(pa.jobs) == ours(pb.jobs)
    assert pa.prompts.system_prompt == "你是购物助手。只调用一个工具。\n"


def test_inline_system_prompt(tmp_path, monkeypatch):
    monkeypatch.setenv("SHOPSIM_WH_CACHE", str(tmp_path / "cache"))
    raw = yaml.safe_load(original_yaml(tmp_path).read_text())
    raw["prompt"] = {"system_prompt": "Buy exactly what the customer asks for."}
    path = tmp_path / "configs" / "inline.yaml"
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path)
    assert cfg.prompt_template.startswith(str(tmp_path / "cache" / "prompts"))
    assert plan(cfg).prompts.system_prompt == "Buy exactly what the customer asks for."
    out = tmp_path / "x" / "inline-new.yaml"
    import_file(path, out)
    assert (tmp_path / "x" / "inline-new.system_prompt.txt").read_text() == "Buy exactly what the customer asks for."
    assert plan(load_config(out)).prompts.prompt_hash == plan(cfg).prompts.prompt_hash
    raw["prompt"]["system_prompt_file"] = "prompts/persona.txt"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match="only one of prompt.system_prompt"):
        load_config(path)


def test_config_import_cli(tmp_path):
    path = original_yaml(tmp_path)
    shown = subprocess.run([*CLI, "config", "import", str(path)], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert yaml.safe_load(shown.stdout)["experiment"]["name"] == "qwen35-4b-val"
    assert "note: experiment.output_dir" in shown.stderr
    out = tmp_path / "new.yaml"
    wrote = subprocess.run([*CLI, "config", "import", str(path), "--out", str(out)], capture_output=True, text=True,
                           timeout=60)
    assert wrote.returncode == 0 and out.exists(), wrote.stderr
    planned = subprocess.run([*CLI, "plan", str(path)], capture_output=True, text=True, timeout=60)
    assert planned.returncode == 0, planned.stderr
    want = original_jobs(VAL, "val", 20260829, 7, 3)
    assert "episodes       21 (val: 7 tasks x 3 repeats)" in planned.stdout
    assert f"first tasks    {', '.join(str(j[1]) for j in want[:8])} ..." in planned.stdout
    ours_plan = subprocess.run([*CLI, "plan", str(out)], capture_output=True, text=True, timeout=60)
    assert ours_plan.stdout == planned.stdout
    bad = subprocess.run([*CLI, "config", "import", str(REPO / "configs" / "demo.yaml")], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "is not a ShopSimRL experiment config" in bad.stderr


# ------------------------------------------------------------------------------------------ clear errors

@pytest.mark.parametrize("edit,match", [
    ({"model": {"temprature": 1.0}}, r"unknown ShopSimRL config key\(s\): model\.temprature; that runtime's keys"),
    ({"models": [{"name": "a"}]}, r"unknown ShopSimRL config key\(s\): models"),
    ({"model": {"temperature": "hot"}}, r"model\.sampling\.temperature \(from model\.temperature\)"),
    ({"tasks": {"split_file": None}}, r"tasks\.split_file is required"),
    ({"tasks": {"split": "dev"}}, r"split 'dev' is not in the split manifest; choose one of: test, train, val"),
    ({"environment": {"persona": False}}, r"environment\.persona=False conflicts with split 'val' persona=True"),
    ({"experiment": {"resume": "yes"}}, r"experiment\.resume must be true or false"),
    ({"experiment": {"name": "%%%"}}, r"no letters or digits"),
    ({"experiment": {"dotenv": "../missing.env"}}, r"experiment\.dotenv: .*missing\.env not found"),
    ({"environment": {"url": "http://x"}}, r"mixes ShopSimRL keys .* with shopsim-wh keys \(environment\.url\)"),
])
def test_bad_original_configs_say_which_key(tmp_path, edit, match):
    path = original_yaml(tmp_path)
    raw = yaml.safe_load(path.read_text())
    for section, value in edit.items():
        if isinstance(value, dict):
            raw.setdefault(section, {}).update(value)
        else:
            raw[section] = value
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=match) as err:
        plan(load_config(path))
    assert str(path) in str(err.value) or "split manifest" in str(err.value)


def test_mixed_persona_split_needs_an_explicit_persona(tmp_path):
    path = original_yaml(tmp_path)
    write_split_file(tmp_path / "persona_splits.v1.json", SPLITS, persona=None)
    with pytest.raises(ConfigError, match="environment.persona must be set"):
        load_config(path)
    raw = yaml.safe_load(path.read_text())
    raw["environment"]["persona"] = False
    path.write_text(yaml.safe_dump(raw))
    assert load_config(path).experiment.name == "qwen35-4b-val"


def test_bad_yaml_is_a_clear_error(tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("experiment: {name: x\ntasks: [\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config(p)
    with pytest.raises(ConfigError, match="is not valid YAML"):
        import_file(p)
    p.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="expected a mapping at the top level"):
        import_file(p)


# -------------------------------------------------------------------------------------------------- dotenv

def test_dotenv_is_read_for_the_key_only_at_run_time_and_never_stored(tmp_path, monkeypatch):
    monkeypatch.delenv("SHOPSIM_TEST_KEY", raising=False)
    secret = "sk-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:24]
    (tmp_path / ".env").write_text(f"# comment\nOTHER=1\nexport SHOPSIM_TEST_KEY='{secret}'\n")
    path = original_yaml(tmp_path, experiment={"dotenv": "../.env"}, model={"api_key_env": "SHOPSIM_TEST_KEY"})
    cfg = load_config(path)
    assert cfg.api_key() == secret
    import os

    assert "SHOPSIM_TEST_KEY" not in os.environ and "OTHER" not in os.environ
    assert secret not in config_json(cfg) and secret not in repr(cfg)
    text, _ = import_file(path, tmp_path / "converted.yaml")
    assert secret not in text and yaml.safe_load(text)["experiment"]["dotenv"] == ".env"
    monkeypatch.setenv("SHOPSIM_TEST_KEY", "from-env")
    assert cfg.api_key() == "from-env"  # the environment wins, as in the original (setdefault)
    monkeypatch.delenv("SHOPSIM_TEST_KEY")
    (tmp_path / ".env").write_text("OTHER=1\n")
    with pytest.raises(ConfigError, match=r"does not set it"):
        cfg.api_key()


def test_a_missing_split_file_is_named_as_the_original_spells_it(tmp_path):
    path = original_yaml(tmp_path, tasks={"split_file": "../nope.json"})
    with pytest.raises(ConfigError, match=r"\(ShopSimRL format\): tasks\.split_file: .*nope\.json not found"):
        load_config(path)


def test_run_accepts_an_original_yaml_and_lands_the_original_jobs(tmp_path):
    """`shopsim-wh run ORIGINAL.yaml` end to end, on the embedded servers (the original's keys point at them)."""
    from shopsim_wh.engines.db import connect

    raw = yaml.safe_load(original_yaml(tmp_path).read_text())
    raw["tasks"].update(sample_size=3, repeats=2)
    raw["environment"]["base_url"] = "embedded"
    raw["model"].update(name="scripted-strong", base_url="embedded", api_key_env=None, send_seed=True)  # seeds recorded when sent
    path = tmp_path / "configs" / "embedded.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    (tmp_path / "persona_splits.v1.json").write_text(  # the copy sits where split_file points
        (REPO / "shopsim_wh" / "sim" / "data" / "persona_splits.v1.json").read_text())
    done = subprocess.run([*CLI, "run", str(path), "-w", str(tmp_path / "wh")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    ids = load_default_split_manifest()["splits"]["val"]["task_ids"]
    want = original_jobs(ids, "val", 20260829, 3, 2)
    con = connect(tmp_path / "wh")
    rows = con.execute("SELECT episode_id, task_id, sample_id, seed, split FROM episodes WHERE run_id = ? "
                       "ORDER BY episode_id", ["qwen35-4b-val"]).fetchall()
    assert rows == sorted(want)
    steps = con.execute("SELECT e.seed, s.step_idx, s.step_seed FROM steps s JOIN episodes e USING (run_id, episode_id)"
                        ).fetchall()
    assert steps and all(step_seed == seed + idx for seed, idx, step_seed in steps)
