"""The sandbox's Spark half (shopsim_wh/engines/spark_guard.py): every hostile query class is refused on the Spark path
before Spark sees it. Runs without a JVM; tests/test_spark.py sends the worst of them through a real session."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from shopsim_wh.core.errors import QueryRefused
from shopsim_wh.engines import spark_guard
from shopsim_wh.engines.sandbox import check_query
from shopsim_wh.testing import hostile_sql

VIEWS = ("episodes", "runs", "steps", "run_metrics")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    from shopsim_wh.demo.shop import WarehouseSpec, default_runs, generate

    path = tmp_path_factory.mktemp("guard") / "wh"
    generate(path, 40, WarehouseSpec(runs=default_runs(2), seed=5, repeats=1, coding_episodes=0))
    return path


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("outside")
    (d / "secret.txt").write_text("canary\n")
    (d / "data.csv").write_text("a\n1\n")
    (d / "data.json").write_text('{"a": 1}\n')
    return d


def test_there_are_at_least_50_attack_classes_per_engine():
    assert len(set(hostile_sql.DUCKDB)) >= 50
    assert len(set(hostile_sql.DUCKDB)) + len(set(hostile_sql.SPARK)) >= 80


@pytest.mark.parametrize("sql", hostile_sql.SPARK)
def test_spark_dialect_attacks_are_refused_by_the_guard(sql, outside):
    with pytest.raises(QueryRefused) as info:
        spark_guard.check(sql.format(o=outside), VIEWS)
    assert "shopsim-wh tables" in str(info.value)


@pytest.mark.parametrize(("sql", "says"), hostile_sql.DUCKDB)
def test_duckdb_dialect_attacks_never_reach_spark(sql, says, root, outside):
    """What `sql --engine spark` does before Spark runs anything: the statement check, a bind on a sandboxed
    DuckDB connection over the same warehouse, then the guard on the translated Spark SQL. Each hostile class
    stops at one of them."""
    from shopsim_wh.engines.spark import translator

    text = sql.format(o=outside, root=root.resolve(), oname=outside.name)
    with pytest.raises((QueryRefused, duckdb.Error, ValueError)):
        check_query(text)
        spark_guard.bind_on_duckdb(root, text)
        spark_guard.check(translator().query(text), VIEWS)


@pytest.mark.parametrize("sql", [
    "select * from episodes e join runs r using (run_id)", "with x as (select 1 as a) select * from x",
    "select run_id, avg(reward) from episodes group by run_id", "select explode(array(1, 2))",
    "select * from (values (1)) as t(a)", "select * from range(3)",
    "select * from episodes where reward > (select avg(reward) from episodes)",
])
def test_ordinary_queries_pass_the_guard(sql):
    assert spark_guard.check(sql, VIEWS) == sql


def test_a_bind_on_duckdb_accepts_a_query_over_the_views(root):
    spark_guard.bind_on_duckdb(root, "select run_id, count(*) from episodes where reward > $r group by 1", {"r": 0.5})
