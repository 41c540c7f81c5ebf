"""shopsimrl-episode-v4 in the real runtime's shape: run directories, attempts, privacy, columns, round trips.

Fixtures come from our own writer (``shopsim_wh.demo.shopsimrl_v4``), which writes records exactly as
ShopSimRL's ``runtime.py`` / ``store.py`` (and ``slime_runtime.py``) do; nothing of that repository is copied.
"""

from __future__ import annotations

import json
from collections import defaultdict

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shopsim_wh.demo import shopsimrl_v4 as synth_v4
from shopsim_wh.engines.db import connect
from shopsim_wh.ingest import IngestOptions, dump_episode, ingest
from shopsim_wh.ingest.dump import dump_run
from shopsim_wh.ingest.dump_v4 import is_complete, summarize

TABLES = ("runs", "episodes", "agents", "steps", "actions", "observations", "messages", "tools", "skills_selected",
          "failures", "ingest_errors", "import_fidelity")


def rec(task_id, sample_id=0, **kw):
    return synth_v4.record(task_id, sample_id, synth_v4.RecordSpec(steps=kw.pop("steps", 6), obs_words=8, think_words=6,
                                                                   **kw))


def write(path, records, tail=b""):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(synth_v4.line(r) for r in records) + tail)
    return path


def without_goal(o):
    """What a dump can give back: the record minus every private-goal field (never stored anywhere)."""
    if isinstance(o, dict):
        return {k: without_goal(v) for k, v in o.items() if k not in ("goal", "private_task_instruction")}
    if isinstance(o, list):
        return [without_goal(x) for x in o]
    return o


def store_latest(path):
    """The ShopSimRL store's resume view of a traces.jsonl: per episode_id, the last line that parses."""
    latest = {}
    for raw in path.read_bytes().splitlines():
        try:
            r = json.loads(raw)
        except ValueError:
            continue
        if isinstance(r, dict) and isinstance(r.get("episode_id"), str):
            latest[r["episode_id"]] = r
    return latest


@pytest.fixture()
def run(tmp_path):
    d = synth_v4.run_dir(tmp_path / "runs", "val-qwen3-8b")
    s = ingest([tmp_path / "runs"], tmp_path / "wh")
    return tmp_path, d, s


def test_run_directory_lands_every_record(run):
    tmp, d, s = run
    lines = (d / "traces.jsonl").read_bytes().count(b"\n")
    unit = [f for f in s.files if f.status == "landed"]
    assert len(unit) == 1 and unit[0].attempts == lines == 9 and unit[0].episodes == 6 and unit[0].rejected == 0
    assert sorted((f.path.rsplit("/", 1)[1], f.status) for f in s.files) == [("traces.jsonl", "landed")]
    con = connect(tmp / "wh")
    assert con.execute("select count(*) from ingest_errors").fetchone() == (0,)
    r = con.execute("select experiment, planned_episodes, model_name, checkpoint_id, primary_reward, environment_version, "
                    "observation_version, action_limit, prompt_hash is not null, provenance from runs").fetchone()
    assert r[:9] == ("val-qwen3-8b", 6, "qwen3-8b", "ckpt-000100", "r_strict", synth_v4.ENV_VERSION,
                     "shopping-observation-v7", 30, True)
    prov = json.loads(r[9])
    man = json.loads((d / "manifest.json").read_text())
    assert prov["manifest"]["plan_fingerprint"] == man["plan_fingerprint"] == synth_v4.fingerprint(man["plan"])
    assert prov["manifest"]["plan"]["jobs"] == man["plan"]["jobs"]
    assert prov["summary"] == json.loads((d / "summary.json").read_text())
    # the episodes view keeps the last attempt: the store's last parseable line per episode_id
    latest = store_latest(d / "traces.jsonl")
    got = dict(con.execute("select episode_id, status from episodes").fetchall())
    assert got == {k: v["status"] for k, v in latest.items()}
    assert con.execute("select count(*) from episode_attempts").fetchone() == (9,)
    assert con.execute("select stage, exception_type from failures order by episode_id, attempt").fetchall() == [
        ("environment_step_4", "ShopSimulatorError"), ("reset", "ShopSimulatorError"), ("reset", "ShopSimulatorError")]
    fid = con.execute("select sum(records_total), sum(converted), sum(dropped) from import_fidelity").fetchone()
    assert fid == (9, 9, 0)


