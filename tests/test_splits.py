"""Split files: ShopSimRL's persona-splits-v1 (counts and checksums verified), its bare `splits` files, our flat lists."""

from __future__ import annotations

import copy
import hashlib
import json

import pytest

from shopsim_wh.core.errors import ConfigError
from shopsim_wh.core.splits import load_split_manifest, task_ids_sha256
from shopsim_wh.rollout.jobs import build_jobs
from shopsim_wh.sim.tasks import default_split_manifest_path, generate_split_manifest


def compact_sha(ids):  # written out by hand: "[" + ids joined by "," + "]", ASCII
    return hashlib.sha256(("[" + ",".join(str(i) for i in ids) + "]").encode("ascii")).hexdigest()


def persona_doc():
    splits = {"train": [0, 2, 3, 4, 6, 9], "val": [7, 12, 15], "test": [1, 5, 8]}
    return {"schema_version": "shopsimrl-persona-splits-v1", "version": "shopsimrl-persona-splits-v1",
            "policy": {"seed": 1}, "source": {}, "checks": {},
            "splits": {n: {"role": n, "persona": True, "task_ids": ids, "task_count": len(ids),
                           "task_ids_sha256": compact_sha(ids)} for n, ids in splits.items()}}


def write(tmp_path, doc, name="s.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


def test_checksum_is_sha256_of_compact_ascii_json():
    ids = [1, 5, 8, 16, 42, 1982, 123456]
    assert task_ids_sha256(ids) == compact_sha(ids)
    assert task_ids_sha256([]) == hashlib.sha256(b"[]").hexdigest()
    assert task_ids_sha256([2, 1]) != task_ids_sha256([1, 2])  # the order of the file is what is hashed


def test_persona_splits_load_with_roles_and_persona(tmp_path):
    m = load_split_manifest(write(tmp_path, persona_doc()))
    assert m.schema == "shopsimrl-persona-splits-v1" and m.version == "shopsimrl-persona-splits-v1"
    assert m.splits["val"] == [7, 12, 15] and m.persona == {"train": True, "val": True, "test": True}
    assert m.roles["test"] == "test"


@pytest.mark.parametrize("break_it,match", [
    (lambda d: d["splits"]["val"]["task_ids"].append(99), r"split 'val': task_count is 3 but 4 task ids"),
    (lambda d: d["splits"]["val"].update(task_ids=[7, 12, 16]), r"split 'val': task_ids_sha256 is '.*' but the listed task ids hash to"),
    (lambda d: d["splits"]["test"].update(task_ids_sha256="0" * 64), r"split 'test': task_ids_sha256"),
    (lambda d: d["splits"]["val"].pop("task_ids_sha256"), r"split 'val' has no task_ids_sha256"),
    (lambda d: d["splits"]["val"].pop("task_count"), r"split 'val' has no task_count"),
    (lambda d: d["splits"].pop("test"), r"needs splits \['train', 'val', 'test'\]; missing \['test'\]"),
    (lambda d: d.update(schema_version="shopsimrl-persona-splits-v9"), r"unknown split schema_version"),
    (lambda d: d["splits"]["val"].update(task_ids=[7, 12, 1], task_ids_sha256=compact_sha([7, 12, 1])),
     r"task 1 is in both 'val' and 'test'"),
    (lambda d: d["splits"]["val"].update(task_ids=[7, 7, 15]), r"task 7 is listed twice"),
    (lambda d: d["splits"]["val"].update(task_ids=[7, True, 15]), r"non-negative integers"),
    (lambda d: d["splits"]["val"].update(persona="yes"), r"persona must be true, false or null"),
])
def test_a_broken_persona_split_file_is_a_clear_error(tmp_path, break_it, match):
    doc = copy.deepcopy(persona_doc())
    break_it(doc)
    with pytest.raises(ConfigError, match=match) as err:
        load_split_manifest(write(tmp_path, doc))
    assert "s.json" in str(err.value)


def test_bare_splits_files_of_the_runtime_load_with_free_names_and_overlaps(tmp_path):
    doc = {"id_semantics": "gaps are intentional", "splits": {
        "all_train": {"persona": None, "task_ids": [10, 11, 13, 20]},
        "persona_train": {"persona": True, "task_ids": [13, 20], "task_ids_sha256": compact_sha([13, 20])},
        "standard_range": {"persona": False, "start": 100, "end": 104}}}
    m = load_split_manifest(write(tmp_path, doc))
    assert m.splits["standard_range"] == [100, 101, 102, 103] and m.persona["all_train"] is None
    jobs = build_jobs(m, "all_train", None, 1, 5)
    assert [j.task_id for j in jobs] == [10, 11, 13, 20] and {j.split for j in jobs} == {"all_train"}
    doc["splits"]["persona_train"]["task_ids_sha256"] = compact_sha([20, 13])
    with pytest.raises(ConfigError, match="persona_train"):
        load_split_manifest(write(tmp_path, doc))
    doc["splits"]["persona_train"] = {"start": 5, "end": 5}
    with pytest.raises(ConfigError, match=r"invalid range \[5, 5\)"):
        load_split_manifest(write(tmp_path, doc))


def test_flat_manifest_still_loads_and_the_default_is_persona_splits(tmp_path):
    flat = {"version": "mine", "train": [3, 1], "val": [9, 4], "test": [2]}
    m = load_split_manifest(write(tmp_path, flat))
    assert m.schema == "shopsim-wh-flat" and m.splits["val"] == [9, 4] and m.version == "mine"
    default = load_split_manifest(None)
    assert default.schema == "shopsimrl-persona-splits-v1"
    regenerated = generate_split_manifest(0)
    assert all(default.splits[s] == regenerated[s] for s in ("train", "val", "test"))  # the same task ids as before
    raw = json.loads(default_split_manifest_path().read_text())
    for s in ("train", "val", "test"):
        assert raw["splits"][s]["task_ids_sha256"] == compact_sha(regenerated[s])
        assert raw["splits"][s]["task_count"] == len(regenerated[s]) and raw["splits"][s]["persona"] is True


def test_unreadable_split_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_split_manifest(str(tmp_path / "nope.json"))
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        load_split_manifest(str(p))
    p.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="is a JSON object"):
        load_split_manifest(str(p))
    with pytest.raises(ConfigError, match=r"split 'dev' is not in the split manifest; choose one of: test, train, val"):
        build_jobs(load_split_manifest(None), "dev", None, 1, 0)
