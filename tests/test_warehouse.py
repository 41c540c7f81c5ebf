"""The on-disk warehouse: atomic multi-table commits, compaction under readers, crash leftovers, round trips."""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shopsim_wh.core.errors import WarehouseError, WarehouseLockedError
from shopsim_wh.core.schema import TABLES, to_arrow
from shopsim_wh.engines.db import connect, install_views, staging_sql
from shopsim_wh.store.warehouse import StagedFile, Warehouse, stage_parquet

from .helpers import one_episode_batch, read_during_commits


def test_readers_never_see_half_a_commit(warehouse):
    def counts():
        con = connect(warehouse)
        try:
            return con.execute("select (select count(*) from stg_episodes), (select count(*) from stg_steps)").fetchone()
        finally:
            con.close()

    seen = read_during_commits(warehouse, counts, min_reads=8, max_commits=2000, compact_every=10)
    assert len(seen) > 5
    assert all(steps == 3 * eps for eps, steps in seen), "a reader saw one table of a batch without the other"


def test_small_tables_in_memory_keep_the_snapshot_of_the_connection(warehouse):
    with Warehouse(warehouse).writer() as w:
        w.commit(one_episode_batch("r", 0))
    con = connect(warehouse)  # the default copies these tiny tables into memory
    assert {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()} >= {
        "stg_episodes", "stg_steps"}
    with Warehouse(warehouse).writer() as w:
        w.commit(one_episode_batch("r", 1))
    assert con.execute("SELECT count(*) FROM episodes").fetchone()[0] == 1  # still the snapshot it opened
    assert connect(warehouse).execute("SELECT count(*) FROM episodes").fetchone()[0] == 2
    for small_table_bytes in (0, 1 << 20):  # re-installing switches a stg_ relation between view and table
        install_views(con, Warehouse(warehouse), small_table_bytes=small_table_bytes)
        kinds = dict(con.execute("SELECT table_name, table_type FROM information_schema.tables "
                                 "WHERE table_name IN ('stg_episodes', 'stg_steps')").fetchall())
        assert kinds == dict.fromkeys(("stg_episodes", "stg_steps"),
                                      "LOCAL TEMPORARY" if small_table_bytes else "VIEW"), kinds
        assert con.execute("SELECT count(*) FROM episodes").fetchone()[0] == 2


def test_a_database_file_keeps_views_that_work_without_connect(warehouse, tmp_path):
    with Warehouse(warehouse).writer() as w:
        w.commit(one_episode_batch("r", 0))
    db = tmp_path / "catalog.duckdb"
    with pytest.raises(WarehouseError, match="small_table_bytes=0"):
        connect(warehouse, database=str(db), small_table_bytes=1 << 20)
    connect(warehouse, database=str(db)).close()  # no in-memory copies for a file
    reopened = duckdb.connect(str(db))  # as a BI tool opens it: no shopsim_wh code involved
    assert reopened.execute("SELECT count(*), max(reward) FROM episodes").fetchone() == (1, 1.0)


def test_compaction_keeps_open_readers_working_and_merges_files(warehouse):
    wh = Warehouse(warehouse)
    with wh.writer(grace_s=60) as w:
        for i in range(10):
            w.commit(one_episode_batch("r", i))
        reader = connect(warehouse)  # opened on the pre-compaction snapshot
        assert w.compact("r") == 20
        assert reader.execute("select count(*) from stg_steps").fetchone()[0] == 30
    snap = wh.snapshot()
    assert [len(snap.files(t)) for t in ("episodes", "steps")] == [1, 1]
    f = wh.abspath(snap.files("steps")[0])
    assert pq.read_metadata(f).row_group(0).column(0).statistics.has_min_max
    rows = pq.read_table(f).to_pylist()
    assert [r["episode_id"] for r in rows] == sorted(r["episode_id"] for r in rows), "compacted files are sorted"
    # replaced files stay for the grace period, then vacuum removes them
    with wh.writer(grace_s=0) as w:
        pass
    assert len(list((warehouse / "steps").rglob("*.parquet"))) == 1


def test_files_of_a_crashed_commit_are_invisible_and_vacuumed(warehouse):
    wh = Warehouse(warehouse)
    with wh.writer() as w:
        w.commit(one_episode_batch("r", 0))
    orphan = warehouse / "steps" / "run_id=r" / "part-orphan.parquet"
    pq.write_table(to_arrow("steps", [{"episode_id": "x", "attempt": 1, "agent_id": "main", "step_idx": 0}]), orphan)
    (warehouse / "_staging" / "half-written.parquet").write_bytes(b"PAR1 torn")
    assert connect(warehouse).execute("select count(*) from stg_steps").fetchone()[0] == 3
    with wh.writer(grace_s=0):
        pass
    assert not orphan.exists() and not list((warehouse / "_staging").iterdir())


def test_replace_runs_swaps_a_run_atomically(warehouse):
    with Warehouse(warehouse).writer() as w:
        w.commit(one_episode_batch("a", 0) + one_episode_batch("b", 1))
        w.commit(one_episode_batch("a", 7, n_steps=5), replace_runs=["a"])
    con = connect(warehouse)
    assert con.execute("select run_id, count(*) from stg_steps group by 1 order by 1").fetchall() == [("a", 5), ("b", 3)]


def test_one_writer_at_a_time(warehouse):
    wh = Warehouse(warehouse)
    with wh.writer(), pytest.raises(WarehouseLockedError, match="locked"):
        with wh.writer(timeout_s=0.2):
            pass