def test_columns_hold_the_record(run):
    tmp, d, _ = run
    con = connect(tmp / "wh")
    recs = [json.loads(x) for x in (d / "traces.jsonl").read_text().splitlines()]
    r = next(x for x in recs if x["episode_id"] == "task-000100__sample-000")  # protocol error at step 2, purchase
    eid = r["episode_id"]
    steps = con.execute("select step_idx, page, protocol_error, protocol_feedback, reasoning, tokens_in, prompt_msg_count "
                        "from steps where episode_id = ? order by step_idx", [eid]).fetchall()
    assert [s[0] for s in steps] == [x["step_index"] - 1 for x in r["steps"]]  # step_idx = step_index - 1
    assert steps[0][1] == r["reset"]["observation_state"]["page_type"]
    pe = next(x for x in r["steps"] if "protocol_error" in x)
    row = steps[pe["step_index"] - 1]
    assert row[2] == pe["protocol_error"]["code"] and json.loads(row[3]) == pe["protocol_feedback"]
    assert [s[4] for s in steps] == [x["model"]["reasoning"] for x in r["steps"]]
    assert [s[5] for s in steps] == [x["model"]["usage"]["prompt_tokens"] for x in r["steps"]]
    # prompt_msg_count: the conversation prefix the model was sent at that turn
    for s, x in zip(steps, r["steps"], strict=True):
        sent = r["conversation"][: s[6]]
        assert sent[-1]["role"] in ("user", "tool") and x["observation"] in [m["content"] for m in sent]
        assert x["step_index"] == 1 or sent[-1]["content"] != x["observation"] or sent[-1]["role"] == "tool"
    calls = con.execute("select step_idx, call_idx, call_id, tool_name, arguments, action, action_valid, feedback_code "
                        "from actions where episode_id = ? and action_type = 'tool_use' order by 1, 2", [eid]).fetchall()
    want = [(x["step_index"] - 1, j, c["call_id"], c["name"], c["raw_arguments"], x["action"] if j == 0 else None)
            for x in r["steps"] for j, c in enumerate(x["model"]["tool_calls"])]
    assert [c[:6] for c in calls] == want
    assert all(c[6] is False and c[7] == "tool_call_count" for c in calls if c[0] == pe["step_index"] - 1)
    obs = con.execute("select step_idx, content, page, reward, done, payload from observations "
                      "where episode_id = ? and observation_type = 'environment' order by 1", [eid]).fetchall()
    envs = [x for x in r["steps"] if x["environment"]]
    assert [o[1] for o in obs] == [x["environment"]["observation"] for x in envs]
    assert [o[2] for o in obs] == [x["environment"]["observation_state"]["page_type"] for x in envs]
    assert obs[-1][3:5] == (r["final"]["reward"], True)
    assert json.loads(obs[0][5])["action_feedback"] == envs[0]["environment"]["action_feedback"]
    e = con.execute("select reward, r_loose, r_strict, r_success, reward_derived, purchase_asin, termination_reason, "
                    "instruction, persona, reset_payload, skill_ids, model_steps, protocol_errors, total_actions, "
                    "duration_s from episodes where episode_id = ?", [eid]).fetchone()
    det = r["final"]["reward_detail"]
    assert e[:7] == (r["final"]["reward"], det["r_loose"], det["r_strict"], det["r_success"], False,
                     r["final"]["purchase"]["asin"], "purchase")
    assert e[7] == r["reset"]["task_instruction"] and json.loads(e[8]) == r["reset"]["user_persona"]
    assert json.loads(e[9]) == r["reset"]
    assert json.loads(e[10]) == [s["skill_id"] for s in r["selected_skills"]]
    assert e[11:14] == (len(r["steps"]), 1, len(envs))
    assert e[14] == pytest.approx(r["duration_ms"] / 1000)
    assert con.execute("select count(*) from messages where episode_id = ?", [eid]).fetchone() == (len(r["conversation"]),)
    assert con.execute("select skill_id, content_hash from skills_selected where episode_id = ? order by 1", [eid]).fetchall() == [
        (s["skill_id"], s["content_sha256"]) for s in sorted(r["selected_skills"], key=lambda k: k["skill_id"])]
    names = {t["function"]["name"] for x in r["steps"] for t in x["tools"]}
    assert {n for (n,) in con.execute("select distinct name from tools where episode_id = ?", [eid]).fetchall()} == names
    # runtime terminations: a terminate action and the terminal answer
    term = con.execute("select e.episode_id, a.action, o.payload from actions a join observations o using "
                       "(run_id, episode_id, attempt, step_idx) join episodes e using (run_id, episode_id, attempt) "
                       "where a.action_type = 'terminate' and o.observation_type = 'terminal' order by 1").fetchall()
    assert [(t[0], t[1]) for t in term] == [("task-000137__sample-000", "terminate[generation_length]"),
                                            ("task-000174__sample-000", "terminate[action_limit]")]
    assert json.loads(term[0][2])["termination_reason"] == "generation_length"


