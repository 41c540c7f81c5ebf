"""The SQL sandbox: every view reads, nothing outside the warehouse does, nothing is written or changed.

Real DuckDB over a real (small) synthetic warehouse, and the CLI in real subprocesses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shopsim_wh.analytics.gate import GateOptions, gate
from shopsim_wh.analytics.summary import QueryResult, render
from shopsim_wh.core.errors import QueryRefused
from shopsim_wh.demo.shop import WarehouseSpec, default_runs, generate
from shopsim_wh.engines import sandbox
from shopsim_wh.engines.db import view_names
from shopsim_wh.testing import hostile_sql

CLI = [sys.executable, "-m", "shopsim_wh.cli.main"]
BARE, SKILL = "synth-ckpt-a-bare", "synth-ckpt-a-skill"


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """Bare and skill runs of one checkpoint plus coding sessions: every view has rows to read."""
    path = tmp_path_factory.mktemp("sandbox") / "wh"
    generate(path, 240, WarehouseSpec(runs=default_runs(2), seed=5, repeats=1, coding_episodes=2))
    return path


@pytest.fixture(scope="module")
def con(root):
    return sandbox.connect(root)


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    """A directory beside nothing of the warehouse, with a secret file and a CSV in it."""
    d = tmp_path_factory.mktemp("outside")
    (d / "secret.txt").write_text("canary-outside-the-warehouse\n")
    (d / "data.csv").write_text("a,b\n1,canary\n")
    (d / "data.json").write_text('{"a": "canary"}\n')
    return d


def test_every_view_reads_through_the_sandbox(con, root):
    views = [n for n, _ in view_names(con)]
    assert len(views) > 30 and "episodes" in views and "run_metrics" in views
    for name in views:
        sandbox.execute(con, f'SELECT count(*) FROM "{name}"').fetchone()
    n = sandbox.execute(con, "SELECT count(*) FROM episodes WHERE run_id = $r", {"r": BARE}).fetchone()[0]
    assert n > 0
    # the warehouse's own files stay readable by path, including a glob over a table
    files = sandbox.execute(con, f"SELECT count(*) FROM glob('{root.resolve()}/episodes/**/*.parquet')").fetchone()[0]
    assert files > 0
    assert sandbox.execute(con, f"SELECT count(*) FROM read_parquet('{root.resolve()}/runs/*/*.parquet')").fetchone()[0]


def _refused(con, sql: str) -> str:
    with pytest.raises(QueryRefused) as info:
        sandbox.execute(con, sql)
    return str(info.value)


@pytest.mark.parametrize(("sql", "says"), hostile_sql.DUCKDB)
def test_refused_with_a_clear_message(con, root, outside, sql, says):
    text = _refused(con, sql.format(o=outside, root=root.resolve(), oname=outside.name))
    assert says in text
    assert "shopsim-wh tables" in text  # ... and says what to do instead


def test_refusals_changed_nothing(con, root, outside):
    for sql in ("create table z as select 1", "copy (select 1) to '{o}/out.csv'", "set threads = 1",
                "attach '{o}/elsewhere.duckdb' as y"):
        with pytest.raises(QueryRefused):
            sandbox.execute(con, sql.format(o=outside))
    # the library itself cannot loosen the locked settings either
    for sql in ("SET enable_external_access = true", "RESET allowed_directories", "SET lock_configuration = false"):
        with pytest.raises(duckdb.InvalidInputException, match="locked"):
            con.execute(sql)
    settings = dict(con.execute("SELECT name, value FROM duckdb_settings() WHERE name IN ('enable_external_access', "
                                "'lock_configuration', 'autoload_known_extensions', 'autoinstall_known_extensions', "
                                "'python_enable_replacements')").fetchall())
    assert set(settings.values()) == {"false", "true"} and settings["lock_configuration"] == "true"
    assert settings["enable_external_access"] == settings["autoload_known_extensions"] == "false"
    assert sorted(p.name for p in outside.iterdir()) == ["data.csv", "data.json", "secret.txt"]
    assert not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'z'").fetchone()[0]


def test_python_objects_in_scope_are_not_readable(con):
    import pyarrow as pa

    canary_table = pa.table({"secret": ["canary"]})  # noqa: F841  (what a replacement scan would find)
    with pytest.raises(duckdb.CatalogException):
        sandbox.execute(con, "SELECT * FROM canary_table")


def test_select_like_statements_run(con):
    assert sandbox.execute(con, "FROM runs SELECT count(*)").fetchone()[0] > 0
    assert sandbox.execute(con, "WITH x AS (SELECT 1 AS a) SELECT a FROM x;").fetchone() == (1,)
    assert sandbox.execute(con, "VALUES (1), (2)").fetchall() == [(1,), (2,)]
    assert sandbox.execute(con, "DESCRIBE episodes").fetchall()
    assert sandbox.execute(con, "SUMMARIZE SELECT reward FROM episodes").fetchall()
    assert sandbox.execute(con, "EXPLAIN SELECT * FROM episodes").fetchall()
    assert sandbox.execute(con, "SELECT ';' AS semi -- a comment; drop view episodes").fetchone() == (";",)
    assert sandbox.execute(con, "PIVOT (SELECT status FROM episodes) ON status IN ('completed') USING count(*)").fetchall()


# --------------------------------------------------------------------------------------------- expressions


@pytest.mark.parametrize("expr", [
    "1) AS x0 FROM episodes --", "1) FROM t WHERE (1", "a) OR (b", "1), (2", "a -- rest of the query",
    "a /* open", "a; drop view episodes", "a AS alias", "1 FROM episodes", "(select 1) UNION (select 2",
    "1 ORDER BY 1", "1 LIMIT 1", "", "   ", "a\x00", "x = ')'", ")", "(",
    "(select count(*) from (with x as (delete from stg_runs returning *) select * from x)) > 0",
])
def test_check_expression_refuses(expr):
    if expr == "x = ')'":  # a parenthesis inside a string is text: accepted
        assert sandbox.check_expression(expr, "--where") == "(x = ')')"
        return
    with pytest.raises(QueryRefused) as info:
        sandbox.check_expression(expr, "--where")
    assert "--where" in str(info.value) and "e.g." in str(info.value)


def test_check_expression_accepts_expressions():
    for expr in ("reward > 0.5 AND split = 'val'", "p.task_id % 97", "coalesce(reward, 0) * 2",
                 "task_id IN (SELECT task_id FROM episodes WHERE reward > 0)", "CASE WHEN a THEN 1 ELSE 0 END",
                 "list_contains(p.skills, 'x')", "\"odd ) name\" = 1"):
        assert sandbox.check_expression(expr, "--where") == f"({expr})"


_PIECES = ["a", "1", "'x'", "')'", "(", ")", " OR ", " AND ", " = ", "--", "/*", "*/", ";", " FROM t", " AS b",
           "\n", " SELECT ", ",", '"q)"', "$$)$$", " UNION ", "E'\\''"]


_PARSE = duckdb.connect()


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=8).map("".join))
def test_an_accepted_expression_cannot_escape_its_place(expr):
    """Whatever is accepted, spliced before `AND run_id = 'r'`, leaves that condition a top-level conjunct."""
    try:
        checked = sandbox.check_expression(expr, "--where")
    except QueryRefused:
        return
    tree = json.loads(_PARSE.execute(
        "SELECT json_serialize_sql(?)", [f"SELECT * FROM t WHERE {checked} AND run_id = 'r'"]).fetchone()[0])
    assert not tree["error"], (expr, tree)
    (stmt,) = tree["statements"]
    where = stmt["node"]["where_clause"]
    assert where["type"] == "CONJUNCTION_AND" and len(where["children"]) == 2, expr
    right = where["children"][1]
    assert right["type"] == "COMPARE_EQUAL" and right["left"]["column_names"] == ["run_id"], expr
    assert stmt["node"]["from_table"]["table_name"] == "t" and not stmt["node"]["modifiers"], expr


def test_gate_covariates_run_in_the_sandbox(root, con, outside):
    # a warehouse path opens the sandbox itself: a covariate cannot read outside it
    with pytest.raises(Exception, match="disabled by configuration"):
        gate(root, BARE, SKILL, GateOptions(covariates={
            "c": f"(SELECT count(*) FROM read_text('{outside}/secret.txt'))", "one": "1"}, bootstrap=0))
    base = gate(con, BARE, SKILL, GateOptions(covariates={"mod": "p.task_id % 2", "one": "1"}, bootstrap=0))
    assert base.n_pairs > 0
    for bad in ("1) AS x0, (1", "1 -- ", "1; copy (select 1) to 'x.csv'", "p.task_id % 2) AS x0 FROM episodes --"):
        with pytest.raises(QueryRefused, match="covariate 'c'"):
            gate(con, BARE, SKILL, GateOptions(covariates={"c": bad, "one": "1"}, bootstrap=0))


# --------------------------------------------------------------------------------------------- the CLI


def test_the_four_commands_of_the_issue_fail(root, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # '../outside.csv' and '../elsewhere.duckdb' would land in tmp_path
    for sql, says in [("select * from read_csv('/etc/passwd') limit 2", "reads only the warehouse"),
                      ("copy (select 1) to '../outside.csv'", "COPY"),
                      ("attach '../elsewhere.duckdb' as y", "ATTACH"),
                      ("create table z as select 1", "CREATE")]:
        out = _run("sql", sql, "-w", str(root))
        assert isinstance(out.exception, QueryRefused), (sql, out.output)
        assert says in str(out.exception) and "shopsim-wh tables" in str(out.exception)
        assert "root:" not in out.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"] and not list(work.iterdir())
    # as a user runs it: exit code 2, the message on stderr, no traceback
    out = subprocess.run([*CLI, "sql", "select * from read_csv('/etc/passwd') limit 2", "-w", str(root)],
                         capture_output=True, text=True, timeout=120, cwd=work)
    assert out.returncode == 2 and "reads only the warehouse" in out.stderr and "Traceback" not in out.stderr
    assert "root:" not in out.stdout


def _run(*args, stdin=None):
    """The CLI app in this process (typer's runner): real commands, without a Python start-up each."""
    from typer.testing import CliRunner

    from shopsim_wh.cli.main import app

    return CliRunner().invoke(app, list(args), input=stdin)


def test_sql_reads_the_query_from_stdin_or_a_file_and_prints_wide_rows_vertically(root, tmp_path):
    out = _run("sql", "-", "-w", str(root), "--format", "json", stdin="select count(*) AS n from runs\n")
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)[0]["n"] > 0
    (tmp_path / "q.sql").write_text("-- runs, widest columns first\nselect run_id, fingerprint_fields, config\n"
                                    "from runs order by run_id limit 2\n")
    out = _run("sql", "--file", str(tmp_path / "q.sql"), "-w", str(root))
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert lines[0].startswith("-[ row 1 ]") and lines[1].startswith("run_id ") and "(2 rows)" in lines[-1]
    assert any(line.startswith("config ") and line.endswith("}") for line in lines)  # whole, not cut at 60
    out = _run("sql", "-", "-w", str(root), stdin="create table z as select 1")
    assert isinstance(out.exception, QueryRefused) and "CREATE" in str(out.exception)
    out = _run("sql", "-", "-w", str(root), stdin="  \n")
    assert out.exit_code == 2 and "stdin held no query" in out.output