def test_bad_run_ids_and_unknown_columns_are_refused(warehouse):
    with Warehouse(warehouse).writer() as w:
        with pytest.raises(WarehouseError, match="partition"):
            w.commit(one_episode_batch("../evil", 0))
        with pytest.raises(WarehouseError, match="unknown table"):
            w.commit([("nope", "r", to_arrow("steps", []))])
    with pytest.raises(KeyError, match="no column"):
        to_arrow("steps", [{"episode_id": "e", "attempt": 1, "agent_id": "main", "step_idx": 0, "typo": 1}])



def test_staged_files_written_elsewhere_are_adopted_by_a_commit(warehouse, tmp_path):
    """A parsing worker writes Parquet under _staging/ itself; the commit only places it (rows intact)."""
    wh = Warehouse(warehouse)
    (_, _, steps), = [b for b in one_episode_batch("r1", 7, n_steps=5) if b[0] == "steps"]
    steps = steps.cast(TABLES["steps"].arrow_schema)
    with wh.writer() as w:
        staged = stage_parquet(wh.staging_dir, steps, 1, prefix="load-x")
        w.commit([("steps", "r1", staged)])
        outside = stage_parquet(tmp_path, steps, 1)
        with pytest.raises(WarehouseError, match="staging directory"):
            w.commit([("steps", "r1", StagedFile(outside.path, outside.rows))])
        wrong = stage_parquet(wh.staging_dir, steps, 1)  # a steps file offered as episodes
        with pytest.raises(WarehouseError, match="declared schema of table 'episodes'"):
            w.commit([("episodes", "r1", wrong)])
        wrong.path.unlink()
    assert not list(wh.staging_dir.glob("*.parquet"))
    con = connect(warehouse)
    assert con.execute("select run_id, count(*), max(step_idx) from steps group by 1").fetchall() == [("r1", 5, 4)]


text = st.text(max_size=200)  # any unicode, including NUL and surrogate-free astral characters
step_rows = st.fixed_dictionaries({
    "episode_id": st.text(min_size=1, max_size=30), "attempt": st.integers(1, 5), "agent_id": st.text(min_size=1, max_size=10),
    "step_idx": st.integers(0, 10_000), "reasoning": st.none() | text, "content": st.none() | text,
    "tokens_in": st.none() | st.integers(0, 2**62), "latency_ms": st.none() | st.floats(allow_nan=False),
    "started_at": st.none() | st.datetimes(timezones=st.just(UTC), min_value=datetime(1970, 1, 2), max_value=datetime(2100, 1, 1)),
})


@settings(max_examples=30, deadline=None)
@given(rows=st.lists(step_rows, max_size=8))
def test_rows_round_trip_through_parquet_and_duckdb(tmp_path_factory, rows):
    root = tmp_path_factory.mktemp("wh")
    wh = Warehouse(root)
    with wh.writer() as w:
        w.commit([("steps", "r", to_arrow("steps", rows))])
    con = duckdb.connect()  # the staging SQL `connect` installs as stg_steps, without the ~100 views above it
    snap = wh.snapshot()
    wh.register(con, snap)
    cols = list(rows[0]) if rows else ["episode_id"]
    got = con.execute(f"select {', '.join(cols)} from ({staging_sql(wh, snap, 'steps')})").fetchall()
    want = [tuple(r[c] for c in cols) for r in rows]
    def norm(t):
        return tuple(v.timestamp() if isinstance(v, datetime) else v for v in t)
    assert sorted(map(repr, map(norm, got))) == sorted(map(repr, map(norm, want)))


def test_every_table_has_lineage_columns():
    for t in TABLES.values():
        assert {"load_id", "schema_version"} <= set(t.column_names), t.name


def test_files_of_an_older_schema_read_with_new_columns_as_null(warehouse):
    """A warehouse written before a column existed stays readable: the column reads as NULL."""
    import json

    wh = Warehouse(warehouse)
    with wh.writer() as w:
        w.commit(one_episode_batch("old", 0))
    # rewrite the step file without a column added in schema version 2 and mark it as written by version 1
    snap_path = warehouse / "_catalog" / f"snapshot-{wh.snapshot().version:06d}.json"
    doc = json.loads(snap_path.read_text())
    entry = doc["tables"]["steps"][0]
    f = warehouse / entry["path"]
    pq.write_table(pq.read_table(f).drop_columns(["tool_schema_hashes", "metadata"]), f)
    entry["schema_version"] = 1
    snap_path.write_text(json.dumps(doc))
    con = connect(warehouse)
    assert con.execute("select count(*), count(metadata), count(step_idx) from stg_steps").fetchone() == (3, 0, 3)
    with wh.writer() as w:  # new files beside old ones
        w.commit(one_episode_batch("new", 1))
    assert connect(warehouse).execute("select count(*) from stg_steps").fetchone()[0] == 6


def test_incremental_compaction_leaves_compacted_files_alone(warehouse):
    wh = Warehouse(warehouse)
    with wh.writer(grace_s=60) as w:
        for i in range(4):
            w.commit(one_episode_batch("r", i))
        w.compact("r")
        big = {e.path for e in wh.snapshot().files("steps")}
        for i in range(4, 8):
            w.commit(one_episode_batch("r", i))
        assert w.compact("r", small_only=True) == 8  # the 4 new episode files and 4 new step files
        paths = {e.path for e in wh.snapshot().files("steps")}
        assert big <= paths and len(paths) == 2
        w.compact("r")
    assert len(wh.snapshot().files("steps")) == 1
    assert connect(warehouse).execute("select count(*) from stg_steps").fetchone()[0] == 24