def test_private_goal_is_nowhere(tmp_path):
    records = [rec(1, goal_in_reset=True), rec(2), rec(3, length_failure=True)]
    f = write(tmp_path / "runs" / "x" / "traces.jsonl", records)
    ingest([f], tmp_path / "wh")
    con = connect(tmp_path / "wh")
    assert all(r["final"]["goal"] for r in records)  # the input does carry it
    for table in TABLES:
        text = str(con.execute(f"select * from stg_{table}").fetchall())
        assert "SECRET" not in text, table
        assert "goal_options" not in text and "instruction_text" not in text, table
    prov = json.loads(con.execute("select provenance from runs").fetchone()[0])
    assert prov["v4"]["private_goals_stripped"] >= 4
    rows = dict(con.execute("select task_id, right_product from episodes").fetchall())
    for r in records:
        bought = r["final"]["purchase"].get("asin")
        assert rows[r["job"]["task_id"]] == (bought == r["final"]["goal"]["asin"])


def test_round_trip_run_directory(run):
    """ingest -> dump_run: every record JSON-equal to its input line, attempt by attempt. What differs, and why:
    every ``goal`` field (final, the steps' environment answers) is absent, because the private goal is never
    stored; and lines of *different* episodes come out ordered by (episode_id, attempt), not in their original
    interleaving (the store's rules depend only on the order within one episode_id, which is kept)."""
    tmp, d, _ = run
    con = connect(tmp / "wh")
    rid = con.execute("select run_id from runs").fetchone()[0]
    out = dump_run(tmp / "wh", rid, tmp / "dumped" / "val-qwen3-8b")
    per_ep_in, per_ep_out = defaultdict(list), defaultdict(list)
    for raw in (d / "traces.jsonl").read_bytes().splitlines():
        r = json.loads(raw)
        per_ep_in[r["episode_id"]].append(without_goal(r))
    for raw in (out / "traces.jsonl").read_bytes().splitlines():
        r = json.loads(raw)
        per_ep_out[r["episode_id"]].append(r)
    assert per_ep_in.keys() == per_ep_out.keys()
    for k in per_ep_in:
        assert per_ep_out[k] == per_ep_in[k], k
    assert json.loads((out / "manifest.json").read_text()) == json.loads((d / "manifest.json").read_text())
    assert json.loads((out / "summary.json").read_text()) == json.loads((d / "summary.json").read_text())
    # the dumped directory ingests back to the same rows
    ingest([out], tmp / "wh2")
    q = "select * exclude (run_id, load_id) from stg_{} order by all"
    b = connect(tmp / "wh2")
    for t in ("steps", "actions", "observations", "messages", "tools", "skills_selected"):
        assert con.execute(q.format(t)).fetchall() == b.execute(q.format(t)).fetchall(), t


