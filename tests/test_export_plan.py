"""An export read as one plan (issue 29): ``export --explain`` prints the kind, scope, filter, strategy and why,
batches and shards without writing anything, and the export then follows that plan: the executor its strategy
names, the shards it predicts."""

from __future__ import annotations

import json

import pytest

from shopsim_wh.export import STRATEGIES, ExportOptions, core, explain, export, groups

from . import export_fixtures as fx
from .journeys import ok, shopsim

_wh = fx.export_wh  # pytest finds fixtures among module attributes


def _explain_cli(root, *args, env=None) -> dict:
    res = shopsim("export", *args, "--explain", "--summary-format", "json", "-w", str(root), env=env)
    ok(res)
    return json.loads(res.stdout)


def test_explain_names_each_strategy_and_the_export_follows_it(export_wh, tmp_path):
    root = export_wh["root"]
    small = {"SHOPSIM_WH_EXPORT_BATCH_EPISODES": "4"}
    v4 = _explain_cli(root, "shopsimrl-v4", "--shard-rows", "7", env=small)
    assert v4["strategy"] == "file-groups" and v4["batches"] > 1 and not v4["copy_base_rows"]
    assert "file groups" in v4["why"] and v4["record_kind"] and v4["episodes"] > 7
    assert v4["shards"] == -(-v4["episodes"] // 7)  # known before a row is computed
    sft = _explain_cli(root, "sft-action", env=small)
    assert sft["strategy"] == "spill" and sft["shards"] is None and "not a record kind" in sft["why"]
    assert sft["copy_base_rows"] and sft["batches"] > 1
    assert "export_episodes" in sft["building_blocks"] and "sample_id" in sft["columns"]
    one = _explain_cli(root, "shopsimrl-v4")  # the default batch holds every episode: read in place
    assert one["strategy"] == "records" and one["batches"] == 1 and not one["copy_base_rows"]
    assert not any(tmp_path.iterdir())  # nothing written anywhere we look

    text = shopsim("export", "shopsimrl-v4", "--explain", "-w", str(root), env=small)
    ok(text)
    assert "strategy: file-groups" in text.stdout and "why: record kind shopsimrl-v4" in text.stdout

    res = shopsim("export", "shopsimrl-v4", "--shard-rows", "7", "--out", str(tmp_path / "v4"),
                  "--summary-format", "json", "-w", str(root), env=small)
    ok(res)
    assert len(json.loads(res.stdout)["shards"]) == v4["shards"]
    assert json.loads((tmp_path / "v4" / "manifest.json").read_text())["rows_selected"] == v4["episodes"]


def test_the_export_runs_the_executor_its_plan_names(export_wh, tmp_path, monkeypatch):
    root = export_wh["root"]
    taken = []
    for name, run in list(core.EXECUTORS.items()):
        monkeypatch.setitem(core.EXECUTORS, name, lambda *a, _n=name, _r=run: taken.append(_n) or _r(*a))
    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", "12")  # a few batches, not one
    cases = [("atif", {}, "file-groups"), ("ntp", {}, "spill")]
    for kind, opts, strategy in cases:
        assert explain(kind, root, ExportOptions(**opts)).strategy == strategy
        export(kind, root, tmp_path / kind, ExportOptions(**opts))
        assert taken[-1] == strategy
    monkeypatch.setattr(groups, "GROUP_FACTOR", 0)  # a compacted warehouse: no group fits a batch
    plan = explain("atif", root)
    assert plan.strategy == "records" and plan.copy_base_rows and "copied once per batch" in plan.why
    export("atif", root, tmp_path / "copy")
    assert taken[-1] == "records"
    assert set(taken) <= set(STRATEGIES)


def test_keyword_options_and_the_options_value_are_the_same_export(export_wh, tmp_path):
    root = export_wh["root"]
    a = export("ntp", root, tmp_path / "a", format="jsonl", shard_rows=5, where="true")
    b = export("ntp", root, tmp_path / "b", ExportOptions(format="jsonl", shard_rows=5, where="true"))
    assert [s["sha256"] for s in a.shards] == [s["sha256"] for s in b.shards] and len(a.shards) > 1
    with pytest.raises(TypeError, match="nonsense"):
        export("ntp", root, tmp_path / "c", nonsense=1)


def test_explain_refuses_what_export_refuses(export_wh):
    res = shopsim("export", "ntp", "--explain", "--format", "csv", "-w", str(export_wh["root"]))
    assert res.returncode == 2 and "unknown format 'csv'" in res.stderr + res.stdout
    res = shopsim("export", "ntp", "--explain", "--where", "no_such_column > 1", "-w", str(export_wh["root"]))
    assert res.returncode == 2 and "no_such_column" in res.stderr + res.stdout