def test_render_switches_to_vertical_only_when_too_wide():
    narrow = QueryResult(["a", "b"], [(1, "x"), (2, None)])
    assert render(narrow, "table", width=80).splitlines()[0].split() == ["a", "b"]
    wide = QueryResult(["a", "text"], [(1, "y" * 200)])
    lines = render(wide, "table", width=80).splitlines()
    assert lines == ["-[ row 1 ]", "a    | 1", "text | " + "y" * 200, "(1 row)"]
    assert render(narrow, "vertical").splitlines()[-2:] == ["b | NULL", "(2 rows)"]


def test_arrow_results_come_without_a_warning_and_refuse_like_the_rest(con, outside):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the DB-API path warned "Arrow output on a DB-API result makes an extra copy"
        table = sandbox.fetch_arrow(con, "SELECT run_id FROM runs WHERE run_id = $r", {"r": BARE})
    assert table.column("run_id").to_pylist() == [BARE]
    with pytest.raises(QueryRefused, match="reads only the warehouse"):
        sandbox.fetch_arrow(con, f"SELECT * FROM read_text('{outside}/secret.txt')")
    with pytest.raises(QueryRefused, match="COPY"):
        sandbox.fetch_arrow(con, f"COPY (SELECT 1) TO '{outside}/x.parquet'")