def test_dump_satisfies_the_store_resume_rules(run):
    """The dump, read the way ShopSimRL's store resumes (last parseable line per episode_id; complete iff schema v4,
    status completed and final.done), agrees with the warehouse's ``episodes`` view, and its summary with ours."""
    tmp, d, _ = run
    con = connect(tmp / "wh")
    rid = con.execute("select run_id from runs").fetchone()[0]
    out = dump_run(tmp / "wh", rid, tmp / "dumped")
    latest = store_latest(out / "traces.jsonl")
    view = {e: (st_ == "completed" and done is True, a) for e, st_, done, a in
            con.execute("select episode_id, status, done, attempt from episodes").fetchall()}
    assert {k: is_complete(v) for k, v in latest.items()} == {k: v[0] for k, v in view.items()}
    n_attempts = defaultdict(int)
    for raw in (out / "traces.jsonl").read_bytes().splitlines():
        n_attempts[json.loads(raw)["episode_id"]] += 1
    assert {k: v[1] for k, v in view.items()} == dict(n_attempts)  # the kept line is the final attempt
    assert all(is_complete(v) for v in latest.values())  # every job finished in the end: nothing to resume
    ours = summarize([latest[k] for k in sorted(latest)], requested=6, created_at="x")
    theirs = json.loads((d / "summary.json").read_text())
    assert {k: v for k, v in ours.items() if k != "created_at"} == {k: v for k, v in theirs.items() if k != "created_at"}


def test_many_experiments_in_one_runs_tree(tmp_path):
    synth_v4.run_dir(tmp_path / "runs", "bare", synth_v4.RunDirSpec(skills=False, n_tasks=4))
    synth_v4.run_dir(tmp_path / "runs", "equipped", synth_v4.RunDirSpec(skills=True, n_tasks=4))
    (tmp_path / "runs" / "notes.txt").write_text("not a trace")
    s = ingest([tmp_path / "runs"], tmp_path / "wh")
    assert sorted(f.status for f in s.files) == ["landed", "landed"]
    con = connect(tmp_path / "wh")
    rows = con.execute("select experiment, planned_episodes, skill_bank_hash is null from runs order by 1").fetchall()
    assert rows == [("bare", 4, True), ("equipped", 4, False)]
    assert con.execute("select experiment, count(*) from episodes group by 1 order by 1").fetchall() == [
        ("bare", 4), ("equipped", 4)]
    assert con.execute("select count(*) from skills_selected s join episodes e using (run_id, episode_id, attempt) "
                       "where e.experiment = 'bare'").fetchone() == (0,)
    # a changed summary.json is part of the unit: the run is re-ingested (replaced), not skipped
    (tmp_path / "runs" / "bare" / "summary.json").write_text(json.dumps({"schema_version": "shopsimrl-eval-summary-v2"}))
    s2 = ingest([tmp_path / "runs"], tmp_path / "wh")
    assert sorted(f.status for f in s2.files) == ["landed", "skipped_same_hash"]
    assert connect(tmp_path / "wh").execute("select count(*) from runs").fetchone() == (2,)


def test_slime_training_variant(tmp_path):
    recs = [rec(7, sample_id=i, kind="slime", group=3, protocol_error_at=2 if i == 0 else None,
                length_failure=i == 1, seed=1234) for i in range(3)]
    f = write(tmp_path / "slime" / "traces.jsonl", recs)
    pretty = tmp_path / "slime" / "round-01" / "group-000000003" / "rollout-9.json"
    pretty.parent.mkdir(parents=True)
    one = rec(8, sample_id=9, kind="slime", group=3, seed=1234)
    pretty.write_text(json.dumps(one, ensure_ascii=False, indent=2))
    s = ingest([f, pretty], tmp_path / "wh")
    assert [x.status for x in s.files] == ["landed", "landed"] and sum(x.rejected for x in s.files) == 0
    con = connect(tmp_path / "wh")
    assert con.execute("select episode_id from episodes order by 1").fetchall() == [
        (f"train-group-000000003-sample-{i:09d}",) for i in (0, 1, 2, 9)]
    assert con.execute("select count(*) from runs where model_name is null").fetchone() == (2,)
    assert con.execute("select duration_s from episodes").fetchall() == [(None,)] * 4
    for r in recs + [one]:
        run_id = con.execute("select run_id from episodes where episode_id = ?", [r["episode_id"]]).fetchone()[0]
        assert orjson.loads(dump_episode(tmp_path / "wh", r["episode_id"], "shopsimrl-v4", run_id=run_id)) == without_goal(r)


