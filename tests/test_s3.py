"""Warehouses in S3-compatible object storage, against moto's server on loopback: the runner and readers,
two concurrent writers, a writer killed between upload and commit, readers during commits, compaction."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid

import pyarrow.parquet as pq
import pytest

from shopsim_wh.core.config import load_config
from shopsim_wh.core.errors import QueryRefused
from shopsim_wh.core.schema import TABLES
from shopsim_wh.ops.check import compare_canonical
from shopsim_wh.rollout import runner
from shopsim_wh.store.warehouse import Warehouse

from .helpers import one_episode_batch, read_during_commits, write_config

BUCKET = "shopsim-test"


@pytest.fixture(scope="module")
def s3():
    """The loopback server for this module, its variables set in this process (and so in its children)."""
    from shopsim_wh.testing.s3server import make_bucket, s3_server

    with s3_server() as env:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            make_bucket(BUCKET)
            yield env
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _url() -> str:
    return f"s3://{BUCKET}/wh-{uuid.uuid4().hex[:8]}"


def _objects(url: str, prefix: str) -> list[str]:
    wh = Warehouse(url)
    return sorted(rel for rel, _, _ in wh.store.list(prefix))


@pytest.fixture(scope="module")
def demo_pair(s3, tmp_path_factory):
    """The same small config run into a local warehouse and into s3:// (the s3 one resumed once)."""
    tmp = tmp_path_factory.mktemp("s3demo")
    cfg = load_config(write_config(tmp / "cfg.yaml"))
    local, url = tmp / "local", _url()
    first = runner.run(cfg, str(local))
    remote = runner.run(cfg, url)
    resumed = runner.run(cfg, url)
    return cfg, local, url, first, remote, resumed


def test_demo_run_into_s3_reads_back_equal_to_local(demo_pair):
    cfg, local, url, first, remote, resumed = demo_pair
    assert (remote.completed, remote.failed) == (first.completed, first.failed) and remote.completed > 0
    assert resumed.attempted == 0, "a resumed run re-ran episodes already committed to the bucket"
    run_id = cfg.experiment.name
    assert compare_canonical(local, url, run_id) == {}
    # nothing was written outside the prefix, the snapshot is the catalog, the ledger acknowledged every episode
    keys = _objects(url, "_catalog")
    assert any(k.endswith("CURRENT") for k in keys) and any("snapshot-" in k for k in keys)
    from shopsim_wh.store.ledger import read_ledger

    entries, torn = read_ledger(url)
    acked = {e[0] for x in entries if x["writer"] == "run" for e in x["episodes"]}
    assert torn == 0 and len(acked) == remote.completed
    from shopsim_wh.ops.check import check

    report = check(url)
    assert report.ok and not report.stray and not report.lost, report


def test_readers_on_s3_read_the_snapshot_and_the_sandbox_stays_inside(demo_pair):
    from shopsim_wh.engines import sandbox
    from shopsim_wh.engines.db import connect

    cfg, local, url, *_ = demo_pair
    con_l, con_r = connect(local), connect(url)
    q = "select count(*), sum(reward), count(distinct episode_id) from episodes"
    assert con_r.execute(q).fetchone() == con_l.execute(q).fetchone()
    sb = sandbox.connect(url)
    assert sandbox.execute(sb, "select count(*) from steps").fetchone() == con_l.execute("select count(*) from steps").fetchone()
    other = f"s3://{BUCKET}/elsewhere/x.parquet"
    with pytest.raises(QueryRefused, match="reads only the warehouse"):
        sandbox.execute(sb, f"select * from read_parquet('{other}')")
    for outside in (f"{url}-sibling/x.parquet", f"{url}/../elsewhere/x.parquet", f"s3://{BUCKET}/**/*.parquet"):
        with pytest.raises(QueryRefused):
            sandbox.execute(sb, f"select * from read_parquet('{outside}')")


