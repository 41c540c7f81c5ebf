"""bench/soak: the soak table of docs/performance.md, in one command.

    .venv/bin/python bench/soak.py                 # quick: a few minutes on 2 cores
    .venv/bin/python bench/soak.py --episodes 400 --fault-rate 0.3 --kills 1000 --fuzz-records 3000

Legs (each on its own warehouse under a scratch directory):

* **load held**: the embedded simulator (model + shop) served over real loopback HTTP by a separate process;
  one run per concurrency level: episodes/min, p95 of the recorded per-step model latency, peak RSS of
  this (runner) process;
* **HTTP faults**: the same job through two FaultProxy instances (model and environment) injecting every
  fault type at ``--fault-rate`` per request against the idempotent embedded server, resumed with the faults
  still on until every episode completed; compared episode by episode with an uninterrupted run of the same
  seeds. A second leg against a server without idempotency keys (the real server's behaviour) at a tenth of
  the rate: unknown step outcomes fail the episode, which is re-run from reset;
* **plain faults** (``--legs plain-faults``): the issue-28 scenario: a server without idempotency keys (capacity
  20) behind a FaultProxy injecting every server fault at ``--fault-rate`` on the environment, concurrency 8,
  ``--plain-episodes`` episodes, with and without ``environment.exclusive``: the run must end by itself; prints
  episodes completed / failed, steps applied twice (the server's ``applied_twice``, must be 0), leases leaked at
  the end (``environment_slots - free_slots``; 0 with exclusive), wall time, and the resume (faults off);
* **kills, crash points, disk full**: the durability helper's :mod:`shopsim_wh.testing.faults` when this
  build has it (else reported as not available);
* **bad inputs**: :func:`shopsim_wh.testing.badinput.fuzz_ingest` over every reader and class, plus cut-short
  .gz / .zst; hostile SQL through :mod:`shopsim_wh.engines.sandbox` when this build has it;
* **nothing lost**: lost / duplicated / unexpected episodes against the plan (the durability checker when
  present, else the checks below), and the scanner's hits for a canary API key and the private goals'
  tokens in every file written, the captured logs and a failing CLI run's output.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from shopsim_wh.core.config import load_config  # noqa: E402
from shopsim_wh.engines.db import connect  # noqa: E402
from shopsim_wh.rollout import runner  # noqa: E402
from shopsim_wh.sim.tasks import generate_tasks  # noqa: E402
from shopsim_wh.testing import badinput  # noqa: E402
from shopsim_wh.testing.faultproxy import (  # noqa: E402
    FORWARDED_FAULTS,
    FaultProxy,
    RandomFaults,
    steps_applied_twice,
    steps_forwarded,
)
from shopsim_wh.testing.scan import count_files, scan_paths, scan_text  # noqa: E402
from shopsim_wh.testing.servers import free_port  # noqa: E402

CANARY_KEY = "sk-soak-canary-4b1d9e2f7a6c3085"
STORM_FAULTS = ("429_retry_after", "429", "500", "503", "reset_before", *FORWARDED_FAULTS)
MODEL_FAULTS = tuple(f for f in STORM_FAULTS if f != "malformed")  # a garbled 200 is the model's turn (ShopSimRL)
HOSTILE_SQL = [
    "select * from read_csv('/etc/passwd') limit 2", "copy (select 1) to '../outside.csv'",
    "attach '../elsewhere.duckdb' as y", "create table z as select 1", "select * from read_text('/etc/hostname')",
    "select * from glob('/*')", "select * from read_blob('/etc/hostname')", "set enable_external_access = true",
    "pragma version", "export database '/tmp/x'", "call pragma_version()", "install httpfs", "load httpfs",
    "select 1; select 2", "select * from read_parquet('/etc/*.parquet')", "reset lock_configuration",
    "select * from 'file:///etc/passwd'", "detach memory",
]


def job(name: str, episodes: int, concurrency: int, model_url: str, env_url: str, **model) -> dict:
    n_val = 464
    return {"experiment": {"name": name, "seed": 11},
            "tasks": {"split": "val", "sample_size": min(episodes, n_val), "repeats": max(1, -(-episodes // n_val))},
            "model": {"name": "scripted-strong", "base_url": model_url, "checkpoint_id": "soak", "send_seed": True,
                      "timeout_s": 2.0, "retry_backoff_s": 0.05, "max_retries": 8, **model},
            "environment": {"url": env_url, "dialect": "shop_env", "timeout_s": 2.0},
            "runtime": {"max_steps": 30, "concurrency": concurrency}}


def run_job(doc: dict, wh: Path, work: Path):
    path = work / f"{doc['experiment']['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return runner.run(load_config(path), str(wh))


class SimServer:
    """The embedded simulator under uvicorn in a child process (its own core, as a real server would be)."""

    def __init__(self, idempotency: bool = True, capacity: int = 600):
        self.port = free_port()
        code = ("import uvicorn; from shopsim_wh.sim.server import create_app; "
                f"uvicorn.run(create_app(capacity={capacity}, idempotency={idempotency}), host='127.0.0.1', "
                f"port={self.port}, log_level='error', backlog=4096)")
        self.proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)})
        import httpx

        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("the soak's simulator did not start")
            time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def outcomes(wh: Path, run_id: str) -> dict[str, tuple]:
    """Each episode's final outcome and action sequence (what a faulted run must reproduce)."""
    con = connect(wh)
    rows = con.execute(
        "select e.episode_id, e.status, e.reward, e.total_actions, e.purchase_asin, "
        "string_agg(a.action, '|' order by a.step_idx, a.call_idx) from episodes e "
        "left join actions a using (run_id, episode_id, attempt) where e.run_id = ? group by all", [run_id]).fetchall()
    con.close()
    return {r[0]: r[1:] for r in rows}


