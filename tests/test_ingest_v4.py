"""shopsimrl-episode-v4: attempts, sidecars, privacy, idempotence, replacement, round trips."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shopsim_wh.db import connect
from shopsim_wh.ingest import dump_episode, ingest, synth_v4
from shopsim_wh.ingest.core import run_id_for


def rec(task_id, **kw):
    return synth_v4.record(task_id, steps=kw.pop("steps", 3), obs_words=8, think_words=6, **kw)


def write(path, records, tail=b""):
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records) + tail)
    return path


def special_record():
    """A record with a protocol-error step and a generation_length policy failure."""
    r = rec(42, steps=4)
    s1 = r["steps"][1]
    s1.update(tool_call={"id": "bad1", "name": "click", "arguments": "{not json"}, action=None, environment=None,
              action_feedback=None, protocol_error="invalid_arguments",
              protocol_feedback="arguments are not valid JSON; call click with {\"value\": ...}")
    last = r["steps"][-1]
    last.update(tool_call=None, action=None, finish_reason="length", policy_failure={"code": "generation_length"},
                raw_response={"choices": [{"finish_reason": "length"}]}, action_feedback=None,
                environment={"observation": "terminated", "observation_state": {"page": "done"}, "reward": 0.0, "done": True})
    r["final"].update(reward=0.0, termination_reason="generation_length", purchase=None)
    return r


def normalise(o):
    """Dump comparison: key order, timestamps, null-vs-absent and tool order within a step aside."""
    if isinstance(o, dict):
        out = {k: normalise(v) for k, v in o.items() if v is not None and k not in ("started_at", "finished_at")}
        if isinstance(out.get("tools"), list):
            out["tools"] = sorted(out["tools"], key=lambda t: t["function"]["name"])
        return out
    if isinstance(o, list):
        return [normalise(x) for x in o]
    return o


def test_attempts_last_valid_wins_and_torn_line(tmp_path):
    failed = rec(1, status="failed")
    ok = rec(1)
    other = rec(2)
    f = write(tmp_path / "traces.jsonl", [failed, other, ok], tail=orjson.dumps(rec(1))[:-30])
    s = ingest([f], tmp_path / "wh")
    assert s.files[0].episodes == 2 and s.files[0].attempts == 3
    con = connect(tmp_path / "wh")
    assert con.execute("select episode_id, attempt, status from episodes order by 1").fetchall() == [
        ("task-1__sample-0", 2, "completed"), ("task-2__sample-0", 1, "completed")]
    assert con.execute("select episode_id, attempt, status from episode_attempts order by 1, 2").fetchall() == [
        ("task-1__sample-0", 1, "failed"), ("task-1__sample-0", 2, "completed"), ("task-2__sample-0", 1, "completed")]
    assert con.execute("select stage, exception_type from failures").fetchall() == [("model", "ModelUnavailable")]
    # steps of the failed attempt stay out of the base view
    n_final = con.execute("select count(*) from steps where episode_id = 'task-1__sample-0'").fetchone()[0]
    assert n_final == len(ok["steps"])
    assert con.execute("select error_class, line from ingest_errors").fetchall() == [("torn_line", 4)]
    # a torn line cannot be attributed to an episode: it is accounted on the file's own unit
    assert con.execute("select unit, records_total, converted, dropped from import_fidelity order by unit").fetchall() == [
        ("file", 1, 0, 1), ("task-1__sample-0", 2, 2, 0), ("task-2__sample-0", 1, 1, 0)]


def test_sidecars_and_private_goal(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"experiment": {"name": "teacher-v1"}, "jobs": 2}))
    (tmp_path / "summary.json").write_text(json.dumps({"completed": 2}))
    f = write(tmp_path / "traces.jsonl", [rec(1, goal_in_reset=True), rec(2)])
    s = ingest([f], tmp_path / "wh")
    con = connect(tmp_path / "wh")
    prov = json.loads(con.execute("select provenance from runs").fetchone()[0])
    assert prov["manifest"]["jobs"] == 2 and prov["summary"] == {"completed": 2}
    assert prov["v4"]["private_goals_stripped"] == 1
    assert con.execute("select experiment from runs").fetchone() == ("teacher-v1",)
    assert s.files[0].run_id == run_id_for("shopsimrl-v4", s.files[0].run_id.split(".")[1] + "0" * 52)
    # the goal is nowhere: not in the tables, not in the residual
    for table in ("steps", "observations", "messages", "episodes", "runs"):
        text = str(con.execute(f"select * from {table}").fetchall())
        assert "B000SECRET" not in text, table
        assert "attributes" not in text or table == "runs", table
    rows = con.execute("select episode_id, right_product, purchase_asin is not null from episodes order by 1").fetchall()
    expected = [(f"task-{t}__sample-0", r["final"]["purchase"]["asin"] == r["final"]["goal"]["asin"], True)
                for t, r in ((1, rec(1)), (2, rec(2)))]
    assert rows == expected


def test_idempotent_and_changed_file_replaced(tmp_path):
    f = write(tmp_path / "traces.jsonl", [rec(1), rec(2)])
    wh = tmp_path / "wh"
    s1 = ingest([f], wh, source="teacher")
    assert s1.files[0].run_id.startswith("teacher.")
    s2 = ingest([f], wh, source="teacher")
    assert s2.files[0].status == "skipped_same_hash" and s2.units_read == 0
    con = connect(wh)
    assert con.execute("select count(*) from runs").fetchone() == (1,)
    assert con.execute("select count(*) from episodes").fetchone() == (2,)
    con.close()
    write(f, [rec(1), rec(2), rec(3)])  # the file grows: its old run is replaced in one commit
    s3 = ingest([f], wh, source="teacher")
    assert s3.files[0].status == "landed" and s3.files[0].run_id != s1.files[0].run_id
    con = connect(wh)
    assert con.execute("select run_id from runs").fetchall() == [(s3.files[0].run_id,)]
    assert con.execute("select count(*) from episodes").fetchone() == (3,)
    assert con.execute("select count(distinct load_id) from loads").fetchone() == (2,)


def test_round_trip_v4(tmp_path):
    records = [rec(1), special_record(), rec(3, status="failed")]
    records[0]["mystery_field"] = {"kept": [1, 2]}  # unknown keys survive through the residual
    f = write(tmp_path / "traces.jsonl", records)
    ingest([f], tmp_path / "wh")
    for r in records:
        out = orjson.loads(dump_episode(tmp_path / "wh", r["episode_id"], "shopsimrl-v4"))
        want = json.loads(json.dumps(r))
        if want.get("final"):
            want["final"].pop("goal", None)  # the private goal is never stored
        assert normalise(out) == normalise(want)


def test_round_trip_atif_same_steps(tmp_path):
    f = write(tmp_path / "traces.jsonl", [special_record()])
    ingest([f], tmp_path / "wh")
    atif = dump_episode(tmp_path / "wh", "task-42__sample-0", "atif")
    (tmp_path / "ep.atif.json").write_text(atif)
    s = ingest([tmp_path / "ep.atif.json"], tmp_path / "wh2")
    assert s.files[0].format == "atif"
    q = ("select step_idx, reasoning, content, model, tokens_in, tokens_out from steps order by step_idx")
    qa = ("select step_idx, call_idx, call_id, tool_name, arguments from actions where call_id is not null "
          "order by step_idx, call_idx")
    qo = "select step_idx, call_id, content from observations order by step_idx, call_id"
    a, b = connect(tmp_path / "wh"), connect(tmp_path / "wh2")
    assert a.execute(q).fetchall() == b.execute(q).fetchall()
    ra, rb = a.execute(qa).fetchall(), b.execute(qa).fetchall()
    assert [r[:4] for r in ra] == [r[:4] for r in rb]
    for x, y in zip(ra, rb, strict=True):  # arguments: same JSON (invalid JSON kept as {"_raw": text})
        try:
            assert orjson.loads(x[4]) == orjson.loads(y[4])
        except orjson.JSONDecodeError:
            assert orjson.loads(y[4]) == {"_raw": x[4]}
    assert a.execute(qo).fetchall() == b.execute(qo).fetchall()
    assert b.execute("select reward from episodes").fetchone() == (0.0,)


def test_dump_errors(tmp_path):
    from shopsim_wh.errors import IngestError
    f = write(tmp_path / "traces.jsonl", [rec(1)])
    ingest([f], tmp_path / "wh")
    with pytest.raises(IngestError, match="no episode"):
        dump_episode(tmp_path / "wh", "task-9__sample-0", "atif")
    with pytest.raises(IngestError, match="valid: shopsimrl-v4, atif"):
        dump_episode(tmp_path / "wh", "task-1__sample-0", "csv")


def test_parallel_chunks_give_the_same_rows(tmp_path, monkeypatch):
    from shopsim_wh.ingest import v4
    monkeypatch.setattr(v4, "PIPELINE_MIN_BYTES", 0)
    other_prov = rec(5)
    other_prov["provenance"] = {**other_prov["provenance"], "prompt_hash": "q" * 16}
    records = [rec(1), rec(2, status="failed"), rec(3), rec(4), other_prov, rec(2), special_record(), rec(2)]
    lines = [orjson.dumps(r) for r in records]
    lines.insert(3, b'{"schema": "shopsimrl-episode-v4", "job": NaN}')
    (tmp_path / "traces.jsonl").write_bytes(b"\n".join(lines) + b"\n" + orjson.dumps(rec(9))[:-5])
    f = tmp_path / "traces.jsonl"
    # ~one record per chunk: retries, errors and provenance changes cross chunk boundaries
    s1 = ingest([f], tmp_path / "a", parallel=True, flush_bytes=len(lines[0]) // 2)
    s2 = ingest([f], tmp_path / "b", parallel=False)
    assert (s1.files[0].episodes, s1.files[0].attempts, s1.files[0].rejected) == (
        s2.files[0].episodes, s2.files[0].attempts, s2.files[0].rejected) == (6, 8, 2)
    a, b = connect(tmp_path / "a"), connect(tmp_path / "b")
    for table in ("episodes", "agents", "steps", "actions", "observations", "messages", "tools", "ingest_errors",
                  "import_fidelity", "failures", "skills_selected"):
        qq = f"select * exclude (run_id, load_id) from stg_{table} order by all"
        assert a.execute(qq).fetchall() == b.execute(qq).fetchall(), table
    pa_, pb = (json.loads(c.execute("select provenance from runs").fetchone()[0]) for c in (a, b))
    pa_.pop("ingest"), pb.pop("ingest")
    assert pa_ == pb
    assert "v4_residual" not in pa_  # per-attempt residuals live in episodes.source_extra (flat run row)
    for c in (a, b):
        extra = json.loads(c.execute("select source_extra from stg_episodes where episode_id = 'task-5__sample-0'").fetchone()[0])
        assert extra["provenance"]["prompt_hash"] == "q" * 16
    for r in records[4:]:
        assert dump_episode(tmp_path / "a", r["episode_id"], "shopsimrl-v4") == dump_episode(
            tmp_path / "b", r["episode_id"], "shopsimrl-v4")



def test_parallel_workers_stage_parquet_and_leave_nothing_behind(tmp_path, monkeypatch):
    """Workers encode the bulky tables into _staging/ themselves; a commit moves every file out, and a unit
    that turns out to be already ingested (its hash is known only after parsing began) drops what they staged."""
    from shopsim_wh.ingest import core, v4
    from shopsim_wh.warehouse import Warehouse
    monkeypatch.setattr(v4, "PIPELINE_MIN_BYTES", 0)
    monkeypatch.setattr(core, "EARLY_HASH_BYTES", 0)
    records = [rec(i, steps=4) for i in range(1, 9)]
    f = write(tmp_path / "traces.jsonl", records)
    size = f.stat().st_size
    s1 = ingest([f], tmp_path / "wh", flush_bytes=size // 4)
    wh = Warehouse(tmp_path / "wh")
    assert s1.files[0].status == "landed" and not list(wh.staging_dir.iterdir())
    steps = wh.snapshot().files("steps")
    assert len(steps) >= 3 and sum(e.rows for e in steps) == 8 * 4  # one file per chunk, written by workers
    prov = json.loads(connect(tmp_path / "wh").execute("select provenance from runs").fetchone()[0])
    assert "parallel_fallback" not in prov  # the workers really ran (a failing worker falls back silently)
    s2 = ingest([f], tmp_path / "wh", flush_bytes=size // 4)
    assert s2.files[0].status == "skipped_same_hash"
    assert not list(wh.staging_dir.iterdir())
    assert connect(tmp_path / "wh").execute("select count(*) from steps").fetchone()[0] == 8 * 4


def test_parallel_falls_back_to_serial_when_workers_fail(tmp_path, monkeypatch):
    from shopsim_wh.errors import IngestError
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
    from shopsim_wh.errors import IngestError
    from shopsim_wh.ingest import formats
    f = write(tmp_path / "traces.jsonl", [rec(1), rec(2)])
    seen = []
    ingest([f], tmp_path / "wh", progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1] == (f.stat().st_size, f.stat().st_size)
    assert all(a <= b for (a, _), (b, _) in zip(seen, seen[1:], strict=False))
    assert formats() == ["agent-multi-turn", "atif", "claude-code", "openai-messages", "shopsimrl-v4"]
    with pytest.raises(IngestError, match="valid formats: auto, agent-multi-turn"):
        ingest([f], tmp_path / "wh", format="shopsim-v4")


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