def test_out_still_writes_where_the_user_asked(root, tmp_path):
    target = tmp_path / "résumé ü 結果.csv"
    out = _run("sql", "select run_id from runs", "-w", str(root), "--format", "csv", "--out", str(target))
    assert out.exit_code == 0, out.output
    assert target.read_text().startswith("run_id\n")
    out = _run("sql", "select 1", "-w", str(root), "--out", str(tmp_path / "missing" / "x.csv"))
    assert out.exit_code == 2 and "writable directory" in " ".join(out.output.replace("│", " ").split())
    assert os.listdir(tmp_path) == [target.name]


# --------------------------------------------------------------------------------------------- limits


def test_a_runaway_query_stops_at_its_time_limit_with_exit_2(root):
    # a recursive CTE without end: interrupted by the timer, not killed from outside
    out = subprocess.run([*CLI, "sql", "-w", str(root), "--timeout", "1",
                          "with recursive r(n) as (select 1 union all select n + 1 from r) select count(*) from r"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "time limit of 1 s" in out.stderr and "--timeout" in out.stderr and "Traceback" not in out.stderr


def test_the_memory_cap_fails_a_query_that_cannot_spill_and_is_set_from_the_environment(root):
    huge = "select string_agg(repeat('x', 1000000), ',') from range(3000)"  # one 3 GB string: nothing to spill
    out = _run("sql", "-w", str(root), "--memory-limit", "300MB", huge)
    assert "memory cap of 300MB" in str(out.exception) and "--memory-limit" in str(out.exception)
    env = {**os.environ, sandbox.MEMORY_ENV: "333MB"}
    res = subprocess.run([*CLI, "sql", "-w", str(root), "-f", "csv", "select current_setting('memory_limit') m"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0 and "317.5 MiB" in res.stdout  # 333 MB as DuckDB prints it (MiB)


def test_limits_resolve_from_arguments_then_environment_then_defaults(monkeypatch):
    monkeypatch.delenv(sandbox.TIMEOUT_ENV, raising=False)
    monkeypatch.delenv(sandbox.MEMORY_ENV, raising=False)
    assert sandbox.Limits.resolve() == sandbox.Limits(sandbox.DEFAULT_TIMEOUT_S, sandbox.default_memory_limit())
    monkeypatch.setenv(sandbox.TIMEOUT_ENV, "7")
    assert sandbox.Limits.resolve().timeout_s == 7 and sandbox.Limits.resolve(timeout_s=0).timeout_s is None
    monkeypatch.setenv(sandbox.TIMEOUT_ENV, "soon")
    with pytest.raises(Exception, match="not a number of seconds"):
        sandbox.Limits.resolve()
    mb = int(sandbox.default_memory_limit().removesuffix("MB"))
    assert 256 <= mb <= 4096


def test_the_time_limit_leaves_no_thread_behind(con):
    """A timer thread still alive when the CLI exits aborted the process ('terminate called ... exception not
    rethrown', exit 134, in about one run of four): limited() joins its timer before it returns."""
    import threading

    before = set(threading.enumerate())
    with sandbox.limited(con, sandbox.Limits(timeout_s=60, memory="1GB")):
        sandbox.execute(con, "SELECT count(*) FROM episodes").fetchall()
    assert set(threading.enumerate()) <= before


def test_a_runaway_covariate_stops_the_gate_at_its_time_limit(root):
    runaway = "(select count(*) from (with recursive r(n) as (select 1 union all select n + 1 from r) select * from r))"
    out = subprocess.run([*CLI, "gate", "--bare", BARE, "--treatment", SKILL, "-w", str(root), "--dry-run",
                          "--timeout", "1", "-c", runaway], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "the gate's fit was stopped after its time limit of 1 s" in out.stderr and "Traceback" not in out.stderr
