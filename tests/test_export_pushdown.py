"""An export's episode-level --where terms are applied to the episodes before any row is built (scope.pushdown):
the batches plan only the episodes that can give a row, and the bytes are those of the same filter applied to
the rows alone."""

from __future__ import annotations

import pytest

from shopsim_wh.export import batches, export
from shopsim_wh.export.registry import get_kind, list_kinds
from shopsim_wh.export.scope import EPISODE_FACTS, pushdown

from . import export_fixtures as fx

_fixtures = fx.export_wh, fx.export_con, fx.every_kind
_wh, _con, _kinds = _fixtures  # pytest finds fixtures among module attributes


@pytest.mark.parametrize("kind,expr,pushed,whole", [
    ("sft-action", "status = 'completed' AND success", "(((status = 'completed') AND success))", True),
    ("sft-action", "success AND agent_role = 'main' AND task_id % 10 = 0", "((success AND ((task_id % 10) = 0)))", False),
    ("sft-action", "success OR agent_role = 'main'", None, False),  # an OR naming a row column: nothing to push
    ("sft-action", "true", None, False),  # no column at all
    ("sft-action", "(split = 'train' AND reward BETWEEN 0.5 AND 1)", "(((split = 'train') AND "
     "(reward BETWEEN 0.5 AND 1)))", True),
    ("shopsimrl-v4", "task_id IN (1, 2) AND import_fidelity > 0.5", "((task_id IN (1, 2)))", False),
    ("preference", "agent_role = 'main'", None, False),  # batch: task, a row compares the task's rollouts
    ("sft-action", None, None, False),
])
def test_pushdown_takes_the_top_level_terms_over_episode_facts(kind, expr, pushed, whole, export_con):
    assert pushdown(export_con, get_kind(kind), expr) == (pushed, whole)


def test_episode_fact_columns_hold_the_episodes_values(export_con):
    """What makes the pushdown exact: in every kind whose batches are episodes, a filter column named in
    EPISODE_FACTS holds its episode's value in export_episode_facts, row for row."""
    checked = 0
    for kind in list_kinds():
        if kind.batch != "episode":
            continue
        cols = [c for c in EPISODE_FACTS if c in kind.filters]
        # the kinds filter on outcome, except the prompt datasets (a task's episodes collapse into one prompt row)
        assert "status" in cols or kind.name in ("sft-reasoning", "trl-grpo", "verl-rl"), kind.name
        differs = ", ".join(f"count(*) FILTER (WHERE k.{c} IS DISTINCT FROM e.{c})" for c in cols)
        rows, *differ = export_con.execute(f"""
            SELECT count(*), {differs}
            FROM {kind.view} AS k JOIN export_episode_facts AS e USING (run_id, episode_id)""").fetchone()
        assert dict(zip(cols, differ, strict=True)) == dict.fromkeys(cols, 0), kind.name  # the view once a kind
        checked += (rows > 0) * len(cols)
    assert checked > 50


def _same_bytes(a, a_dir, b, b_dir) -> None:
    assert a.rows == b.rows > 0 and a.shards == b.shards
    for s in a.shards:
        assert (a_dir / s["file"]).read_bytes() == (b_dir / s["file"]).read_bytes()


@pytest.mark.parametrize("kind,where,unpushed,shard_rows", [
    # the spill path; the second form is the same filter as one OR term naming a row column (nothing pushed)
    ("sft-action", "status = 'completed' AND success AND agent_role = 'main'",
     "(status = 'completed' AND success AND agent_role = 'main') OR (agent_role IS NULL AND false)", 100_000),
    # a record kind: pushed whole, it is written directly in several shards; partly pushed, it takes the spill
    ("shopsimrl-v4", "task_id % 2 = 0", "task_id % 2 = 0 AND import_fidelity >= 0", 3),
])
def test_a_pushed_where_gives_the_bytes_of_the_rows_filter(kind, where, unpushed, shard_rows, export_con, tmp_path,
                                                          monkeypatch):
    spec = get_kind(kind)
    assert pushdown(export_con, spec, where)[0] is not None and not pushdown(export_con, spec, unpushed)[1]
    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", "4")
    a = export(kind, export_con, tmp_path / "a", where=where, shard_rows=shard_rows)
    b = export(kind, export_con, tmp_path / "b", where=unpushed, shard_rows=shard_rows)
    _same_bytes(a, tmp_path / "a", b, tmp_path / "b")
    if kind == "shopsimrl-v4":
        assert len(a.shards) > 1


def test_the_plan_holds_only_the_episodes_the_where_keeps(export_con):
    spec = get_kind("sft-action")
    where = "status = 'completed' AND success"
    pushed, _ = pushdown(export_con, spec, where)
    try:
        batches.plan(export_con, spec, 4, pushed)
        planned = export_con.execute("SELECT count(*) FROM export_batch_plan").fetchone()[0]
        batches.plan(export_con, spec, 4)
        every = export_con.execute("SELECT count(*) FROM export_batch_plan").fetchone()[0]
    finally:
        batches.unshadow(export_con)
    keep = export_con.execute(f"SELECT count(*) FROM export_episode_facts WHERE {where}").fetchone()[0]
    assert 0 < planned == keep < every