def integrity(wh: Path, run_id: str, planned: set[str]) -> dict[str, int]:
    """lost (planned, not completed), duplicated (an attempt stored twice, or completed twice), unexpected."""
    con = connect(wh)
    dup = con.execute("select count(*) from (select episode_id, attempt from episode_attempts where run_id = ? "
                      "group by all having count(*) > 1)", [run_id]).fetchone()[0]
    dup += con.execute("select count(*) from (select episode_id from episode_attempts where run_id = ? and "
                       "status = 'completed' and done group by 1 having count(*) > 1)", [run_id]).fetchone()[0]
    done = {r[0] for r in con.execute("select episode_id from episodes where run_id = ? and status = 'completed'",
                                      [run_id]).fetchall()}
    stored = {r[0] for r in con.execute("select distinct episode_id from episode_attempts where run_id = ?",
                                        [run_id]).fetchall()}
    fail_rewards = con.execute("select count(*) from episode_attempts where run_id = ? and status = 'failed' and "
                               "reward is not null", [run_id]).fetchone()[0]
    con.close()
    return {"lost": len(planned - done), "duplicated": dup, "unexpected": len(stored - planned),
            "failed_with_reward": fail_rewards}


def durability_check(wh: Path, config: Path | None) -> dict | None:
    try:
        from shopsim_wh.ops.check import check
    except ImportError:
        return None
    r = check(wh, config)
    return {"lost": len(r.lost), "duplicated": len(r.duplicated), "unexpected": len(r.unexpected),
            "partial": len(r.partial)}


def until_complete(doc: dict, wh: Path, work: Path, max_runs: int = 25) -> tuple[int, float]:
    """Run (resume) the job until every planned episode completed; (runs it took, seconds)."""
    runs, t0 = 0, time.perf_counter()
    while runs < max_runs:
        res = run_job(doc, wh, work)
        runs += 1
        if res.fatal:
            raise RuntimeError(res.fatal)
        con = connect(wh)
        n = con.execute("select count(*) from episodes where run_id = ? and status = 'completed'",
                        [doc["experiment"]["name"]]).fetchone()[0]
        con.close()
        if n == res.planned:
            break
    return runs, time.perf_counter() - t0


