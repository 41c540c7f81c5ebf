"""A run never waits without a bound (issue 28; docs/reliability.md, "Leases and time limits").

Journeys: the installed `shopsim-wh run` in a subprocess against the embedded shop served over real loopback HTTP
*without* idempotency keys (as the real ShopSimulator server), through the project's FaultProxy:

* 25% faults of every kind on the environment, 104 episodes, concurrency 8, `environment.exclusive`: the run ends
  by itself, no step is applied twice (the server counts repeats of a request it applied), every slot is free at
  the end, each failed attempt has a stage and a reason, and the next run resumes exactly the failed ones;
* a pool held by another client: each reset waits `lease_timeout_s`, the episode fails at stage `reset` with
  `LeaseTimeout`, the run exits 1 by itself and a later run completes;
* one SIGTERM mid-run while resets are queued for slots: the run stops by itself with 143, holds no lease, and the
  same command resumes it to the end.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time

import httpx
import pytest

from shopsim_wh.engines.db import connect
from shopsim_wh.sim.server import create_app
from shopsim_wh.testing.faultproxy import (
    FAULTS,
    FaultProxy,
    RandomFaults,
    Script,
    steps_applied_twice,
    steps_forwarded,
)

from .conftest import serve_asgi
from .helpers import write_config
from .journeys import CLI, ok, shopsim

EPISODES = 104
SERVER_FAULTS = [f for f in FAULTS if f not in ("400", "401")]  # a refused request is not a lost answer


def stats(url: str) -> dict:
    return httpx.get(url + "/v1/stats", timeout=5).json()


def health(url: str) -> dict:
    return httpx.get(url + "/healthz", timeout=5).json()


@pytest.fixture(scope="module")
def plain():
    """The embedded shop without idempotency keys over loopback HTTP (the real server's behaviour)."""
    app = create_app(idempotency=False, capacity=20)
    with serve_asgi(app) as url:
        yield app, url


def test_faults_on_a_server_without_idempotency_keys_end_the_run_and_leak_no_lease(tmp_path, plain):
    app, url = plain
    assert "idempotency_keys" not in health(url)
    before = stats(url)
    proxy = FaultProxy(url, RandomFaults(0.25, SERVER_FAULTS, seed=4), hold_s=1.0, retry_after="0.05").start()
    cfg = write_config(tmp_path / "c.yaml", tasks={"sample_size": EPISODES},
                       environment={"url": proxy.url, "timeout_s": 0.5, "lease_timeout_s": 3, "exclusive": True},
                       runtime={"concurrency": 8}, output={"warehouse": str(tmp_path / "wh")})
    try:
        first = shopsim("run", cfg, "-q", timeout=240)  # ends by itself: the bound is a failure, not a hang
        injected, log = dict(proxy.injected), list(proxy.log)
        proxy.chooser = None  # the server healthy again, for the resume below
        _assert_bounded_then_resume(first, injected, log, url, before, tmp_path, cfg)
    finally:
        proxy.stop()


def _assert_bounded_then_resume(first, injected, log, url, before, tmp_path, cfg) -> None:
    assert first.returncode == 1, first.stderr  # episodes failed: run the same command again to retry them
    assert "run the same command again" in first.stderr
    # every kind of lost answer happened, on resets too (their lease ids were never seen)
    assert {"reset_after", "timeout", "truncated", "malformed", "reset_before", "500", "503"} <= set(injected)
    after = stats(url)
    # no step applied twice: nothing but its release was sent on a lease after a step's answer was lost there,
    # and the server applied exactly the steps the proxy forwarded (each once)
    assert steps_applied_twice(log) == 0
    applied = (after["interacts"] + after["terminations"]) - (before["interacts"] + before["terminations"])
    assert applied == steps_forwarded(log) > EPISODES
    assert after["resets"] - before["resets"] > EPISODES  # failed episodes were re-run from reset
    h = health(url)
    assert h["free_slots"] == h["environment_slots"] == 20  # lost leases reclaimed (exclusive): no slot leaked
    con = connect(tmp_path / "wh")
    failed = con.execute("select episode_id, error_stage, error_type, error_message from episode_attempts "
                         "where status = 'failed'").fetchall()
    assert failed and all(stage in ("reset", "step", "terminate") and kind and message
                          for _, stage, kind, message in failed)
    assert con.execute("select count(*) from failures").fetchone()[0] == len(failed)
    done = con.execute("select count(*) from episodes where status = 'completed'").fetchone()[0]
    todo = EPISODES - done
    assert todo > 0
    con.close()
    # the next run of the same command (the server healthy again) resumes exactly the episodes not completed
    again = ok(shopsim("run", cfg, "--format", "json", timeout=120))
    doc = json.loads(again.stdout)
    assert (doc["skipped"], doc["attempted"], doc["completed"], doc["failed"]) == (done, todo, todo, 0)
    h = health(url)
    assert h["free_slots"] == h["environment_slots"]


def test_a_pool_held_by_another_client_fails_resets_after_the_lease_timeout(tmp_path):
    app = create_app(idempotency=False, capacity=1)
    with serve_asgi(app) as url:
        other = httpx.post(url + "/api/shop_agent", json={"action": "reset", "idx": app.tasks.tasks[0].task_id},
                           timeout=5).json()["result"]  # another client holds the only slot
        cfg = write_config(tmp_path / "c.yaml", tasks={"sample_size": 2},
                           environment={"url": url, "timeout_s": 2, "lease_timeout_s": 0.5},
                           runtime={"concurrency": 2}, output={"warehouse": str(tmp_path / "wh")})
        res = shopsim("run", cfg, "-q", timeout=120)
        assert res.returncode == 1, res.stderr
        assert "environment.lease_timeout_s" in res.stderr or "release_all" in res.stderr
        con = connect(tmp_path / "wh")
        rows = con.execute("select error_stage, error_type, error_message from episode_attempts").fetchall()
        con.close()
        assert len(rows) == 2  # not re-run in the run: a full pool would only make it wait again
        assert all(stage == "reset" and kind == "LeaseTimeout" and "environment.lease_timeout_s" in msg
                   for stage, kind, msg in rows)
        assert health(url)["free_slots"] == 0  # not exclusive: the other client's lease is left alone
        httpx.post(url + "/api/shop_agent", json={"action": "release_one", "env_idx": other["env_idx"],
                                                  "lease_id": other["lease_id"]}, timeout=5)
        ok(shopsim("run", cfg, "-q", timeout=120))
        h = health(url)
        assert h["free_slots"] == h["environment_slots"] == 1


def test_one_sigterm_stops_a_run_whose_resets_wait_for_slots(tmp_path):
    app = create_app(idempotency=False, capacity=2)
    with serve_asgi(app) as url:
        cfg = write_config(tmp_path / "c.yaml", tasks={"sample_size": 24},
                           model={"extra_body": {"scripted_policy": {"latency_ms": 40}}},
                           environment={"url": url, "timeout_s": 5},  # lease_timeout_s: its default, 600 s
                           runtime={"concurrency": 8}, output={"warehouse": str(tmp_path / "wh")})
        proc = subprocess.Popen([*CLI, "run", str(cfg), "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        try:
            deadline = time.monotonic() + 60
            while not (stats(url)["episodes_done"] >= 2 and stats(url)["waiting_resets"] > 0):
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
                time.sleep(0.02)
            granted = stats(url)["resets"]
            proc.send_signal(signal.SIGTERM)  # once
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 143, err  # 128 + SIGTERM (docs/cli.md)
        assert "interrupted by SIGTERM" in err
        # only the episodes holding a slot were finished; the resets queued for a slot were withdrawn, not served
        assert int(re.search(r"finishing (\d+) episode", err).group(1)) <= 2, err
        con = connect(tmp_path / "wh")
        assert con.execute("select count(*) from episode_attempts").fetchone()[0] <= granted + 2
        con.close()
        s = stats(url)
        assert s["active_leases"] == 0 and s["waiting_resets"] == 0  # the queued resets were withdrawn
        con = connect(tmp_path / "wh")
        committed = con.execute("select count(*) from episodes where status = 'completed'").fetchone()[0]
        con.close()
        assert 0 < committed < 24
        again = ok(shopsim("run", cfg, "-q", timeout=120))
        assert again.returncode == 0
        con = connect(tmp_path / "wh")
        assert con.execute("select count(*) from episodes where status = 'completed'").fetchone()[0] == 24
        con.close()


def test_a_lost_reset_answer_on_a_shared_server_is_reported_not_released_blindly(tmp_path):
    """`shopsim-wh sim serve --no-idempotency-keys` (the real server's behaviour) in its own process; the first
    reset's answer is lost in transit, so that slot's lease id is never seen. Without environment.exclusive the
    run must not send release_all (other clients' sessions would end): it ends, and warns that a slot may still
    be leased, with what to do."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    server = subprocess.Popen([*CLI, "sim", "serve", "--port", str(port), "--capacity", "4", "--no-idempotency-keys"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):  # the server's start-up, bounded
            try:
                if health(url).get("ready"):
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert "idempotency_keys" not in health(url)
        resets = [0]

        def first_reset(req) -> bool:
            if req.action == "reset":
                resets[0] += 1
            return req.action == "reset" and resets[0] == 1

        proxy = FaultProxy(url, Script([(first_reset, "reset_after")])).start()
        try:
            cfg = write_config(tmp_path / "c.yaml", tasks={"sample_size": 4},
                               environment={"url": proxy.url, "timeout_s": 2, "lease_timeout_s": 5},
                               runtime={"concurrency": 2}, output={"warehouse": str(tmp_path / "wh")})
            res = shopsim("run", cfg, "--format", "json", timeout=120)
        finally:
            proxy.stop()
        doc = json.loads(res.stdout)
        assert doc["completed"] == 4 and doc["leases"]["lost"] == 1, doc  # the episode was re-run from reset
        assert "up to 1 environment slot(s) may still be leased" in res.stderr and "release_all" in res.stderr
        assert health(url)["free_slots"] == 3  # the lost slot is still leased: nothing released it blindly
    finally:
        server.terminate()
        server.wait(timeout=30)