def test_attempts_torn_line_and_bad_records(tmp_path):
    failed, ok, other = rec(1, status="failed"), rec(1), rec(2)
    legacy = {"schema": "shopsimrl-episode-v4", "episode_id": "task-3__sample-0", "job": {"task_id": 3, "sample_id": 0}}
    bad_id = rec(4)
    bad_id["episode_id"] = "task-4__sample-0"  # not the runtime's zero-padded id
    broken = rec(2)
    broken["steps"] = "oops"  # after a good attempt of task 2: the store would resume from this line
    body = b"".join(synth_v4.line(x) for x in (failed, other)) + orjson.dumps(legacy) + b"\n" + synth_v4.line(bad_id) \
        + synth_v4.line(ok) + synth_v4.line(broken) + b"{not json\n" + synth_v4.line(rec(5))[:-40]
    f = tmp_path / "traces.jsonl"
    f.write_bytes(body)
    s = ingest([f], tmp_path / "wh")
    assert (s.files[0].episodes, s.files[0].attempts, s.files[0].rejected) == (4, 6, 5)
    con = connect(tmp_path / "wh")
    assert con.execute("select episode_id, attempt, status, error_stage, error_type from episode_attempts "
                       "order by 1, 2").fetchall() == [
        ("task-000001__sample-000", 1, "failed", "environment_step_3", "ShopSimulatorError"),
        ("task-000001__sample-000", 2, "completed", None, None),
        ("task-000002__sample-000", 1, "completed", None, None),
        ("task-000002__sample-000", 2, "failed", "ingest", "wrong_type"),
        ("task-3__sample-0", 1, "failed", "ingest", "unknown_schema_version"),
        ("task-4__sample-0", 1, "failed", "ingest", "wrong_type")]
    errs = con.execute("select line, error_class, message from ingest_errors order by line").fetchall()
    assert [(e[0], e[1]) for e in errs] == [(3, "unknown_schema_version"), (4, "wrong_type"), (6, "wrong_type"),
                                            (7, "invalid_json"), (8, "torn_line")]
    assert "pre-0.9 guess" in errs[0][2] and "task-NNNNNN__sample-NNN" in errs[1][2]
    # the episodes view's last attempt is the one the store resumes from (the last line Python's json parses)
    latest = store_latest(f)
    assert dict(con.execute("select episode_id, attempt from episodes").fetchall()) == {
        k: sum(1 for raw in body.splitlines() if _eid(raw) == k) for k in latest}
    assert con.execute("select count(*) from steps where episode_id = 'task-000001__sample-000'").fetchone() == (
        len(ok["steps"]),)
    fid = con.execute("select unit, records_total, converted, dropped from import_fidelity order by unit").fetchall()
    assert fid == [("file", 2, 0, 2), ("task-000001__sample-000", 2, 2, 0), ("task-000002__sample-000", 2, 1, 1),
                   ("task-3__sample-0", 1, 0, 1), ("task-4__sample-0", 1, 0, 1)]


def _eid(raw: bytes):
    try:
        r = json.loads(raw)
    except ValueError:
        return None
    return r.get("episode_id") if isinstance(r, dict) else None


def test_python_json_lines_keep_duplicate_key_detection(tmp_path):
    """Real lines use ``", "`` / ``": "`` separators; a duplicate key in such a line is still one error row."""
    good = synth_v4.line(rec(1))
    dup = synth_v4.line(rec(2)).replace(b'"status": "completed"', b'"status": "failed", "status": "completed"')
    assert b'", "' in good and dup != synth_v4.line(rec(2))
    (tmp_path / "traces.jsonl").write_bytes(good + dup)
    ingest([tmp_path / "traces.jsonl"], tmp_path / "wh")
    con = connect(tmp_path / "wh")
    assert con.execute("select line, error_class from ingest_errors").fetchall() == [(2, "duplicate_key")]
    assert con.execute("select count(*) from episodes where error_stage is null").fetchone() == (1,)


