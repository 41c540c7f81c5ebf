"""A run written in ShopSimRL's own format (runs/<name>/traces.jsonl + manifest.json + summary.json) is ingested and
every figure of its summary.json (shopsimrl-eval-summary-v2) equals ours (view eval_summary) to 1e-12.

The original tool cannot run here and its code may not be copied, so the expected summary is computed by
`reference_summary` below: a clean-room implementation, in this test, of the rules read from the original's
shopsimrl/evaluation.py (summarize_traces) and cli.py (summarize: requested = the manifest's job count):
- the store keeps, per episode_id, the last line that parses; episodes are taken in sorted id order;
- a trace is completed iff schema_version is v4, status is "completed" and final.done is True; every other
  trace is failed, and counts in `errors` under error.type ("unknown" without one);
- over completed traces only: rewards = numeric (not boolean) final.reward; reward_components = per key, the
  mean of every numeric r_* value of final.reward_detail over the traces that have it; success_rate = the
  r_success component; reward_sem = sample standard deviation (n - 1) / sqrt(n), None below 2 rewards;
  steps_mean = mean len(steps); per step: model_steps, protocol_error / policy_failure objects, environment
  objects (total_actions) with action_feedback.valid false (invalid_actions), integer usage prompt / completion /
  total tokens and completion_tokens_details.reasoning_tokens; termination_reasons keyed by
  final.termination_reason ("unknown" without one); duration_ms_mean over numeric duration_ms;
- coverage = completed / requested, 0.0 when nothing was requested.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from shopsim_wh.analytics.summary import eval_summaries, format_summary, summarize
from shopsim_wh.demo.shopsimrl_v4 import RecordSpec, episode_seed, line, manifest, provenance, record
from shopsim_wh.engines.db import connect
from shopsim_wh.ingest import ingest

V4 = "shopsimrl-episode-v4"


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _mean(xs):
    return sum(xs) / len(xs) if xs else None


def _sem(xs):
    if len(xs) < 2:
        return None
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs))


def reference_summary(traces_path: Path, requested: int | None) -> dict:
    """summary.json for a run directory, by the original's rules (see the module docstring)."""
    latest: dict[str, dict] = {}
    for raw in traces_path.read_bytes().splitlines():
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("episode_id"), str):
            latest[rec["episode_id"]] = rec
    traces = [latest[k] for k in sorted(latest)]

    def complete(t):
        return (t.get("schema_version") == V4 and t.get("status") == "completed"
                and isinstance(t.get("final"), dict) and t["final"].get("done") is True)

    done = [t for t in traces if complete(t)]
    rewards, components, steps_per, durations = [], defaultdict(list), [], []
    ends, errors, tokens = Counter(), Counter(), Counter()
    model_steps = protocol = policy = actions = invalid = 0
    for t in done:
        final = t["final"]
        if _number(final.get("reward")):
            rewards.append(float(final["reward"]))
        for k, v in (final.get("reward_detail") or {}).items():
            if k.startswith("r_") and _number(v):
                components[k].append(float(v))
        steps = t.get("steps") or []
        steps_per.append(float(len(steps)))
        if _number(t.get("duration_ms")):
            durations.append(float(t["duration_ms"]))
        ends[str(final.get("termination_reason", "unknown"))] += 1
        for s in steps:
            model_steps += 1
            protocol += isinstance(s.get("protocol_error"), dict)
            policy += isinstance(s.get("policy_failure"), dict)
            env = s.get("environment")
            if isinstance(env, dict):
                actions += 1
                fb = env.get("action_feedback") or {}
                invalid += bool(isinstance(fb, dict) and fb and fb.get("valid") is False)
            usage = (s.get("model") or {}).get("usage") or {}
            for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
                if isinstance(usage.get(k), int) and not isinstance(usage.get(k), bool):
                    tokens[k] += usage[k]
            rt = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
            if isinstance(rt, int) and not isinstance(rt, bool):
                tokens["reasoning_tokens"] += rt
    for t in traces:
        if not complete(t):
            errors[str((t.get("error") or {}).get("type", "unknown"))] += 1
    n = requested if requested is not None else len(traces)
    return {
        "schema_version": "shopsimrl-eval-summary-v2",
        "counts": {"requested": n, "trace_files": len(traces), "completed": len(done),
                   "failed": len(traces) - len(done), "scored": len(rewards),
                   "coverage": len(done) / n if n else 0.0},
        "primary": {"reward_mean": _mean(rewards), "reward_sem": _sem(rewards),
                    "success_rate": _mean(components.get("r_success", []))},
        "reward_components": {k: _mean(v) for k, v in sorted(components.items())},
        "behavior": {"steps_mean": _mean(steps_per), "model_steps": model_steps, "protocol_errors": protocol,
                     "protocol_error_rate": protocol / model_steps if model_steps else None,
                     "policy_failures": policy, "policy_failure_rate": policy / model_steps if model_steps else None,
                     "invalid_action_rate": invalid / actions if actions else None, "invalid_actions": invalid,
                     "total_actions": actions, "termination_reasons": dict(sorted(ends.items()))},
        "cost": {"duration_ms_mean": _mean(durations), "tokens": dict(sorted(tokens.items()))},
        "errors": dict(sorted(errors.items())),
    }