def test_export_catalog_and_cli_read_an_s3_warehouse(demo_pair, tmp_path):
    from shopsim_wh.engines.catalog import build_catalog

    cfg, local, url, *_ = demo_pair
    env = {**os.environ}
    out = subprocess.run([sys.executable, "-m", "shopsim_wh.cli.main", "sql", "-w", url, "--format", "json",
                          "select count(*) as n from episodes"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert '"n"' in out.stdout
    info = build_catalog(url, tmp_path / "cat.duckdb")
    assert info.path.exists()
    with pytest.raises(Exception, match="--out"):
        build_catalog(url)


def test_a_record_kind_exports_an_s3_warehouse_in_file_groups(demo_pair, tmp_path, monkeypatch):
    """export shopsimrl-v4 in several batches reads the bucket's files in groups (DuckDB names each file as the
    snapshot does) and gives the bytes of one batch."""
    from shopsim_wh.export import export, groups

    cfg, local, url, *_ = demo_pair
    one = export("shopsimrl-v4", url, tmp_path / "one", format="jsonl")
    seen = []
    plan = groups.plan_groups
    monkeypatch.setattr(groups, "plan_groups", lambda *a: seen.append(plan(*a)) or seen[-1])
    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", "3")  # two batches; its exported commit holds 6
    many = export("shopsimrl-v4", url, tmp_path / "many", format="jsonl")
    assert len(seen) == 1 and seen[0] is not None
    assert one.rows > 2 and many.shards == one.shards
    for s in one.shards:
        assert (tmp_path / "many" / s["file"]).read_bytes() == (tmp_path / "one" / s["file"]).read_bytes()


def test_two_concurrent_writers_both_commit_without_losing_a_snapshot(s3):
    url = _url()
    a, b = Warehouse(url), Warehouse(url)
    # deterministic interleaving: A opens on snapshot 0, B commits snapshot 1, A's commit loses the race for 1
    with a.writer(grace_s=60) as wa, b.writer(grace_s=60) as wb:
        wb.commit(one_episode_batch("rb", 0))
        snap = wa.commit(one_episode_batch("ra", 0))
    assert snap.version == 2 and {e.run_id for e in snap.files("episodes")} == {"ra", "rb"}
    # and racing for real: two threads, six commits each
    errors = []

    def write(run_id):
        try:
            with Warehouse(url).writer(grace_s=60) as w:
                for i in range(1, 7):
                    w.commit(one_episode_batch(run_id, i))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    ts = [threading.Thread(target=write, args=(r,)) for r in ("ra", "rb")]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors, errors[0]
    final = Warehouse(url).snapshot()
    assert final.version == 14  # 2 + 12 commits, each its own snapshot number
    eps = Warehouse(url).read("episodes", ["episode_id"], snap=final)
    keys = list(zip(eps.column("run_id").to_pylist(), eps.column("episode_id").to_pylist(), strict=True))
    assert len(keys) == len(set(keys)) == 14
    assert len(final.files("steps")) == 14


_KILLED = """
import sys
from shopsim_wh.core.schema import to_arrow
from shopsim_wh.store.warehouse import Warehouse
with Warehouse(sys.argv[1]).writer() as w:
    w.commit([("episodes", "killed", to_arrow("episodes", [{"episode_id": "e", "attempt": 1, "status": "completed"}]))])
"""


def test_writer_killed_between_upload_and_commit_leaves_nothing_visible(s3):
    url = _url()
    with Warehouse(url).writer() as w:
        w.commit(one_episode_batch("kept", 0))
    env = {**os.environ, "SHOPSIM_WH_CRASH": "commit.dir_synced", "SHOPSIM_WH_CRASH_MODE": "kill"}
    p = subprocess.run([sys.executable, "-c", _KILLED, url], env=env, capture_output=True, timeout=120)
    assert p.returncode == -signal.SIGKILL, p.stderr.decode()[-2000:]
    wh = Warehouse(url)
    snap = wh.snapshot()
    assert snap.version == 1 and snap.run_ids() == {"kept"}
    orphans = _objects(url, "episodes/run_id=killed")
    assert len(orphans) == 1, "the killed writer had uploaded its file"
    from shopsim_wh.ops.check import stray_files

    assert stray_files(wh, snap) == orphans
    assert Warehouse(url).read("episodes", ["episode_id"]).column("run_id").to_pylist() == ["kept"]
    # the next writer keeps it while it may still belong to a live writer, vacuum removes it once old enough
    with wh.writer(grace_s=3600) as w:
        w.commit(one_episode_batch("next", 0))
    assert _objects(url, "episodes/run_id=killed") == orphans
    from shopsim_wh.store.maintenance import vacuum

    res = vacuum(url, grace_s=0)
    assert res["removed_files"] >= 1 and _objects(url, "episodes/run_id=killed") == []
    assert Warehouse(url).snapshot().run_ids() == {"kept", "next"}


def test_readers_during_commits_and_compaction_see_whole_snapshots(s3):
    import duckdb

    from shopsim_wh.engines.db import staging_sql

    url = _url()

    def counts():  # what connect() does for the stg_ views, without the ~100 layered views on top
        wh = Warehouse(url)
        snap = wh.snapshot()
        con = duckdb.connect()
        try:
            wh.register(con, snap)
            return con.execute(f"select (select count(*) from ({staging_sql(wh, snap, 'episodes')})), "
                               f"(select count(*) from ({staging_sql(wh, snap, 'steps')}))").fetchone()
        finally:
            con.close()

    seen = read_during_commits(url, counts, min_reads=3, max_commits=200, compact_every=5)
    assert len(seen) >= 3 and all(steps == 3 * eps for eps, steps in seen)


def test_compaction_on_s3_merges_sorted_files_in_the_declared_schema(s3):
    from shopsim_wh.store.maintenance import compact, vacuum

    url = _url()
    with Warehouse(url).writer() as w:
        for i in (5, 3, 9, 1):
            w.commit(one_episode_batch("r", i))
    res = compact(url, grace_s=0)
    wh = Warehouse(url)
    snap = wh.snapshot()
    assert res["files_replaced"] == 8 and len(snap.files("steps")) == 1 and snap.files("steps")[0].compacted
    f = snap.files("episodes")[0]
    t = pq.read_table(wh.open_input(f))
    assert t.schema.equals(TABLES["episodes"].arrow_schema, check_metadata=False)
    assert t.column("episode_id").to_pylist() == sorted(t.column("episode_id").to_pylist())
    assert vacuum(url, grace_s=0)["removed_files"] == 8
    assert len(_objects(url, "steps")) == 1


def test_ingest_into_s3_lands_like_local_and_skips_what_is_there(s3, tmp_path):
    from shopsim_wh.demo import shopsimrl_v4 as synth_v4
    from shopsim_wh.ingest import IngestOptions, ingest

    src = synth_v4.run_dir(tmp_path / "src", spec=synth_v4.RunDirSpec(n_tasks=4, steps=3))
    url = _url()
    first = ingest([src], url, IngestOptions(parallel=False))
    again = ingest([src], url, IngestOptions(parallel=False))
    local = ingest([src], tmp_path / "local", IngestOptions(parallel=False))
    landed = [f for f in first.files if f.status == "landed"]
    assert landed and [f.episodes for f in landed] == [f.episodes for f in local.files if f.status == "landed"]
    assert [f.status for f in again.files if f.format] == ["skipped_same_hash"]
    diff = compare_canonical(tmp_path / "local", url, landed[0].run_id)
    assert set(diff) <= {"runs"}  # a runs row names its own ingest (load_id); every trace row is equal
    assert Warehouse(url).store.staged() == []  # the private staging directory is gone with the writer


def test_a_compaction_that_loses_the_race_to_a_removal_swaps_nothing(s3):
    from shopsim_wh.store.warehouse import CommitConflict

    url = _url()
    with Warehouse(url).writer(grace_s=60) as w:
        w.commit(one_episode_batch("r", 0))
        w.commit(one_episode_batch("r", 1))
    a, b = Warehouse(url), Warehouse(url)
    with a.writer(grace_s=60) as wa, b.writer(grace_s=60) as wb:
        wb.commit([], replace_runs=["r"])  # B drops the run while A is about to compact it
        with pytest.raises(CommitConflict, match="compact it again"):
            wa.compact("r")
    snap = Warehouse(url).snapshot()
    assert snap.run_ids() == set() and snap.version == 3
    live = {e.path for es in snap.tables.values() for e in es} | {i["path"] for i in snap.pending_delete}
    assert set(_objects(url, "steps")) <= live, "A's merged files were left behind"