def leg_load(args, work: Path, out: dict) -> None:
    server = SimServer()
    try:
        for c in args.levels:
            n = max(args.episodes, c)
            wh = work / f"load{c}"
            doc = job(f"load-c{c}", n, c, server.url + "/v1", server.url, timeout_s=120.0)
            doc["environment"]["timeout_s"] = 120.0  # load, not faults: a slow answer is not a failure here
            t0 = time.perf_counter()
            res = run_job(doc, wh, work)
            secs = time.perf_counter() - t0
            con = connect(wh)
            p95 = con.execute("select quantile_cont(latency_ms, 0.95) from steps where run_id = ?",
                              [doc["experiment"]["name"]]).fetchone()[0]
            con.close()
            out["load"].append({"concurrency": c, "episodes": res.attempted, "completed": res.completed,
                                "episodes_per_min": round(res.completed / secs * 60, 1), "p95_step_ms": round(p95, 1),
                                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)})
            log(f"load c={c}: {out['load'][-1]}")
    finally:
        server.close()


def leg_http(args, work: Path, out: dict) -> None:
    faults = Counter()
    for idempotent in (True, False):
        rate = args.fault_rate if idempotent else args.fault_rate / 10
        server = SimServer(idempotency=idempotent)
        name = "faults-idem" if idempotent else "faults-plain"
        try:
            base = job(name, args.fault_episodes, 16, server.url + "/v1", server.url)
            run_job(base, work / f"{name}-base", work)
            mproxy = FaultProxy(server.url + "/v1", RandomFaults(rate, MODEL_FAULTS, seed=1) if idempotent else None,
                                hold_s=2.5, retry_after="0.2", keep_log=False).start()
            eproxy = FaultProxy(server.url, RandomFaults(rate, STORM_FAULTS, seed=2), hold_s=2.5, retry_after="0.2",
                                keep_log=False).start()
            try:
                doc = job(name, args.fault_episodes, 16, mproxy.url, eproxy.url, api_key_env="SOAK_CANARY_KEY")
                runs, secs = until_complete(doc, work / name, work)
            finally:
                mproxy.stop()
                eproxy.stop()
            faults.update({f"model {k}": v for k, v in mproxy.injected.items()})
            faults.update({f"env {k}": v for k, v in eproxy.injected.items()})
            a, b = outcomes(work / f"{name}-base", name), outcomes(work / name, name)
            planned = set(a)
            leg = {"rate": rate, "idempotent_server": idempotent, "runs": runs, "seconds": round(secs, 1),
                   "injected": sum(mproxy.injected.values()) + sum(eproxy.injected.values()),
                   "differ_from_uninterrupted": sum(1 for k in planned if a.get(k) != b.get(k)),
                   **integrity(work / name, name, planned),
                   "checker": durability_check(work / name, work / f"{name}.yaml")}
            out["http"].append(leg)
            log(f"http {name}: {leg}")
        finally:
            server.close()
    out["http_faults"] = dict(sorted(faults.items()))


def leg_plain_faults(args, work: Path, out: dict) -> None:
    import httpx

    faults = [f for f in STORM_FAULTS if f not in ("400", "401")]
    for exclusive in (True, False):
        server = SimServer(idempotency=False, capacity=20)
        name = f"plain-{'exclusive' if exclusive else 'shared'}"
        try:
            proxy = FaultProxy(server.url, RandomFaults(args.fault_rate, faults, seed=3), hold_s=1.0,
                               retry_after="0.05").start()
            try:
                doc = job(name, args.plain_episodes, 8, "embedded", proxy.url)
                doc["environment"].update(timeout_s=0.5, lease_timeout_s=5.0, exclusive=exclusive)
                t0 = time.perf_counter()
                res = run_job(doc, work / name, work)
                secs = time.perf_counter() - t0
                stats = httpx.get(server.url + "/v1/stats", timeout=5).json()
                health = httpx.get(server.url + "/healthz", timeout=5).json()
                leg = {"exclusive": exclusive, "rate": args.fault_rate, "episodes": res.planned,
                       "completed": res.completed, "failed_episodes": res.planned - res.completed,
                       "failed_attempts": res.failed, "reruns": res.reruns,
                       # sent again on a lease after a step's answer was lost there; and the server's applied steps
                       # minus the steps the proxy forwarded (each forwarded once): both must be 0
                       "applied_twice": steps_applied_twice(proxy.log),
                       "applied_not_forwarded": stats["interacts"] + stats["terminations"] - steps_forwarded(proxy.log),
                       "leaked_leases": health["environment_slots"] - health["free_slots"],
                       "lost_resets_unreclaimed": res.leases.get("lost", 0),
                       "reclaimed": res.leases.get("reclaimed", 0), "seconds": round(secs, 1),
                       "injected": sum(proxy.injected.values())}
                if exclusive:  # the failed episodes resume on the next run (the faults off)
                    proxy.chooser = None
                    t0 = time.perf_counter()
                    again = run_job(doc, work / name, work)
                    leg["resume"] = {"attempted": again.attempted, "completed": again.completed,
                                     "seconds": round(time.perf_counter() - t0, 1)}
            finally:
                proxy.stop()
            out["plain"].append(leg)
            log(f"plain faults {name}: {leg}")
        finally:
            server.close()


