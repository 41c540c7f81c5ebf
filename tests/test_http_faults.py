"""HTTP faults through a real loopback proxy in front of real model and environment servers.

Every fault class on the model side is retried away; on the environment side a step whose outcome is unknown
is repeated only against a server that honours idempotency keys (the embedded one), and is never applied twice;
against a server without them (the real ShopSimulator server) the episode fails and is re-run from reset. The
stored results equal an uninterrupted run with the same seeds; failed attempts are `failures` rows, never rewards.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shopsim_wh.core.config import load_config
from shopsim_wh.engines.db import connect
from shopsim_wh.rollout import runner
from shopsim_wh.sim.server import create_app
from shopsim_wh.testing.faultproxy import FaultProxy, Script
from shopsim_wh.testing.scan import scan_paths, scan_text

from .conftest import REPO, serve_asgi
from .helpers import write_config

N = 6


def interact(n: int):
    """Predicate: the n-th interact request seen by the proxy (1-based)."""
    seen = [0]

    def pred(req) -> bool:
        if req.action != "interact":
            return False
        seen[0] += 1
        return seen[0] == n
    return pred


def lease_interact(n: int, k: int):
    """Predicate: the k-th interact on the n-th lease seen in interacts (1-based); a re-run gets a new lease."""
    leases: dict[str, int] = {}

    def pred(req) -> bool:
        if req.action != "interact":
            return False
        lease = req.json()["lease_id"]
        leases.setdefault(lease, 0)
        leases[lease] += 1
        return list(leases).index(lease) + 1 == n and leases[lease] == k
    return pred


def nth(path_part: str, n: int):
    seen = [0]

    def pred(req) -> bool:
        if path_part not in req.path:
            return False
        seen[0] += 1
        return seen[0] == n
    return pred


def goal_canaries(app) -> list[str]:
    """The opaque per-task token only the private goal holds (docs: sim tasks)."""
    return [t.goal.goal_signature for t in app.tasks.tasks]


def canonical(wh) -> list[tuple]:
    """What a faulted run must reproduce: each episode's final outcome and its action sequence."""
    con = connect(wh)
    eps = con.execute("select episode_id, status, reward, total_actions, purchase_asin from episodes "
                      "where run_id = 't' order by episode_id").fetchall()
    acts = dict(con.execute("select e.episode_id, string_agg(a.action, '|' order by a.step_idx, a.call_idx) "
                            "from episodes e join actions a using (run_id, episode_id, attempt) "
                            "where e.run_id = 't' group by 1").fetchall())
    return [(*e, acts.get(e[0])) for e in eps]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    d = tmp_path_factory.mktemp("base")
    cfg = load_config(write_config(d / "c.yaml", tasks={"sample_size": N}))
    runner.run(cfg, str(d / "wh"))
    return canonical(d / "wh")


@pytest.fixture(scope="module")
def servers():
    idem, plain = create_app(), create_app(idempotency=False)
    with serve_asgi(idem) as u1, serve_asgi(plain) as u2:
        yield {"idempotent": (idem, u1), "plain": (plain, u2)}


def _cfg(tmp_path, model_url="embedded", env_url="embedded", **kw):
    return load_config(write_config(
        tmp_path / "c.yaml", tasks={"sample_size": N},
        model={"base_url": model_url, "timeout_s": 0.3, "retry_backoff_s": 0.01, **kw.pop("model", {})},
        environment={"url": env_url, "timeout_s": 0.3}, **kw))


def test_model_faults_are_retried_and_change_nothing(tmp_path, servers, baseline):
    app, url = servers["idempotent"]
    faults = ["429_retry_after", "429", "500", "503", "reset_before", "reset_after", "timeout", "truncated"]
    proxy = FaultProxy(url + "/v1", Script([(nth("chat/completions", 2 + 3 * i), f) for i, f in enumerate(faults)]),
                       hold_s=0.6, retry_after="0.05")
    with proxy:
        res = runner.run(_cfg(tmp_path, model_url=proxy.url), str(tmp_path / "wh"))
    assert dict(proxy.injected) == dict.fromkeys(faults, 1)
    assert res.completed == N and res.failed == 0
    assert canonical(tmp_path / "wh") == baseline
    assert connect(tmp_path / "wh").execute("select count(*) from failures").fetchone() == (0,)


def test_a_malformed_model_answer_is_the_turns_protocol_error(tmp_path, servers, baseline):
    """ShopSimRL's rule: a 200 that is not JSON is `invalid_json_response` fed back to the model (a turn)."""
    app, url = servers["idempotent"]
    from shopsim_wh.sim.policy import FAILURE_KINDS

    quiet = {"extra_body": {"scripted_policy": {"failure_rates": dict.fromkeys(FAILURE_KINDS, 0.0)}}}
    with FaultProxy(url + "/v1", Script([(nth("chat/completions", 2), "malformed")])) as proxy:
        # the policy's own injected failures off: the one protocol error is the proxy's malformed answer
        res = runner.run(_cfg(tmp_path, model_url=proxy.url, model=quiet), str(tmp_path / "wh"))
    assert res.completed == N
    con = connect(tmp_path / "wh")
    assert con.execute("select protocol_error, count(*) from steps where protocol_error is not null group by 1"
                       ).fetchall() == [("invalid_json_response", 1)]


