"""runtime.executor: ray on a real local Ray cluster (2 CPUs, on loopback, started once for the module): a 2-worker
run equals the single-process run row for row; a Ray worker process SIGKILLed mid-run loses nothing it
acknowledged and the resumed run completes it to the same rows; a SIGTERM to the driver drains the workers (a
second signal cancels them); lock waits of a worker never time out; a second invocation of a running experiment
is refused."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
import yaml

from shopsim_wh.core.config import load_config
from shopsim_wh.ops.check import canonical_rows, check
from shopsim_wh.rollout.runner import run
from shopsim_wh.store.warehouse import Warehouse
from shopsim_wh.testing import faults

RUN = "rayrun"
EPISODES = 8


def _config(path: Path, name: str = RUN, latency_ms: int = 20, **runtime) -> Path:
    # 20 ms per model answer (the scripted policy's latency knob): a worker is killed with episodes still to run
    doc = yaml.safe_load(faults.write_job(path, name=name, episodes=EPISODES, concurrency=1,
                                          latency_ms=latency_ms).read_text())
    doc["runtime"].update(runtime)
    path.write_text(yaml.safe_dump(doc))
    return path


def _rows(root: Path) -> dict[str, list[str]]:
    """Canonical rows of every table (`runs.config` without the execution fields: the executor differs)."""
    return canonical_rows(root, RUN)


def _fingerprint(root: Path) -> str:
    return Warehouse(root).read("runs", ["fingerprint"], RUN).column("fingerprint").to_pylist()[0]


@pytest.fixture(scope="module")
def cluster():
    from shopsim_wh.rollout.ray_executor import LOOPBACK_ENV

    for key, value in LOOPBACK_ENV.items():  # before Ray is imported: every socket of the cluster on 127.0.0.1
        os.environ.setdefault(key, value)
    import ray  # in the `test` extra: never skipped

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=150 * 1024 * 1024, log_to_driver=False)
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The single-process run of the config (executor: local)."""
    d = tmp_path_factory.mktemp("ray-ref")
    result = run(load_config(_config(d / "local.yaml")), str(d / "wh"))
    assert result.completed == EPISODES and not result.fatal, result
    return d / "wh"


def test_two_workers_equal_the_single_process_run(cluster, reference, tmp_path):
    cfg = load_config(_config(tmp_path / "ray.yaml", executor="ray", ray_workers=2))
    events, starts = [], []
    result = run(cfg, str(tmp_path / "wh"), progress=events.append, on_start=lambda todo, skipped: starts.append(todo))
    assert (result.completed, result.attempted, result.committed, result.failed, result.fatal) == (8, 8, 8, 0, None)
    assert starts == [EPISODES] and len(events) == EPISODES  # the driver's bar counts every worker's episodes
    assert sorted(e.job.episode_id for e in events) == sorted(json.loads(r)["episode_id"]
                                                            for r in _rows(reference)["episodes"])
    report = check(tmp_path / "wh", tmp_path / "ray.yaml", against=reference)
    assert report.ok and not report.missing and report.acknowledged == EPISODES, report.summary()
    assert report.canonical_diff == {} and _rows(tmp_path / "wh") == _rows(reference)
    assert {"episodes", "steps", "actions", "observations", "messages", "runs"} <= set(_rows(reference))
    assert len(_rows(reference)["steps"]) > EPISODES
    assert _fingerprint(tmp_path / "wh") == _fingerprint(reference)
    ledgers = sorted(p.name.rsplit(".", 2)[-2] for p in (tmp_path / "wh" / "_ledger").glob("*.jsonl"))
    assert ledgers == ["w0", "w1"]  # each worker acknowledged its own commits
    loads = Warehouse(tmp_path / "wh").read("loads", ["status", "episodes_written"], RUN).to_pylist()
    assert [(r["status"], r["episodes_written"]) for r in loads] == [("complete", EPISODES)]
    again = run(cfg, str(tmp_path / "wh"))  # a finished run: every episode skipped, no worker started
    assert (again.skipped, again.attempted) == (EPISODES, 0)


def test_a_killed_worker_loses_nothing_and_the_resume_completes_the_run(cluster, reference, tmp_path, monkeypatch):
    cfg = load_config(_config(tmp_path / "ray.yaml", executor="ray", ray_workers=2))
    # worker 0 SIGKILLs itself when its 3rd of 4 episodes finishes: that one and the 4th were never committed
    monkeypatch.setenv("SHOPSIM_WH_RAY_CRASH", "0:runner.episode_finished:3")
    first = run(cfg, str(tmp_path / "wh"))
    assert first.fatal and "Ray worker 0 died" in first.fatal and "run the same command again" in first.fatal
    at_kill = check(tmp_path / "wh", tmp_path / "ray.yaml")
    assert not (at_kill.lost or at_kill.duplicated or at_kill.partial or at_kill.unreadable), at_kill.summary()
    assert EPISODES // 2 <= EPISODES - len(at_kill.missing) <= EPISODES - 2, at_kill.summary()  # worker 1: all 4
    loads = Warehouse(tmp_path / "wh").read("loads", ["status"], RUN).column("status").to_pylist()
    assert loads == ["interrupted"]

    monkeypatch.delenv("SHOPSIM_WH_RAY_CRASH")
    resumed = run(cfg, str(tmp_path / "wh"))
    assert resumed.fatal is None and resumed.skipped == EPISODES - len(at_kill.missing)
    assert resumed.completed == len(at_kill.missing)
    after = check(tmp_path / "wh", tmp_path / "ray.yaml")
    assert after.ok and not after.missing and after.stored == EPISODES, after.summary()
    assert _rows(tmp_path / "wh") == _rows(reference)