def assert_same(got, want, path="summary"):
    """Same keys everywhere; numbers equal to 1e-12 (relative for large ones), everything else equal."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), (path, got, want)
        for k in want:
            assert_same(got[k], want[k], f"{path}.{k}")
    elif _number(want) and _number(got):
        assert math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-12), (path, got, want)
    else:
        assert got == want, (path, got, want)


def _edit(rec: dict, fn) -> dict:
    fn(rec)
    return rec


def _no_total_tokens(rec):
    for s in rec["steps"]:
        s["model"]["usage"].pop("total_tokens", None)


def _reasoning_tokens(rec):
    for k, s in enumerate(rec["steps"]):
        s["model"]["usage"]["completion_tokens_details"] = {"reasoning_tokens": 40 + k}


def _invalid_click(rec):
    fb = rec["steps"][0]["environment"]["action_feedback"]
    fb.update(valid=False, reason="unavailable_action", message="that value is not on this page")


def _partial_detail(rec):  # a component the server did not report counts in no denominator
    rec["final"]["reward_detail"].pop("r_option")
    rec["final"]["reward_detail"]["r_flag"] = True  # boolean r_* values are not components


def write_run(root: Path, name: str = "val-parity") -> tuple[Path, int]:
    """A run directory in the original's layout with every case the summary distinguishes."""
    seed, split = 20260501, "val"
    task_ids = [100 + 37 * i for i in range(9)]
    jobs = [{"task_id": t, "sample_id": s, "seed": episode_seed(seed, t, s), "split": split}
            for t in task_ids for s in range(2)]
    base = RecordSpec(steps=6, obs_words=20, think_words=10, seed=seed, split=split)
    failed = replace(base, status="failed")
    recs = []
    for i, j in enumerate(jobs[:-2]):  # the last two jobs never ran: requested > trace_files
        t, s = j["task_id"], j["sample_id"]
        mode = i % 8
        if mode == 0:
            recs.append(record(t, s, replace(base, protocol_error_at=2)))
        elif mode == 1:
            recs.append(record(t, s, replace(base, length_failure=True)))
        elif mode == 2:
            recs.append(record(t, s, replace(base, action_limit=True)))
        elif mode == 3:  # two failed attempts, then the retry that completes
            recs += [record(t, s, failed), record(t, s, replace(failed, fail_stage="reset")),
                     _edit(record(t, s, base), _reasoning_tokens)]
        elif mode == 4:  # still failed: its error type counts in `errors`
            recs.append(record(t, s, failed))
        elif mode == 5:
            recs.append(_edit(record(t, s, base), _no_total_tokens))
        elif mode == 6:
            recs.append(_edit(record(t, s, base), _invalid_click))
        else:
            recs.append(_edit(record(t, s, base), _partial_detail))
    recs[1]["duration_ms"] = None  # no duration: left out of duration_ms_mean
    d = root / name
    d.mkdir(parents=True)
    with open(d / "traces.jsonl", "wb") as f:
        for r in recs:
            f.write(line(r))
        f.write(b'{"episode_id": "task-000100__sample-000", "torn')  # a torn last line is no record
    (d / "manifest.json").write_bytes(orjson.dumps(manifest(name, jobs, provenance(skills=True)),
                                                   option=orjson.OPT_INDENT_2))
    return d, len(jobs)


@pytest.fixture(scope="module")
def parity(tmp_path_factory):
    root = tmp_path_factory.mktemp("parity")
    run, requested = write_run(root / "runs")
    want = reference_summary(run / "traces.jsonl", requested)
    (run / "summary.json").write_text(json.dumps({**want, "created_at": "2026-05-01T12:00:00+00:00"}, indent=2))
    ingest([root / "runs"], root / "wh")
    con = connect(root / "wh")
    return con, want, root / "wh"


def test_every_summary_figure_matches_the_original_rules(parity):
    con, want, _ = parity
    got = eval_summaries(con)
    assert len(got) == 1
    (summary,) = got.values()
    assert_same(summary, want)
    # the case mix really exercises every rule
    assert want["counts"]["requested"] > want["counts"]["trace_files"] > want["counts"]["completed"]
    assert want["errors"] and want["behavior"]["policy_failures"] and want["behavior"]["protocol_errors"]
    assert want["behavior"]["invalid_actions"] and "reasoning_tokens" in want["cost"]["tokens"]
    assert "r_flag" not in want["reward_components"] and want["primary"]["reward_sem"] is not None


