"""Record kinds exported in batches of file groups (shopsim_wh/export/groups.py): each batch reads its own
warehouse files (no copy of the base rows), and the batches' rows, merged, give the bytes of the copy's batches and
of one batch (issue 10)."""

from __future__ import annotations

import pytest

from shopsim_wh.export import batches, export, groups

from . import export_fixtures as fx

_wh = fx.export_wh  # pytest finds fixtures among module attributes

BATCH = 4


def _export_three_ways(kind, fmt, root, tmp_path, monkeypatch) -> dict:
    """The kind exported in one batch, in batches of file groups, and in batches of the copy: {way: (result, dir)}.
    The middle one must take the group path and the last the copy (spied, not replaced)."""
    seen, copied = [], []
    plan, shadow = groups.plan_groups, batches.shadow
    monkeypatch.setattr(groups, "plan_groups", lambda *a: seen.append(plan(*a)) or seen[-1])
    monkeypatch.setattr(batches, "shadow", lambda *a, **k: copied.append(1) or shadow(*a, **k))
    out = {"one": export(kind, root, tmp_path / "one", format=fmt, shard_rows=7)}
    assert not seen and not copied  # one batch: neither
    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", str(BATCH))
    out["groups"] = export(kind, root, tmp_path / "groups", format=fmt, shard_rows=7)
    assert seen and seen[-1] is not None and len(seen[-1]) > 2 and not copied
    monkeypatch.setattr(groups, "GROUP_FACTOR", 0)  # every group too large for a batch: the copy
    out["copy"] = export(kind, root, tmp_path / "copy", format=fmt, shard_rows=7)
    assert seen[-1] is None and copied
    return {way: (res, tmp_path / way) for way, res in out.items()}


@pytest.mark.parametrize(("kind", "fmt"), [("shopsimrl-v4", "jsonl"), ("shopsimrl-v4", "parquet"), ("atif", "jsonl")])
def test_file_groups_give_the_bytes_of_the_copy_and_of_one_batch(kind, fmt, export_wh, tmp_path, monkeypatch):
    ways = _export_three_ways(kind, fmt, export_wh["root"], tmp_path, monkeypatch)
    one, one_dir = ways["one"]
    assert len(one.shards) > 1 and one.rows > 3 * BATCH  # several shards, several batches
    for way in ("groups", "copy"):
        res, d = ways[way]
        assert (res.rows, res.shards) == (one.rows, one.shards), way
        for s in one.shards:
            assert (d / s["file"]).read_bytes() == (one_dir / s["file"]).read_bytes(), (way, s["file"])


def test_lines_longer_than_the_write_buffer_go_whole(export_wh, tmp_path, monkeypatch):
    """A line longer than the JSONL merge's buffer is written on its own, in its place."""
    monkeypatch.setattr(groups._Flusher, "SIZE", 4096)
    ways = _export_three_ways("shopsimrl-v4", "jsonl", export_wh["root"], tmp_path, monkeypatch)
    lines = (ways["one"][1] / ways["one"][0].shards[0]["file"]).read_bytes().splitlines()
    assert any(len(x) > 4096 for x in lines) and any(len(x) < 4096 for x in lines)
    for s in ways["one"][0].shards:
        assert (ways["groups"][1] / s["file"]).read_bytes() == (ways["one"][1] / s["file"]).read_bytes()


def test_a_group_holds_every_file_of_its_episodes(export_wh, tmp_path):
    """plan_groups partitions the planned episodes, and a batch's files hold every row of its episodes, in every
    table the base views read, every attempt included (what makes a batch's base views the warehouse's)."""
    from shopsim_wh.export import core
    from shopsim_wh.export.registry import get_kind
    from shopsim_wh.export.scope import bind_params

    spec = get_kind("shopsimrl-v4")
    con, _, _, (wh, snap) = core._open(export_wh["root"], str(tmp_path / "spill"), core.reads(spec.sql) | {spec.view})
    try:
        bind_params(con, {"export_window": None, "export_max_tokens": None, "export_include_reasoning": False,
                          "export_include_persona": False, "export_gamma": 1.0, "export_min_margin": None,
                          "export_min_step_margin": None})
        con.execute("CREATE OR REPLACE TEMP TABLE export_scope AS SELECT run_id FROM runs")
        planned = {sid for ids in batches.plan_records(con, spec, BATCH, None, 10**9) for sid in ids}
        found = groups.plan_groups(con, wh, snap, BATCH)
        assert found is not None and len(found) > 2
        ids = [sid for g in found for sid in g.sample_ids]
        assert sorted(ids) == sorted(planned) and len(ids) == len(set(ids))
        for g in found:
            keys = con.execute("SELECT run_id, episode_id FROM export_batch_plan WHERE sample_id IN "
                               "(SELECT unnest(?))", [g.sample_ids]).fetchall()
            for table in groups.SOURCES:
                mine = {wh.reader_path(e) for e in g.files[table]}
                paths = [wh.reader_path(e) for e in snap.files(table)]
                if not paths:
                    continue
                holding = {r[0] for r in con.execute(
                    "SELECT DISTINCT filename FROM read_parquet(?, hive_partitioning = true, filename = true, "
                    "union_by_name = true) WHERE (run_id, episode_id) IN (SELECT (k[1], k[2]) FROM "
                    "(SELECT unnest(?) AS k))", [paths, [list(k) for k in keys]]).fetchall()}
                assert holding <= mine, (table, holding - mine)
    finally:
        con.close()