def test_a_worker_waits_for_the_lock_past_the_lock_timeout(tmp_path, monkeypatch):
    """A worker commits through LockPerCommit: it waits as long as another writer holds the lock (here 1.5 s with
    SHOPSIM_WH_LOCK_TIMEOUT_S=0.2, which fails an ordinary second writer)."""
    from shopsim_wh.core.errors import WarehouseLockedError
    from shopsim_wh.core.schema import to_arrow
    from shopsim_wh.rollout.ray_executor import LockPerCommit

    monkeypatch.setenv("SHOPSIM_WH_LOCK_TIMEOUT_S", "0.2")
    wh = Warehouse(tmp_path / "wh")
    row = {"load_id": "l1", "command": "run", "episodes_written": 0, "status": "complete", "tool_version": "t"}
    held, out = threading.Event(), {}

    def holder():
        with wh.writer():
            held.set()
            time.sleep(1.5)

    t = threading.Thread(target=holder)
    t.start()
    held.wait()
    with pytest.raises(WarehouseLockedError):
        with wh.writer():
            pass
    t0 = time.monotonic()
    out["snap"] = LockPerCommit(wh, 0).commit([("loads", "r1", to_arrow("loads", [row]))])
    t.join()
    assert time.monotonic() - t0 > 0.5 and out["snap"].version == 1
    assert wh.read("loads", ["load_id"], "r1").column("load_id").to_pylist() == ["l1"]


def test_a_second_invocation_of_a_running_experiment_is_refused(tmp_path, monkeypatch):
    """A Ray driver holds no warehouse lock while its workers run: the experiment lock keeps a second driver
    (local or Ray) of the same experiment from running the same episodes at the same time."""
    from shopsim_wh.core.errors import WarehouseLockedError
    from shopsim_wh.store.runlock import experiment_lock

    monkeypatch.setenv("SHOPSIM_WH_LOCK_TIMEOUT_S", "0.2")
    cfg = load_config(_config(tmp_path / "local.yaml"))
    with experiment_lock(Warehouse(tmp_path / "wh"), RUN):
        with pytest.raises(WarehouseLockedError, match=f"experiment '{RUN}' is being run by another process"):
            run(cfg, str(tmp_path / "wh"))
    assert not Warehouse(tmp_path / "wh").exists()  # refused before anything was written


def _signalled_run(tmp_path, name: str, second: int | None = None):
    """A 2-worker run (800 ms per model answer, ~3 s an episode: at 100 ms, and at 250 ms under load 5 on 2 cores,
    the workers finished all their episodes before the drain reached them) whose driver gets SIGTERM when the first episode has finished
    (from the progress callback, in the driver's main thread, while its handler is installed), and ``second``
    (a signal number) as soon as the driver announces the drain."""
    import signal

    cfg = load_config(_config(tmp_path / "ray.yaml", name, 800, executor="ray", ray_workers=2))
    before, told = signal.getsignal(signal.SIGTERM), []

    def progress(event) -> None:
        if not told and signal.getsignal(signal.SIGTERM) != before:
            told.append("sent")
            os.kill(os.getpid(), signal.SIGTERM)

    def on_signal(sig: str, in_flight: int) -> None:
        told.append((sig, in_flight))
        if second is not None:
            os.kill(os.getpid(), second)

    result = run(cfg, str(tmp_path / "wh"), progress=progress, on_signal=on_signal)
    assert signal.getsignal(signal.SIGTERM) == before  # the driver's handler is gone again
    assert told[:1] == ["sent"] and told[1][0] == "SIGTERM" and 1 <= told[1][1] <= 2, told  # 2 workers x 1
    assert result.interrupted == "SIGTERM" and result.exit_code == 143
    wh = Warehouse(tmp_path / "wh")
    assert wh.read("loads", ["status"], name).column("status").to_pylist() == ["interrupted"]
    report = check(wh.root, tmp_path / "ray.yaml")
    assert not (report.lost or report.duplicated or report.partial or report.unreadable), report.summary()
    return result, report


def test_sigterm_on_the_driver_drains_the_workers_and_a_local_resume_completes_the_run(cluster, tmp_path):
    """The first SIGTERM: every worker starts nothing new, finishes and commits its episodes in flight, returns."""
    name = "raysigterm"
    first, at_stop = _signalled_run(tmp_path, name)
    stored = EPISODES - len(at_stop.missing)
    # every episode the workers started was finished and committed (none abandoned), and most never started
    assert first.fatal is None and first.failed == 0, first
    assert first.attempted == first.committed == first.completed == stored and 2 <= stored < EPISODES, (first, stored)
    local = load_config(_config(tmp_path / "local.yaml", name, 800))  # resumed by the single-process runner
    resumed = run(local, str(tmp_path / "wh"), concurrency=8)
    assert resumed.interrupted is None and resumed.skipped == stored
    after = check(tmp_path / "wh", tmp_path / "local.yaml")
    assert after.ok and not after.missing and after.stored == EPISODES, after.summary()


def test_a_second_signal_on_the_driver_cancels_the_draining_workers(cluster, tmp_path):
    """SIGINT during the drain: the Ray tasks are cancelled (no worker returns a result), committed ones stay."""
    import signal

    first, at_stop = _signalled_run(tmp_path, "raysigtwice", second=signal.SIGINT)
    assert first.interrupted == "SIGTERM"  # the first signal names the interruption
    assert first.attempted == first.committed == 0, first  # cancelled: no worker returned
    assert EPISODES - len(at_stop.missing) < EPISODES, at_stop.summary()
