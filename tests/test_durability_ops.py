"""SIGTERM / SIGINT stop a run gracefully; a full disk stops it cleanly and resume completes after space is freed;
several writers on one warehouse serialise on its lock, a killed writer's lock and files are recovered, readers
see counts that never go down and never a partial episode (docs/durability.md)."""

from __future__ import annotations

import gc
import json
import os
import resource
import signal
import subprocess
import time

import pytest

from shopsim_wh.core import crash
from shopsim_wh.core.errors import WarehouseFullError
from shopsim_wh.demo import shopsimrl_v4 as synth_v4
from shopsim_wh.engines.db import connect
from shopsim_wh.ingest import IngestOptions, ingest
from shopsim_wh.ops.check import check
from shopsim_wh.store.ledger import LEDGER_DIR
from shopsim_wh.store.warehouse import Warehouse
from shopsim_wh.testing import faults


@pytest.fixture
def tmp_path(tmp_path):
    with faults.scratch(tmp_path) as d:
        faults.warm(faults.write_job(d / "warm.yaml"))  # forked children inherit the embedded catalog
        yield d


def _wait_for_ledger(wh, pid, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(f.stat().st_size for f in (wh / LEDGER_DIR).glob("*.jsonl")) if (wh / LEDGER_DIR).is_dir() else False:
            return
        if os.waitpid(pid, os.WNOHANG)[0]:
            raise AssertionError("the run ended before its first commit")
        time.sleep(0.005)
    raise AssertionError("no commit within the timeout")


@pytest.mark.parametrize("sig,code,twice", [(signal.SIGTERM, 143, False), (signal.SIGINT, 130, True)])
def test_a_signal_stops_the_run_gracefully_and_it_resumes(tmp_path, sig, code, twice):
    # 100 ms a model answer: after the first commit the run still has seconds to go when the signal lands
    cfg = faults.write_job(tmp_path / "job.yaml", episodes=4, concurrency=1, latency_ms=100)
    wh, out = tmp_path / "wh", tmp_path / "out.txt"
    pid = faults.fork_start(faults.cli("run", str(cfg), "-w", str(wh)), output=out)
    _wait_for_ledger(wh, pid)
    os.kill(pid, sig)
    if twice:  # a second signal abandons the episodes in flight
        time.sleep(0.01)
        os.kill(pid, sig)
    assert faults.wait(pid) == code, out.read_text()
    text = out.read_text()
    assert f"interrupted by {sig.name}" in text and "run the same command again to resume" in text
    rep = check(wh, cfg)
    assert rep.ok and rep.stray == [] and rep.missing, rep.summary()  # stopped early, nothing half-written
    assert Warehouse(wh).read("loads", ["status"]).column("status").to_pylist() == ["interrupted"]
    faults.run_job(cfg, wh)
    code = faults.wait(faults.fork_start(faults.cli("check", "-w", str(wh), "--plan", str(cfg), "--format", "json"),
                                         output=out))
    doc = json.loads(out.read_text())
    assert code == 0 and doc["ok"] and doc["missing"] == [] and doc["stored"] == 4 and doc["lost"] == [], doc


def _small_fs(tmp_path, size_kb):
    """A tmpfs of size_kb mounted by the test (root), else None (the caller falls back to RLIMIT_FSIZE)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(mnt)], capture_output=True)
    return mnt if r.returncode == 0 else None


def test_disk_full_stops_cleanly_and_resume_completes_after_space_is_freed(tmp_path):
    cfg = faults.write_job(tmp_path / "job.yaml", episodes=6, concurrency=2)
    mnt = _small_fs(tmp_path, 4096)
    out = tmp_path / "out.txt"
    try:
        if mnt is not None:
            print("disk full via a 4 MiB tmpfs mounted by the test")
            wh = mnt / "wh"
            faults.run_job(faults.write_job(tmp_path / "first.yaml", name="first", episodes=1), wh)
            free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
            ballast = mnt / "ballast"
            ballast.write_bytes(b"\0" * max(0, free - 96 * 1024))  # room for about one episode's commit
            env, limit = {}, None
        else:
            print("tmpfs cannot be mounted here: disk full via RLIMIT_FSIZE (16 KiB per file)")
            wh, ballast, env, limit = tmp_path / "wh", None, {}, 16 * 1024

        def go():
            if limit:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
            faults.cli("run", str(cfg), "-w", str(wh))()

        code = faults.wait(faults.fork_start(go, env, output=out))
        text = out.read_text()
        assert code == 2, text
        assert "no space left" in text and "committed" in text and "run the same command again" in text, text
        rep = check(wh, cfg)
        assert rep.ok and rep.stray == [] and rep.missing, (rep.summary(), rep.stray)
        if ballast is not None:
            ballast.unlink()
        faults.run_job(cfg, wh)
        rep = check(wh, cfg)
        assert rep.ok and not rep.missing and rep.stray == [], rep.summary()
        if mnt is not None:  # ingest: the units that fit land, the rest after space is freed
            srcs = []
            for k in range(3):
                (tmp_path / f"src{k}").mkdir()
                synth_v4.write_file(tmp_path / f"src{k}" / "traces.jsonl", 10, steps=3, obs_words=600, think_words=50,
                                     task_base=1000 * (k + 1))
                srcs.append(tmp_path / f"src{k}" / "traces.jsonl")
            free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
            ballast.write_bytes(b"\0" * max(0, free - 160 * 1024))
            with pytest.raises(WarehouseFullError, match="unit\\(s\\) landed before the disk filled") as err:
                ingest(srcs, wh, IngestOptions(parallel=False))
            assert "run the same command again" in str(err.value)
            del err
            rep = check(wh)
            assert rep.ok and rep.stray == [], (rep.summary(), rep.stray)
            ballast.unlink()
            landed_before = rep.stored - 7  # 1 + 6 runner episodes
            assert sum(f.episodes for f in ingest(srcs, wh, IngestOptions(parallel=False)).files) + landed_before == 30
            rep = check(wh)
            assert rep.ok and rep.stored == 37 and rep.stray == [], rep.summary()
    finally:
        if mnt is not None:
            gc.collect()  # a kept traceback holds Arrow's handle on the half-written file
            if subprocess.run(["umount", str(mnt)], check=False).returncode:
                subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_writers_serialise_and_a_killed_writers_lock_and_files_are_recovered(tmp_path):
    wh = tmp_path / "wh"
    a = faults.write_job(tmp_path / "a.yaml", name="a", episodes=2)
    b = faults.write_job(tmp_path / "b.yaml", name="b", episodes=2)
    src = tmp_path / "src"
    src.mkdir()
    synth_v4.write_file(src / "traces.jsonl", 5, steps=2, obs_words=10, think_words=5)
    # a writer killed mid-commit (SIGKILL while it holds the lock, a file placed that no snapshot lists)
    killed = faults.fork_call(lambda: faults.run_job(a, wh),
                              {"SHOPSIM_WH_CRASH": "commit.file_renamed:3", "SHOPSIM_WH_CRASH_MODE": "kill"})
    assert killed == -signal.SIGKILL
    assert check(wh).stray  # its placed file is still there, invisible
    t0 = time.monotonic()
    with Warehouse(wh).writer(timeout_s=5):  # the kernel dropped the dead holder's flock: no wait
        pass
    assert time.monotonic() - t0 < 2
    assert check(wh).stray == []  # the next writer deleted what the dead one left
    # two runners and an ingest at once: one writer at a time, each waits for the lock, all land once
    pids = [faults.fork_start(lambda c=c: faults.run_job(c, wh)) for c in (a, b)]
    pids.append(faults.fork_start(lambda: ingest([src / "traces.jsonl"], wh, IngestOptions(parallel=False))))
    assert [faults.wait(p) for p in pids] == [0, 0, 0]
    for c in (a, b):
        rep = check(wh, c)
        assert rep.ok and not rep.missing, rep.summary()
    assert check(wh).stored == 2 + 2 + 5


def test_readers_never_see_counts_go_down_or_a_partial_episode(tmp_path):
    wh = tmp_path / "wh"
    cfg = faults.write_job(tmp_path / "job.yaml", episodes=6, concurrency=2)
    faults.run_job(faults.write_job(tmp_path / "first.yaml", name="first", episodes=1), wh)
    old = connect(wh)  # a reader opened before the run: its snapshot's files must outlive compaction
    before = old.execute("select count(*) from steps").fetchone()[0]
    pid = faults.fork_start(lambda: faults.run_job(cfg, wh), {"SHOPSIM_WH_GRACE_S": "300"})
    seen, running = [], True
    while running:
        running = not os.waitpid(pid, os.WNOHANG)[0]  # one more look after the run ended
        con = connect(wh, small_table_bytes=0)
        n, partial = con.execute("""
            select (select count(*) from episodes),
                   (select count(*) from episodes e left join (select run_id, episode_id, attempt, count(*) n
                    from steps group by all) s using (run_id, episode_id, attempt)
                    where e.model_steps <> coalesce(s.n, 0))""").fetchone()
        con.close()
        assert partial == 0
        seen.append(n)
    assert seen == sorted(seen) and seen[-1] == 7 and len(seen) >= 2, seen
    assert old.execute("select count(*) from steps").fetchone()[0] == before  # compaction did not break it
    with Warehouse(wh).writer() as w:  # compaction and vacuum (within the grace period) under an open reader
        w.compact("durability")
        w.vacuum()
    assert old.execute("select count(*) from steps").fetchone()[0] == before
    assert check(wh, cfg).ok


def test_crash_point_names_are_checked():
    with pytest.raises(ValueError, match="unknown crash point"):
        crash.arm({"SHOPSIM_WH_CRASH": "commit.nope"})
    crash.arm({})
    assert not crash.ACTIVE