def test_the_ingested_summary_json_is_the_one_we_reproduce(parity):
    con, want, _ = parity
    prov = json.loads(con.execute("SELECT provenance FROM runs").fetchone()[0])
    stored = {k: v for k, v in prov["summary"].items() if k != "created_at"}
    assert_same(next(iter(eval_summaries(con).values())), stored)


def test_run_metrics_and_eval_summary_share_their_figures(parity):
    con, want, _ = parity
    row = con.execute("SELECT * FROM run_metrics JOIN eval_summary USING (run_id)").fetchone()
    cols = [d[0] for d in con.description]
    m = dict(zip(cols, row, strict=True))
    assert m["primary_reward"] == "r_strict"
    assert m["reward_mean"] == pytest.approx(want["reward_components"]["r_strict"], abs=1e-12)  # reward = r_strict
    assert m["success_rate"] == pytest.approx(want["primary"]["success_rate"], abs=1e-12)
    assert m["mean_model_steps"] == pytest.approx(want["behavior"]["steps_mean"], abs=1e-12)
    for col, comp in (("r_type_mean", "r_type"), ("r_att_mean", "r_att"), ("r_price_mean", "r_price"),
                      ("r_option_mean", "r_option"), ("r_loose_mean", "r_loose"), ("r_strict_mean", "r_strict"),
                      ("r_success_mean", "r_success")):
        assert m[col] == pytest.approx(want["reward_components"][comp], abs=1e-12), col
    text = format_summary(summarize(con))
    assert "reward = r_strict" in text and "policy failures" in text


def test_a_second_run_directory_gets_its_own_row(tmp_path):
    """Two experiments under one runs/ tree: each row is its own run's summary."""
    runs = tmp_path / "runs"
    a, na = write_run(runs, "val-a")
    (b := runs / "val-b").mkdir()
    small = RecordSpec(steps=4, obs_words=10, think_words=5, seed=7)
    recs = [record(100, 0, small), record(137, 0, small)]
    (b / "traces.jsonl").write_bytes(b"".join(line(r) for r in recs))
    ingest([runs], tmp_path / "wh")
    got = eval_summaries(connect(tmp_path / "wh"))
    by_requested = {s["counts"]["requested"]: s for s in got.values()}
    assert_same(by_requested[na], reference_summary(a / "traces.jsonl", na))
    assert_same(by_requested[2], reference_summary(b / "traces.jsonl", None))  # no manifest: requested = traces


def test_synth_run_dir_summary_json_is_reproduced(tmp_path):
    """synth_v4.run_dir writes its summary.json with the v4 writer's own summarize: ours, the reference above and
    that file agree (three implementations of the same rules)."""
    from shopsim_wh.demo.shopsimrl_v4 import RunDirSpec, run_dir

    d = run_dir(tmp_path / "runs", "val-synth",
                RunDirSpec(n_tasks=7, repeats=2, steps=5, obs_words=10, think_words=5))
    written = {k: v for k, v in json.loads((d / "summary.json").read_text()).items() if k != "created_at"}
    ingest([tmp_path / "runs"], tmp_path / "wh")
    (ours,) = eval_summaries(connect(tmp_path / "wh")).values()
    assert_same(ours, written)
    assert_same(ours, reference_summary(d / "traces.jsonl", 14))


def test_summarize_json_prints_the_summary_shape(parity):
    _, want, wh = parity
    out = subprocess.run([sys.executable, "-m", "shopsim_wh.cli.main", "summarize", "--json", "-w", str(wh)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    (summary,) = json.loads(out.stdout).values()
    assert_same(summary, want)


def test_completed_record_without_final_done_counts_as_failed(tmp_path):
    """The original store calls a record complete only when final.done is true (status alone is not enough)."""
    from shopsim_wh.demo.shopsimrl_v4 import RecordSpec, line, record

    run = tmp_path / "runs" / "done-flag"
    run.mkdir(parents=True)
    recs = [record(t, 0, RecordSpec(steps=2, obs_words=3, think_words=1, seed=7, split="val")) for t in (11, 12, 13)]
    recs[1]["final"]["done"] = False
    del recs[2]["final"]["done"]
    assert all(r["status"] == "completed" for r in recs)
    (run / "traces.jsonl").write_bytes(b"".join(line(r) for r in recs))
    ingest([tmp_path / "runs"], tmp_path / "wh")
    con = connect(tmp_path / "wh")
    (run_id,), = con.execute("SELECT run_id FROM runs").fetchall()
    got = con.execute("SELECT completed, failed FROM run_metrics WHERE run_id = ?", [run_id]).fetchone()
    assert got == (1, 2)
    assert con.execute("SELECT completed, failed FROM eval_summary WHERE run_id = ?", [run_id]).fetchone() == (1, 2)
