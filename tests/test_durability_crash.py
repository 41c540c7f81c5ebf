"""Crash at every named point of the commit path, compaction, vacuum, the runner and ingest (first, second and
last occurrence) in a real child process; the power-loss image of each is resumed and checked against an
uninterrupted run (docs/durability.md). Seeded random SIGKILLs during runs and resumes."""

from __future__ import annotations

import os
import shutil

import pytest

from shopsim_wh.core import crash
from shopsim_wh.demo import shopsimrl_v4 as synth_v4
from shopsim_wh.ingest import IngestOptions, ingest
from shopsim_wh.ops.check import check
from shopsim_wh.store import storage
from shopsim_wh.testing import faults


@pytest.fixture
def tmp_path(tmp_path):
    with faults.scratch(tmp_path) as d:  # /dev/shm when there is one: the faults are emulated, fsync is only latency
        faults.warm(faults.write_job(d / "warm.yaml"))  # forked children inherit the embedded catalog
        yield d


@pytest.fixture
def job(tmp_path, monkeypatch):
    """A warehouse holding an earlier finished run (its compaction left files for vacuum), and a 2-episode job."""
    monkeypatch.setenv("SHOPSIM_WH_GRACE_S", "0")  # replaced files go at the next writer's open: vacuum points fire
    base = tmp_path / "base"
    faults.run_job(faults.write_job(tmp_path / "earlier.yaml", name="earlier"), base)
    return base, faults.write_job(tmp_path / "job.yaml")


def _failures(results):
    return [(r.point, r.occurrence, r.exit_code, r.at_crash.summary(), r.after_resume.summary(),
             r.after_resume.unreadable[:2], r.after_resume.canonical_diff) for r in results if not r.ok]


# the commit path is walked by the (cheaper) ingest job below; bench/bench_durability.py walks every point with the runner
RUNNER_ONLY = [p for p in faults.RUNNER_POINTS if not p.startswith("commit.")] + ["commit.acknowledged"]


def test_runner_crash_points_then_power_loss_resume(tmp_path, job):
    base, cfg = job
    results = faults.crash_matrix(base, cfg, tmp_path / "m", points=RUNNER_ONLY)
    reached = {r.point for r in results}
    assert reached == set(RUNNER_ONLY), f"points the job never reached: {set(RUNNER_ONLY) - reached}"
    assert _failures(results) == []
    assert len(results) > len(RUNNER_ONLY)  # second / last occurrences too


def test_power_loss_catches_a_skipped_fsync(tmp_path, job, monkeypatch):
    """Negative control: without the fsync of each Parquet file before its rename, the power-loss image holds
    a snapshot naming empty files, and the checker says so (the harness can fail)."""
    base, cfg = job
    reference = tmp_path / "reference"
    shutil.copytree(base, reference)
    faults.run_job(cfg, reference)
    monkeypatch.setattr(storage, "fsync_file", lambda path: None)  # the forked child inherits the bug
    r = faults.crash_case(faults.CrashJob(base, cfg, reference), tmp_path / "neg", "commit.acknowledged", 1,
                          resume=lambda: None)  # no resume: check the image as power loss left it
    assert r.exit_code == crash.CRASH_EXIT
    assert r.at_crash.ok  # the process crash alone loses nothing: the page cache still holds the bytes
    image = check(tmp_path / "neg" / "image")
    assert image.unreadable and image.lost and not image.ok
    out = tmp_path / "check.txt"
    assert faults.wait(faults.fork_start(faults.cli("check", "-w", str(tmp_path / "neg" / "image")), output=out)) == 1
    assert "lost 1" in out.read_text() and "integrity check failed" in out.read_text()


N_RECORDS = 4


def _ingest_inputs(tmp_path, n=2):
    files = []
    for k in range(n):
        d = tmp_path / f"src{k}"
        d.mkdir()
        synth_v4.write_file(d / "traces.jsonl", N_RECORDS, steps=2, obs_words=10, think_words=5, task_base=1000 * (k + 1))
        files.append(d / "traces.jsonl")
    return files


def test_commit_path_and_ingest_crash_points(tmp_path):
    """Every step of the commit path (staged, synced, renamed, directory synced, snapshot, CURRENT, acknowledged)
    and of ingest, each at its first, second and last occurrence."""
    files = _ingest_inputs(tmp_path)
    work = tmp_path / "w"
    do = lambda wh: lambda: ingest(files, wh, IngestOptions(flush_every=2, parallel=False))  # noqa: E731
    reference = tmp_path / "reference"
    counts_file = tmp_path / "counts.json"
    assert faults.fork_call(do(reference), {"SHOPSIM_WH_CRASH_COUNTS": str(counts_file)}) == 0
    counts = __import__("json").loads(counts_file.read_text())
    bad = []
    for p in [p for p in crash.POINTS if p.startswith(("ingest.", "commit."))]:
        assert counts.get(p), f"ingest never reached {p}"
        for k in faults.occurrences(counts[p]):
            shutil.rmtree(work, ignore_errors=True)
            wh, image = work / "wh", work / "image"
            code = faults.fork_call(do(wh), {"SHOPSIM_WH_CRASH": f"{p}:{k}", "SHOPSIM_WH_POWERLOSS": str(image)})
            at_crash = check(wh)
            if not image.exists():
                image.mkdir(parents=True)
            ingest(files, image, IngestOptions(parallel=False))
            after = check(image)
            if code != crash.CRASH_EXIT or not at_crash.ok or not after.ok or after.stored != len(files) * N_RECORDS:
                bad.append((p, k, code, at_crash.summary(), after.summary()))
    assert bad == []


def test_random_sigkills_during_runs_and_resumes(tmp_path):
    cfg = faults.write_job(tmp_path / "job.yaml", episodes=3, concurrency=2)
    res = faults.kill_storm(cfg, tmp_path / "wh", kills=2, seed=int(os.environ.get("SHOPSIM_WH_KILL_SEED", "12")))
    assert res.ok, [r.summary() for r in res.reports]
    assert res.kills >= 1