def leg_durability(args, work: Path, out: dict) -> None:
    try:
        from shopsim_wh.testing import faults as dfaults
    except ImportError:
        out["durability"] = None
        return
    from shopsim_wh.core import crash

    cfg = dfaults.write_job(work / "dur.yaml", name="durability", episodes=2, concurrency=1)
    base = work / "dur-base"
    base.mkdir()
    t0 = time.perf_counter()
    cases = dfaults.crash_matrix(base, cfg, work / "crash")
    log(f"crash matrix: {len(cases)} cases in {time.perf_counter() - t0:.0f} s")
    # the storm's job must outlast the kills (it stops early when a resume finishes the job first)
    # (a start commits ~1.5 episodes before its kill here: size the job at ~2 episodes per kill, repeating the
    # 464 val tasks as needed, so the storm is not cut short by the job finishing)
    want = max(20, 2 * args.kills)
    storm_cfg = dfaults.write_job(work / "storm.yaml", name="storm", episodes=min(464, want),
                                  repeats=-(-want // 464), concurrency=4)
    t0 = time.perf_counter()

    def tick(res) -> None:
        if res.resumes % 50 == 0:
            log(f"kill storm: {res.kills} kills, {res.resumes} starts, {time.perf_counter() - t0:.0f} s")

    storm = dfaults.kill_storm(storm_cfg, work / "dur-storm", kills=args.kills, seed=7, max_delay_s=args.kill_delay,
                               progress=tick)
    log(f"kill storm: {storm.kills} kills in {time.perf_counter() - t0:.0f} s")
    out["durability"] = {"crash_points": len({c.point for c in cases}), "points_declared": len(crash.POINTS),
                         "crash_cases": len(cases), "crash_cases_ok": sum(c.ok for c in cases), "kills": storm.kills,
                         "kills_asked": args.kills,
                         "resumes": storm.resumes, "storm_ok": storm.ok,
                         "check": durability_check(work / "dur-storm", storm_cfg)}


def leg_inputs(args, work: Path, out: dict) -> None:
    rng = random.Random(5)
    cases = [(r, badinput.random_plan(rng, args.fuzz_records), None) for r in badinput.READERS]
    cases += [(r, [("good", 0)] * 40 + [("nul_byte", 0), ("good", 0)] * 3, k)
              for r in badinput.READERS for k in ("gzip", "zstd")]
    t0 = time.perf_counter()
    res = badinput.fuzz_ingest(cases, work / "fuzz")
    out["inputs"] = {"records": dict(sorted(res.records.items())), "files": res.files, "problems": res.problems,
                     "seconds": round(time.perf_counter() - t0, 1)}
    try:
        from shopsim_wh.engines import sandbox
    except ImportError:
        out["sql"] = None
        return
    con = sandbox.connect(work / "fuzz" / "wh")
    refused = 0
    for q in HOSTILE_SQL:
        try:
            sandbox.execute(con, q)
        except Exception:  # noqa: BLE001 - any refusal counts; a success is the failure we report
            refused += 1
    out["sql"] = {"cases": len(HOSTILE_SQL), "refused": refused}


def leg_secrets(work: Path, logs: str, out: dict) -> None:
    goals = [t.goal.goal_signature for t in generate_tasks(0).tasks]
    server = SimServer()
    try:  # a failing CLI run (401 that quotes the key back) whose stdout / stderr are scanned too
        with FaultProxy(server.url + "/v1", lambda r: "401") as proxy:
            doc = job("secrets-401", 4, 2, proxy.url, server.url, api_key_env="SOAK_CANARY_KEY")
            doc["output"] = {"warehouse": str(work / "secrets")}
            (work / "s.yaml").write_text(yaml.safe_dump(doc))
            p = subprocess.run([sys.executable, "-m", "shopsim_wh.cli.main", "run", str(work / "s.yaml")],
                               capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        server.close()
    text = logs + p.stdout + p.stderr
    hits_key = scan_paths([work], [CANARY_KEY]) + scan_text(text, [CANARY_KEY])
    hits_goal = scan_paths([work], goals) + scan_text(text, goals)
    out["secrets"] = {"files_scanned": count_files([work]), "key_hits": len(hits_key), "goal_hits": len(hits_goal),
                      "cli_401_exit": p.returncode, "cli_names_variable": "SOAK_CANARY_KEY" in p.stderr,
                      "examples": [str(h) for h in (hits_key + hits_goal)[:5]]}


def log(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def table(out: dict) -> str:
    lines = ["| | |", "| --- | --- |"]
    for row in out["load"]:
        lines.append(f"| load held, concurrency {row['concurrency']} | {row['episodes_per_min']} episodes/min "
                     f"({row['completed']}/{row['episodes']} completed), p95 step {row['p95_step_ms']} ms, "
                     f"peak RSS {row['peak_rss_mb']} MB |")
    d = out.get("durability")
    if d:
        lines.append(f"| crash points covered | {d['crash_points']} of {d['points_declared']} points reached by the "
                     f"job, {d['crash_cases_ok']}/{d['crash_cases']} cases (first, second, last occurrence, power-loss "
                     "image) resumed and checked clean |")
        lines.append(f"| kills | {d['kills']} of {d['kills_asked']} SIGKILLs (resumes killed too), {d['resumes']} starts, "
                     f"all checks clean: {d['storm_ok']} |")
        lines.append("| disk-full events | tests/test_durability_ops.py (a 4 MiB tmpfs): not repeated by the soak |")
    elif "durability" not in out["legs"]:
        lines.append("| crash points, kills, disk full | leg not run (--legs) |")
    else:
        lines.append("| crash points, kills, disk full | not in this build (durability branch not merged) |")
    faults = ", ".join(f"{k} {v}" for k, v in out["http_faults"].items())
    lines.append(f"| HTTP faults injected | {faults or 'leg not run (--legs)'} |")
    for leg in out["http"]:
        kind = "idempotent server" if leg["idempotent_server"] else "server without idempotency keys"
        lines.append(f"| HTTP faults at {leg['rate']:.0%}, {kind} | {leg['injected']} injected, {leg['runs']} run(s) "
                     f"to complete, {leg['differ_from_uninterrupted']} episodes differ from the uninterrupted run |")
    for leg in out.get("plain", []):
        kind = "exclusive" if leg["exclusive"] else "shared (no release_all)"
        resume = leg.get("resume")
        lines.append(f"| faults at {leg['rate']:.0%}, server without idempotency keys, {kind} | run ended by itself in "
                     f"{leg['seconds']} s: {leg['completed']} completed, {leg['failed_episodes']} failed of "
                     f"{leg['episodes']}; steps applied twice {leg['applied_twice']}, leases leaked "
                     f"{leg['leaked_leases']}" + (f"; resume completed {resume['completed']}/{resume['attempted']} "
                                                  f"in {resume['seconds']} s" if resume else "") + " |")
    recs = ", ".join(f"{k} {v}" for k, v in out["inputs"]["records"].items())
    lines.append(f"| bad inputs tried | {recs} ({out['inputs']['files']} files, 5 readers); "
                 f"{len(out['inputs']['problems'])} problems |")
    sql = out.get("sql")
    lines.append(f"| SQL and injection cases | {sql['refused']}/{sql['cases']} refused |" if sql else
                 "| SQL and injection cases | not in this build (sandbox branch not merged) |")
    lost = sum(leg["lost"] for leg in out["http"])
    dup = sum(leg["duplicated"] for leg in out["http"])
    unexp = sum(leg["unexpected"] for leg in out["http"])
    reward = sum(leg["failed_with_reward"] for leg in out["http"])
    checks = [leg["checker"] for leg in out["http"] if leg.get("checker")] + ([d["check"]] if d and d.get("check") else [])
    for c in checks:  # the durability checker (ledger vs stored vs plan), where this build has it
        lost, dup, unexp = lost + c["lost"], dup + c["duplicated"], unexp + c["unexpected"]
    s = out["secrets"]
    lines.append(f"| nothing lost | lost {lost}, duplicated {dup}, unexpected {unexp} episodes; failed attempts with "
                 f"a reward {reward} |")
    lines.append(f"| nothing leaked | secret hits {s['key_hits']}, goal hits {s['goal_hits']} "
                 f"({s['files_scanned']} files decoded, logs and a failing CLI run's output) |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--levels", default="4,32,64,256", help="concurrency levels of the load leg")
    ap.add_argument("--episodes", type=int, default=32, help="episodes per load level (at least the level)")
    ap.add_argument("--fault-rate", type=float, default=0.3, help="HTTP fault probability per request")
    ap.add_argument("--fault-episodes", type=int, default=24)
    ap.add_argument("--plain-episodes", type=int, default=104, help="episodes of the plain-faults leg")
    ap.add_argument("--kills", type=int, default=20, help="SIGKILLs of the kill storm (durability build)")
    ap.add_argument("--kill-delay", type=float, default=1.0, help="longest run before each SIGKILL (seconds)")
    ap.add_argument("--fuzz-records", type=int, default=400, help="random records per reader")
    ap.add_argument("--legs", default="load,http,plain-faults,durability,inputs", help="which legs to run (comma-separated)")
    ap.add_argument("--format", choices=["table", "json"], default="table")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = ap.parse_args()
    args.levels = [int(x) for x in args.levels.split(",")]
    os.environ["SOAK_CANARY_KEY"] = CANARY_KEY
    captured = io.StringIO()
    handler = logging.StreamHandler(captured)
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)
    work = Path(tempfile.mkdtemp(prefix="shopsim-soak-"))
    out: dict = {"load": [], "http": [], "plain": [], "args": {k: v for k, v in vars(args).items() if k != "format"}}
    t0 = time.perf_counter()
    legs = set(args.legs.split(","))
    out["legs"] = sorted(legs)
    out.update(http_faults={}, inputs={"records": {}, "files": 0, "problems": []}, durability=None, sql=None)
    try:
        for name, leg in (("load", leg_load), ("http", leg_http), ("plain-faults", leg_plain_faults),
                          ("durability", leg_durability), ("inputs", leg_inputs)):
            if name in legs:
                leg(args, work, out)
        leg_secrets(work, captured.getvalue(), out)  # always: it scans what the other legs wrote
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, indent=1, default=str) if args.format == "json" else table(out))
    d = out.get("durability")
    bad = out["inputs"]["problems"] or out["secrets"]["key_hits"] or out["secrets"]["goal_hits"] or any(
        leg["lost"] or leg["duplicated"] or leg["unexpected"] or leg["failed_with_reward"] or leg["differ_from_uninterrupted"]
        or (leg.get("checker") and any(leg["checker"].values())) for leg in out["http"]) or (
        d is not None and not (d["storm_ok"] and d["crash_cases_ok"] == d["crash_cases"])) or any(
        leg["applied_twice"] or leg["applied_not_forwarded"] or (leg["exclusive"] and leg["leaked_leases"])
        for leg in out["plain"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