def test_unknown_step_outcomes_are_replayed_not_reapplied_by_an_idempotent_server(tmp_path, servers, baseline):
    app, url = servers["idempotent"]
    before = dict(app.counters)
    faults = [(interact(2), "reset_after"), (interact(5), "timeout"), (interact(8), "truncated"),
              (interact(11), "malformed"), (interact(14), "503"), (interact(17), "429"),
              (interact(20), "reset_before"), (lambda r: r.action == "reset", "reset_after"),
              (lambda r: r.action == "release_one", "timeout")]
    with FaultProxy(url, Script(faults), hold_s=0.6, retry_after="0.01") as proxy:
        res = runner.run(_cfg(tmp_path, env_url=proxy.url), str(tmp_path / "wh"))
    assert sum(proxy.injected.values()) == len(faults)
    assert res.completed == N and res.failed == 0 and res.reruns == 0
    assert canonical(tmp_path / "wh") == baseline
    con = connect(tmp_path / "wh")
    stored = con.execute("select sum(total_actions) from episodes where run_id = 't'").fetchone()[0]
    applied = app.counters["interacts"] - before["interacts"]
    assert applied == stored  # every step applied exactly once, repeats answered from the reply cache
    assert app.counters["replays"] - before["replays"] >= 5  # reset_after, timeout, truncated, malformed, reset
    assert app.counters["resets"] - before["resets"] == N and app.counters["releases"] - before["releases"] == N
    assert scan_paths([tmp_path / "wh"], goal_canaries(app)) == []


def test_without_idempotency_an_unknown_step_fails_the_episode_which_reruns_from_reset(tmp_path, servers, baseline):
    app, url = servers["plain"]
    before = dict(app.counters)
    # one episode at a time: leases 1, 3, 5, 7, 9 are five episodes' first attempts (2, 4, ... their re-runs);
    # lease 11 is the sixth episode: a 429 (retried: refused, not processed) then a 400 (not re-run in the run)
    faults = [(lease_interact(1, 2), "reset_after"), (lease_interact(3, 2), "timeout"),
              (lease_interact(5, 2), "truncated"), (lease_interact(7, 2), "malformed"), (lease_interact(9, 2), "503"),
              (lease_interact(11, 2), "429"), (lease_interact(11, 3), "400")]
    with FaultProxy(url, Script(faults), hold_s=0.6, retry_after="0.01") as proxy:
        res = runner.run(_cfg(tmp_path, env_url=proxy.url, runtime={"concurrency": 1}), str(tmp_path / "wh"))
    assert dict(proxy.injected) == dict.fromkeys(["reset_after", "timeout", "truncated", "malformed", "503", "429",
                                                  "400"], 1)
    con = connect(tmp_path / "wh")
    # the five unknown outcomes were re-run in the run, the 400 (the server refused the request) was not,
    # the 429 (refused, not processed) was simply retried
    assert res.reruns == 5 and res.failed == 6 and res.completed == N - 1
    stages = con.execute("select error_type, count(*) from episode_attempts where status = 'failed' group by 1 "
                         "order by 1").fetchall()
    assert stages == [("EnvServerError", 2), ("EnvUnavailable", 4)]
    # nothing was sent again on a lease after its step's answer was lost, except its release
    faulted = [e for e in proxy.log if e.fault in ("reset_after", "timeout", "truncated", "malformed")]
    for e in faulted:
        lease = e.body.split(b'"lease_id":')[1][:36]
        later = [x for x in proxy.log[proxy.log.index(e) + 1:] if lease in x.body]
        assert all(b'"release_one"' in x.body for x in later), later
    applied = app.counters["interacts"] - before["interacts"]
    assert applied == sum(1 for e in proxy.log if b'"interact"' in e.body and e.status is not None)
    # infrastructure failures are failures rows, never rewards
    assert con.execute("select count(*) from failures").fetchone() == (6,)
    assert con.execute("select count(*) from episode_attempts where status = 'failed' and reward is not null"
                       ).fetchone() == (0,)
    # the 400 episode is re-run by the next `run` of the same config; then all equals the uninterrupted run
    res2 = runner.run(_cfg(tmp_path, env_url=url), str(tmp_path / "wh"))
    assert res2.skipped == N - 1 and res2.completed == 1
    assert canonical(tmp_path / "wh") == baseline
    assert scan_paths([tmp_path / "wh"], goal_canaries(app)) == []  # also not in any error message or traceback


def test_401_stops_the_run_naming_the_variable_and_the_key_leaks_nowhere(tmp_path, servers):
    app, url = servers["idempotent"]
    key = "sk-canary-7f3a9c1e5b2d4068a1f0"
    cfg_path = write_config(tmp_path / "c.yaml", tasks={"sample_size": 8},
                            model={"base_url": "PROXY", "api_key_env": "SHOPSIM_CANARY_KEY"},
                            runtime={"concurrency": 2}, output={"warehouse": str(tmp_path / "wh")})
    with FaultProxy(url + "/v1", lambda r: "401") as proxy:
        cfg_path.write_text(cfg_path.read_text().replace("PROXY", proxy.url))
        env = {**os.environ, "SHOPSIM_CANARY_KEY": key, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
        p = subprocess.run([sys.executable, "-m", "shopsim_wh.cli.main", "run", str(cfg_path)], env=env,
                           capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr  # a run stopped by its configuration (a bad key): exit 2, docs/cli.md
    assert "SHOPSIM_CANARY_KEY" in p.stderr and "run stopped early" in p.stderr
    assert proxy.injected["401"] <= 2  # stopped: the other episodes never started
    con = connect(tmp_path / "wh")
    assert con.execute("select count(*), count(reward) from episode_attempts").fetchone() == (proxy.injected["401"], 0)
    # the proxy quoted the key back in its 401 body; it reached no file, no traceback and no output
    assert scan_text(p.stdout + p.stderr, [key]) == []
    assert scan_paths([tmp_path / "wh"], [key]) == []
