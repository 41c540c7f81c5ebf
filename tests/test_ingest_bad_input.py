"""Every bad-input class gives exactly one ingest_errors row with a clear class; the rest lands."""

from __future__ import annotations

import json

import orjson
import pytest

from shopsim_wh.demo import shopsimrl_v4 as synth_v4
from shopsim_wh.engines.db import connect
from shopsim_wh.ingest import IngestOptions, ingest


def good(task_id: int) -> bytes:
    return orjson.dumps(synth_v4.record(task_id, spec=synth_v4.RecordSpec(steps=2, obs_words=5, think_words=5)))


def v4_with(bad: bytes) -> bytes:
    """A v4 record (one line) with ``bad`` spliced in as an extra top-level key."""
    rec = good(999)
    return rec[:-1] + b',"x":' + bad + b"}"


BAD_LINES = {
    "invalid_utf8": good(1)[:40] + b"\xff\xfe" + good(1)[40:],
    "nul_byte": good(2).replace(b'"train"', b'"tr\x00ain"'),
    "non_finite_number": v4_with(b"NaN"),
    "duplicate_key": good(4).replace(b'"status":"completed"', b'"status":"failed","status":"completed"'),
    "huge_number": v4_with(b"123456789012345678901234567890"),
    "too_deep": v4_with(b"[" * 2000 + b"]" * 2000),
    "oversized_field": v4_with(b'"' + b"x" * 5000 + b'"'),
    "wrong_type": good(8).replace(b'"steps":[', b'"steps":"oops","s":['),
    "unknown_schema_version": good(9).replace(b"shopsimrl-episode-v4", b"shopsimrl-episode-v3"),
    "invalid_json": b'{"schema": "shopsimrl-episode-v4", "job": ',
}


@pytest.fixture(scope="module")
def bad_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    lines, expected, offset = [], [], 0
    body = b"\xef\xbb\xbf" + good(100) + b"\n"  # BOM at file start: noted, record kept
    expected.append((1, 0, "bom"))
    offset = len(body)
    lines.append(body)
    n = 2
    for cls, raw in BAD_LINES.items():
        at = 0
        if cls == "invalid_utf8":
            at = 40
        elif cls == "nul_byte":
            at = raw.index(b"\x00")
        expected.append((n, offset + at, cls))
        lines.append(raw + b"\n")
        offset += len(raw) + 1
        n += 1
        g = good(200 + n) + b"\n"  # a good record after every bad one
        lines.append(g)
        offset += len(g)
        n += 1
    torn = good(300)[:-20]
    expected.append((n, offset, "torn_line"))
    lines.append(torn)  # no newline: a torn write
    f = d / "traces.jsonl"
    f.write_bytes(b"".join(lines))
    (d / "empty.jsonl").write_bytes(b"")
    s = ingest([f, d / "empty.jsonl"], d / "wh", IngestOptions(max_field_bytes=4096))
    return d, s, expected


def test_each_bad_line_is_one_exact_error_row(bad_run):
    d, s, expected = bad_run
    con = connect(d / "wh")
    rows = con.execute("select line, byte_offset, error_class from ingest_errors where source_file like '%traces.jsonl' "
                       "order by line").fetchall()
    assert rows == expected
    msgs = con.execute("select error_class, message from ingest_errors").fetchall()
    assert all(0 < len(m) <= 500 for _, m in msgs)


