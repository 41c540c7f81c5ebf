"""Bounded-memory exports (shopsim_wh/export/batches.py): a kind computed per batch of episodes gives the same
bytes as one batch, exact duplicates in different batches included (issue 10)."""

from __future__ import annotations

import json

import pytest

from shopsim_wh.export import export

from . import export_fixtures as fx

_fixtures = fx.export_wh, fx.export_con, fx.every_kind
_wh, _con, _kinds = _fixtures  # pytest finds fixtures among module attributes

BATCH = 4


@pytest.mark.parametrize("kind", ["sft-action", "sft-trajectory", "shopsimrl-v4"])
def test_many_batches_give_the_bytes_of_one(kind, every_kind, export_con, tmp_path, monkeypatch):
    episodes = export_con.execute("SELECT count(*) FROM episodes").fetchone()[0]
    assert episodes > 3 * BATCH  # so the export below really runs in several batches
    one, one_dir = every_kind[kind]  # computed in one batch (the default batch is larger than this warehouse)
    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", str(BATCH))
    many = export(kind, export_con, tmp_path / kind, where="true")
    assert many.rows == one.rows > 0 and many.duplicates_removed == one.duplicates_removed
    assert many.shards == one.shards
    for s in one.shards:
        assert (tmp_path / kind / s["file"]).read_bytes() == (one_dir / s["file"]).read_bytes()
    if kind == "sft-action":  # the duplicated tau-bench run: its copies land in other batches, still counted
        assert many.duplicates_removed > 0
        m = json.loads((tmp_path / kind / "manifest.json").read_text())
        assert m["rows_selected"] == m["rows"] + m["duplicates_removed"]


def test_jsonl_in_batches_equals_one_batch(export_con, tmp_path, monkeypatch):
    one = export("ntp", export_con, tmp_path / "one", format="jsonl", where="true", shard_rows=5)
    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", str(BATCH))
    many = export("ntp", export_con, tmp_path / "many", format="jsonl", where="true", shard_rows=5)
    assert len(one.shards) > 1 and many.shards == one.shards
    for s in one.shards:
        assert (tmp_path / "many" / s["file"]).read_bytes() == (tmp_path / "one" / s["file"]).read_bytes()


def test_a_bad_batch_size_says_what_to_set(export_con, tmp_path, monkeypatch):
    from shopsim_wh.export import ExportError

    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", "0")
    with pytest.raises(ExportError, match="SHOPSIM_WH_EXPORT_BATCH_EPISODES must be a positive integer"):
        export("sft-action", export_con, tmp_path / "x")