def test_round_trip_atif_same_steps(tmp_path):
    f = write(tmp_path / "traces.jsonl", [rec(42, protocol_error_at=2, length_failure=True)])
    ingest([f], tmp_path / "wh")
    atif = dump_episode(tmp_path / "wh", "task-000042__sample-000", "atif")
    (tmp_path / "ep.atif.json").write_text(atif)
    s = ingest([tmp_path / "ep.atif.json"], tmp_path / "wh2")
    assert s.files[0].format == "atif"
    q = "select step_idx, reasoning, content, tokens_in, tokens_out from steps order by step_idx"
    qa = ("select step_idx, call_idx, call_id, tool_name, arguments from actions where call_id is not null "
          "order by step_idx, call_idx")
    a, b = connect(tmp_path / "wh"), connect(tmp_path / "wh2")
    assert a.execute(q).fetchall() == b.execute(q).fetchall()
    ra, rb = a.execute(qa).fetchall(), b.execute(qa).fetchall()
    assert [r[:4] for r in ra] == [r[:4] for r in rb]
    assert [orjson.loads(x[4]) for x in ra] == [orjson.loads(y[4]) for y in rb]


def test_dump_errors(tmp_path):
    from shopsim_wh.core.errors import IngestError
    f = write(tmp_path / "traces.jsonl", [rec(1)])
    ingest([f], tmp_path / "wh")
    with pytest.raises(IngestError, match="no episode"):
        dump_episode(tmp_path / "wh", "task-9__sample-0", "atif")
    with pytest.raises(IngestError, match="valid: shopsimrl-v4, atif"):
        dump_episode(tmp_path / "wh", "task-000001__sample-000", "csv")
    with pytest.raises(IngestError, match="no run 'nope'"):
        dump_run(tmp_path / "wh", "nope", tmp_path / "out")