def test_rest_of_file_lands(bad_run):
    d, s, expected = bad_run
    con = connect(d / "wh")
    # 1 BOM record + one good record after each of the 10 bad lines
    assert con.execute("select count(*) from episodes where source_file like '%traces.jsonl' and error_stage is null"
                       ).fetchone() == (11,)
    # bad lines Python's json still reads with an episode_id (the ShopSimRL store would resume from them): a failed
    # `ingest` attempt each, so the episodes view's last attempt is the store's; their content is not stored
    stubs = con.execute("select episode_id, error_type from episode_attempts where error_stage = 'ingest' "
                        "order by attempt, episode_id").fetchall()
    assert stubs == [("task-000004__sample-000", "duplicate_key"), ("task-000008__sample-000", "wrong_type"),
                     ("task-000009__sample-000", "unknown_schema_version"), ("task-000999__sample-000", "non_finite_number"),
                     ("task-000999__sample-000", "huge_number"), ("task-000999__sample-000", "oversized_field")]
    f = [x for x in s.files if x.path.endswith("traces.jsonl")][0]
    assert f.rejected == len(BAD_LINES) + 1  # + the torn line; the BOM record is kept
    fid = con.execute("select sum(records_total), sum(converted), sum(dropped) from import_fidelity "
                      "where source_file like '%traces.jsonl'").fetchone()
    assert fid == (22, 11, 11)  # 1 BOM record + 10 bad + 10 good + 1 torn line


def test_empty_file(bad_run):
    d, s, _ = bad_run
    con = connect(d / "wh")
    rows = con.execute("select line, byte_offset, error_class from ingest_errors where source_file like '%empty.jsonl'").fetchall()
    assert rows == [(None, 0, "empty_file")]
    # an empty unit lands its error row and nothing else: no runs row, so no run with 0 episodes in summaries
    assert [f.status for f in s.files if f.path.endswith("empty.jsonl")] == ["no_valid_record"]
    assert not con.execute("select count(*) from runs where source_file like '%empty.jsonl'").fetchone()[0]


def test_json_array_elements(tmp_path):
    good_el = {"task_id": 1, "trial": 0, "reward": 1.0, "info": {}, "traj": [{"role": "user", "content": "hi"}]}
    text = ("[" + json.dumps(good_el) + ',\n{"task_id": 2, "task_id": 3, "traj": []},\n'
            + json.dumps(good_el | {"task_id": 4}) + ',\n{"task_id": 5, "reward": NaN, "traj": []},\n'
            + json.dumps(good_el | {"task_id": 6, "traj": "nope"}) + "]")
    f = tmp_path / "tau.json"
    f.write_text(text)
    ingest([f], tmp_path / "wh", IngestOptions(format="openai-messages"))
    con = connect(tmp_path / "wh")
    errs = con.execute("select line, error_class from ingest_errors order by line").fetchall()
    assert errs == [(1, "duplicate_key"), (3, "non_finite_number"), (4, "wrong_type")]
    assert con.execute("select count(*) from episodes").fetchone() == (2,)
    assert con.execute("select count(*) from import_fidelity where dropped = 1").fetchone() == (3,)


def test_claude_code_bad_lines(tmp_path):
    f = tmp_path / "s.jsonl"
    ok = {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "s", "message": {"role": "user", "content": "hi"}}
    f.write_bytes(json.dumps(ok).encode() + b"\n" + b'{"type": "user", "a": 1, "a": 2}\n' + b"[1, 2]\n"
                  + b'{"type": "assistant", "uuid": "x"')
    ingest([f], tmp_path / "wh", IngestOptions(format="claude-code"))
    con = connect(tmp_path / "wh")
    assert con.execute("select line, error_class from ingest_errors order by line").fetchall() == [
        (2, "duplicate_key"), (3, "wrong_type"), (4, "torn_line")]
    assert con.execute("select records_total, converted, kept_raw, dropped from import_fidelity").fetchall() == [(4, 1, 0, 3)]


def test_decompression_inputs(tmp_path):
    import gzip

    import pyarrow as pa
    raw = good(1) + b"\n" + good(2) + b"\n"
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(raw))
    with pa.output_stream(str(tmp_path / "b.jsonl.zst"), compression="zstd") as out:
        out.write(good(3) + b"\n")
    s = ingest([str(tmp_path / "*.jsonl.*")], tmp_path / "wh")
    assert [f.status for f in s.files] == ["landed", "landed"]
    assert connect(tmp_path / "wh").execute("select count(*) from episodes").fetchone() == (3,)