def test_parallel_chunks_give_the_same_rows(tmp_path, monkeypatch):
    from shopsim_wh.ingest import v4
    monkeypatch.setattr(v4, "PIPELINE_MIN_BYTES", 0)
    other_prov = rec(5)
    other_prov["provenance"]["prompt"]["prompt_version"] = "other"
    records = [rec(1), rec(2, status="failed"), rec(3), rec(4), other_prov, rec(2), rec(6, length_failure=True), rec(2)]
    lines = [synth_v4.line(r)[:-1] for r in records]
    lines.insert(3, b'{"schema_version": "shopsimrl-episode-v4", "job": NaN}')
    (tmp_path / "traces.jsonl").write_bytes(b"\n".join(lines) + b"\n" + synth_v4.line(rec(9))[:-5])
    f = tmp_path / "traces.jsonl"
    # ~one record per chunk: retries, errors and provenance changes cross chunk boundaries
    s1 = ingest([f], tmp_path / "a", IngestOptions(parallel=True, flush_bytes=len(lines[0]) // 2))
    s2 = ingest([f], tmp_path / "b", IngestOptions(parallel=False))
    # the serial path in chunks too (its episodes past the first chunk in the index, as the parallel path's)
    s3 = ingest([f], tmp_path / "c", IngestOptions(parallel=False, flush_bytes=len(lines[0]) // 2))
    assert (s1.files[0].episodes, s1.files[0].attempts, s1.files[0].rejected) == (
        s2.files[0].episodes, s2.files[0].attempts, s2.files[0].rejected) == (
        s3.files[0].episodes, s3.files[0].attempts, s3.files[0].rejected) == (6, 7, 3)  # rec(2)'s 2nd completed: refused
    a, b, c = connect(tmp_path / "a"), connect(tmp_path / "b"), connect(tmp_path / "c")
    for table in TABLES[1:]:
        qq = f"select * exclude (run_id, load_id) from stg_{table} order by all"
        assert a.execute(qq).fetchall() == b.execute(qq).fetchall() == c.execute(qq).fetchall(), table
    fq = "select unit, records_total, converted, dropped from import_fidelity"  # first-appearance order kept
    assert c.execute(fq).fetchall() == b.execute(fq).fetchall()
    pa_, pb = (json.loads(c.execute("select provenance from runs").fetchone()[0]) for c in (a, b))
    pa_.pop("ingest"), pb.pop("ingest")
    assert pa_ == pb
    for c in (a, b):
        extra = json.loads(c.execute("select source_extra from stg_episodes where episode_id = 'task-000005__sample-000'").fetchone()[0])
        assert extra["provenance"]["prompt"]["prompt_version"] == "other"
    for r in records[4:]:
        assert dump_episode(tmp_path / "a", r["episode_id"], "shopsimrl-v4") == dump_episode(
            tmp_path / "b", r["episode_id"], "shopsimrl-v4")


def test_parallel_workers_stage_parquet_and_leave_nothing_behind(tmp_path, monkeypatch):
    """Workers encode the bulky tables into _staging/ themselves; a commit moves every file out, and a unit
    that turns out to be already ingested (its hash is known only after parsing began) drops what they staged."""
    from shopsim_wh.ingest import core, v4
    from shopsim_wh.store.warehouse import Warehouse
    monkeypatch.setattr(v4, "PIPELINE_MIN_BYTES", 0)
    monkeypatch.setattr(core, "EARLY_HASH_BYTES", 0)
    records = [rec(i, steps=4) for i in range(1, 9)]
    f = write(tmp_path / "traces.jsonl", records)
    n_steps = sum(len(r["steps"]) for r in records)
    size = f.stat().st_size
    s1 = ingest([f], tmp_path / "wh", IngestOptions(flush_bytes=size // 4))
    wh = Warehouse(tmp_path / "wh")
    assert s1.files[0].status == "landed" and not list(wh.staging_dir.iterdir())
    steps = wh.snapshot().files("steps")
    assert len(steps) >= 3 and sum(e.rows for e in steps) == n_steps  # one file per chunk, written by workers
    prov = json.loads(connect(tmp_path / "wh").execute("select provenance from runs").fetchone()[0])
    assert "parallel_fallback" not in prov  # the workers really ran (a failing worker falls back silently)
    s2 = ingest([f], tmp_path / "wh", IngestOptions(flush_bytes=size // 4))
    assert s2.files[0].status == "skipped_same_hash"
    assert not list(wh.staging_dir.iterdir())
    assert connect(tmp_path / "wh").execute("select count(*) from steps").fetchone()[0] == n_steps


def test_parallel_falls_back_to_serial_when_workers_fail(tmp_path, monkeypatch):
    from shopsim_wh.core.errors import IngestError
    from shopsim_wh.ingest import _v4_parallel, v4
    monkeypatch.setattr(v4, "PIPELINE_MIN_BYTES", 0)

    def broken(*a, **k):
        raise IngestError("workers could not start")
        yield

    monkeypatch.setattr(_v4_parallel, "map_chunks", broken)
    f = write(tmp_path / "traces.jsonl", [rec(1), rec(2)])
    s = ingest([f], tmp_path / "wh")
    assert s.files[0].status == "landed" and s.files[0].episodes == 2
    prov = json.loads(connect(tmp_path / "wh").execute("select provenance from runs").fetchone()[0])
    assert "workers could not start" in prov["parallel_fallback"]


def test_progress_and_format_names(tmp_path):
    from shopsim_wh.core.errors import IngestError
    from shopsim_wh.ingest import formats
    f = write(tmp_path / "traces.jsonl", [rec(1), rec(2)])
    seen = []
    ingest([f], tmp_path / "wh", progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1] == (f.stat().st_size, f.stat().st_size)
    assert all(a <= b for (a, _), (b, _) in zip(seen, seen[1:], strict=False))
    assert formats() == ["agent-multi-turn", "atif", "claude-code", "openai-messages", "shopsimrl-v4", "slime"]
    with pytest.raises(IngestError, match="valid formats: auto, agent-multi-turn"):
        ingest([f], tmp_path / "wh", IngestOptions(format="shopsim-v4"))


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=60) | st.lists(st.sampled_from([b"", b" ", b"{}", b"\r", b"\t", b"a\r", b"\n", b"\r\n"]),
                                              max_size=12).map(b"".join),
       block=st.integers(1, 7))
def test_streamed_and_in_memory_line_splitting_agree(data, block):
    """The serial path reads lines from a stream in blocks, the chunk workers split bytes in memory: both must
    give the same (line_no, byte_offset, line, terminated) for any input and any block size."""
    import io

    from shopsim_wh.ingest import _io
    old, _io.READ_BLOCK = _io.READ_BLOCK, block
    try:
        assert list(_io.iter_lines(io.BytesIO(data))) == list(_io.split_lines(data))
    finally:
        _io.READ_BLOCK = old


def test_cli_ingest_and_dump_a_run_directory(tmp_path):
    import subprocess
    import sys
    d = synth_v4.run_dir(tmp_path / "runs", "cli-run", synth_v4.RunDirSpec(n_tasks=3))
    cli = [sys.executable, "-m", "shopsim_wh.cli.main"]
    wh = str(tmp_path / "wh")
    p = subprocess.run([*cli, "ingest", str(tmp_path / "runs"), "-w", wh], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "3 episode(s) landed" in p.stdout
    rid = connect(wh).execute("select run_id from runs").fetchone()[0]
    p = subprocess.run([*cli, "dump", "--run", rid, "--out", str(tmp_path / "out"), "-w", wh],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in (tmp_path / "out").iterdir()) == ["manifest.json", "summary.json", "traces.jsonl"]
    assert len((tmp_path / "out" / "traces.jsonl").read_bytes().splitlines()) == len(
        (d / "traces.jsonl").read_bytes().splitlines())
    p = subprocess.run([*cli, "dump", "-w", wh], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "--run RUN_ID and --out DIR" in p.stdout + p.stderr


def test_runner_episodes_dump_as_v4(tmp_path):
    """Episodes the runner wrote (no source_extra) dump from the columns into records the store accepts, and the
    dumped directory ingests back."""
    import subprocess
    import sys

    from .helpers import write_config
    cfg = write_config(tmp_path / "cfg.yaml")
    wh = tmp_path / "wh"
    p = subprocess.run([sys.executable, "-m", "shopsim_wh.cli.main", "run", str(cfg), "-w", str(wh)],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    con = connect(wh)
    rid = con.execute("select run_id from runs").fetchone()[0]
    out = dump_run(wh, rid, tmp_path / "runs" / "t")
    latest = store_latest(out / "traces.jsonl")
    view = dict(con.execute("select task_id, status = 'completed' and done from episodes").fetchall())
    assert {r["job"]["task_id"]: is_complete(r) for r in latest.values()} == view
    for r in latest.values():
        assert r["episode_id"] == f"task-{r['job']['task_id']:06d}__sample-{r['job']['sample_id']:03d}"
        assert r["steps"] and all(s["step_index"] == k + 1 for k, s in enumerate(r["steps"]))
        assert r["steps"][0]["observation"] == r["conversation"][1]["content"]
    s = ingest([out], tmp_path / "wh2")
    assert s.files[0].rejected == 0 and s.files[0].episodes == len(view)
    b = connect(tmp_path / "wh2")
    q = "select task_id, status, reward, model_steps, protocol_errors, total_actions from episodes order by 1"
    assert b.execute(q).fetchall() == con.execute(q).fetchall()


def test_broken_sidecar_is_noted_and_the_run_still_lands(tmp_path):
    d = synth_v4.run_dir(tmp_path / "runs", "broken-manifest", synth_v4.RunDirSpec(n_tasks=2))
    (d / "manifest.json").write_text('{"schema_version": "shopsimrl-run-manifest-v1", "plan": ')
    s = ingest([tmp_path / "runs"], tmp_path / "wh")
    assert [(f.status, f.episodes, f.rejected) for f in s.files] == [("landed", 2, 0)]
    con = connect(tmp_path / "wh")
    rows = con.execute("select source_file, error_class from ingest_errors").fetchall()
    assert rows == [(str(d / "manifest.json"), "invalid_json")]
    assert con.execute("select experiment, planned_episodes from runs").fetchone() == ("broken-manifest", 2)


def test_sidecars_given_as_files(tmp_path):
    d = synth_v4.run_dir(tmp_path / "runs", "r", synth_v4.RunDirSpec(n_tasks=2))
    s = ingest([d / "manifest.json"], tmp_path / "wh")
    assert [(f.status, "traces.jsonl beside it" in f.message) for f in s.files] == [("unrecognised", True)]
    s = ingest([d / "traces.jsonl", d / "manifest.json", d / "summary.json"], tmp_path / "wh")
    assert sorted((f.path.rsplit("/", 1)[1], f.status) for f in s.files) == [
        ("manifest.json", "attached"), ("summary.json", "attached"), ("traces.jsonl", "landed")]
