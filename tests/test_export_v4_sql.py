"""`export shopsimrl-v4` and `export atif` assemble their records in SQL (sql/exports/shopsimrl-v4.sql, atif.sql);
the bytes must be what the dump writers (shopsim_wh/ingest/dump_v4.py, dump.py: the old Python path) give, spelt
by orjson, for every source: runner
episodes, ingested ShopSimRL runs (skills, failed attempts, protocol errors, length failures, action-limit
terminations), Claude Code, agent_multi_turn, OpenAI messages, ATIF; with and without the privacy flags; with the
values DuckDB spells differently from orjson; and for the episodes the SQL leaves to the dump writer."""

from __future__ import annotations

import re

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shopsim_wh.demo import shopsimrl_v4 as synth_v4
from shopsim_wh.export import export
from shopsim_wh.export.records import RESPELL, scrub
from shopsim_wh.ingest import IngestOptions, ingest
from shopsim_wh.ingest.dump import load_episodes, to_atif
from shopsim_wh.ingest.dump_v4 import to_v4

from . import export_fixtures as fx

_fixtures = fx.export_wh, fx.export_con
_wh, _con = _fixtures  # pytest finds fixtures among module attributes

WRITERS = {"shopsimrl-v4": to_v4, "atif": to_atif}
FLAGS = {"both": {"include_reasoning": True, "include_persona": True}, "default": {},
         "reasoning": {"include_reasoning": True}}


def _edge_record() -> dict:
    """A record whose values DuckDB's JSON writer spells differently from orjson: doubles of 1e16 and above and
    between 1e-6 and 1e-5 in tool arguments, a unit-separator control character in an observation."""
    r = synth_v4.record(4100, spec=synth_v4.RecordSpec(steps=3, obs_words=6, think_words=4))
    call = r["steps"][0]["model"]["tool_calls"][0]
    call["arguments"] = {"big": 1e16, "huge": 1.5e22, "small": 5e-06, "mixed": [2.5e-7, 123456789012345680.0]}
    call["raw_arguments"] = orjson.dumps(call["arguments"]).decode()
    r["steps"][1]["environment"]["observation"] += "\x1f\x0b"
    r["steps"][2]["observation"] = r["steps"][1]["environment"]["observation"]  # a step shows the last answer
    return r


@pytest.fixture(scope="module")
def v4_wh(tmp_path_factory):
    """Ingested ShopSimRL records: a realistic run directory (its job mix above), the spelling edge cases, and
    two records with residuals only the dump writer restores (an unknown top-level key; the slime variant)."""
    tmp = tmp_path_factory.mktemp("v4sql")
    synth_v4.run_dir(tmp / "runs", "train-run",
                     synth_v4.RunDirSpec(split="train", n_tasks=6, steps=4, obs_words=8, think_words=6))
    odd = synth_v4.record(4200, spec=synth_v4.RecordSpec(steps=2, obs_words=6, think_words=4))
    odd["trainer_note"] = {"kept": True}
    slime = synth_v4.record(4300, spec=synth_v4.RecordSpec(steps=2, obs_words=6, think_words=4, kind="slime"))
    (tmp / "more.jsonl").write_bytes(b"".join(synth_v4.line(r) for r in (_edge_record(), odd, slime)))
    ingest([tmp / "runs", tmp / "more.jsonl"], tmp / "wh", IngestOptions(parallel=False))
    from shopsim_wh.engines.db import connect, install_exports

    con = connect(tmp / "wh")
    install_exports(con)
    yield con
    con.close()


def _dump_writer_lines(con, kind, res, flags: dict) -> list[bytes]:
    """The old path: every exported episode's last attempt through the dump writer, in the export's row order."""
    rows = con.execute(f"SELECT run_id, episode_id, md5(run_id || '/' || episode_id || ':{kind}') AS k "
                       "FROM episodes ORDER BY k").fetchall()
    reasoning, persona = flags.get("include_reasoning", False), flags.get("include_persona", False)
    out = []
    for run_id, eid, _ in rows:
        rec = WRITERS[kind](load_episodes(con, run_id, episode_id=eid)[-1])
        if not (reasoning and persona):
            rec = scrub(rec, reasoning, persona)
        out.append(orjson.dumps(rec, option=orjson.OPT_NON_STR_KEYS))
    assert len(out) == res.rows
    return out


def _check_bytes(con, kind, tmp_path, flags):
    res = export(kind, con, tmp_path, format="jsonl", where="true", shard_rows=10**9, **flags)
    got = (tmp_path / res.shards[0]["file"]).read_bytes().splitlines()
    assert got == _dump_writer_lines(con, kind, res, flags)


@pytest.mark.parametrize(("kind", "flags"), [("shopsimrl-v4", "both"), ("shopsimrl-v4", "default"),
                                             ("shopsimrl-v4", "reasoning"), ("atif", "both"), ("atif", "default")])
def test_sql_records_equal_the_dump_writer_on_every_source(kind, flags, export_con, tmp_path):
    view = "export_" + kind.replace("-", "_")
    # the connection is shared by the session's export tests, and an export narrows its scope: widen it again
    export_con.execute("CREATE OR REPLACE TEMP TABLE export_scope AS SELECT run_id FROM runs")
    fallbacks = export_con.execute(f"SELECT count(*) FILTER (WHERE record_fallback IS NOT NULL), "
                                   f"list(DISTINCT source_format) FROM {view}").fetchone()
    assert fallbacks[0] == 0 and len(fallbacks[1]) == len(fx.SOURCES)  # every source through the SQL path
    _check_bytes(export_con, kind, tmp_path, FLAGS[flags])


@pytest.mark.parametrize(("kind", "flags"), [("shopsimrl-v4", "both"), ("shopsimrl-v4", "default"), ("atif", "both")])
def test_sql_records_equal_the_dump_writer_on_ingested_shopsimrl_runs(kind, flags, v4_wh, tmp_path):
    _check_bytes(v4_wh, kind, tmp_path, FLAGS[flags])


def test_fallback_records_of_a_batch_read_its_copy_and_equal_the_dump_writer(v4_wh, tmp_path, monkeypatch):
    """Several batches: the records the SQL leaves to the dump writer are built from the batch's own copy of the
    base rows (the last attempt of each episode), not from a scan of the whole warehouse per call, with the
    dump writer's bytes; retried episodes among them."""
    from shopsim_wh.ingest import stored

    fallback = {r[0] for r in v4_wh.execute("SELECT episode_id FROM export_shopsimrl_v4 "
                                            "WHERE record_fallback IS NOT NULL").fetchall()}
    retried = {r[0] for r in v4_wh.execute("SELECT episode_id FROM retried_episodes").fetchall()}
    assert len(fallback) >= 2 and retried  # the fixture holds both
    read = []
    fetch = stored._fetch
    monkeypatch.setattr(stored, "_fetch", lambda con, q, params=None: read.append(q.split(" WHERE")[0]) or fetch(
        con, q, params))
    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", "3")
    res = export("shopsimrl-v4", v4_wh, tmp_path, format="jsonl", where="true", shard_rows=10**9, **FLAGS["both"])
    monkeypatch.setattr(stored, "_fetch", fetch)
    assert "SELECT * FROM observations" in read, read  # the fallback ran, on the batch's views
    assert not [q for q in read if q.removeprefix("SELECT * FROM stg_") in (
        "steps", "messages", "observations", "actions", "agents", "tools")], read
    got = (tmp_path / res.shards[0]["file"]).read_bytes().splitlines()
    assert got == _dump_writer_lines(v4_wh, "shopsimrl-v4", res, FLAGS["both"])


def test_what_the_sql_leaves_to_python(v4_wh):
    """The two residual records go to the dump writer; the edge record is built in SQL and holds DuckDB's own
    spellings, which records.py re-spells (the byte test above then holds)."""
    rows = dict(v4_wh.execute("SELECT episode_id, record_fallback FROM export_shopsimrl_v4").fetchall())
    assert {e for e, f in rows.items() if f} == {"task-004200__sample-000", "train-group-000000000-sample-000000000"}
    assert {f for f in rows.values() if f} == {"residual"}
    assert len(rows) > 8 and all(f is None for e, f in rows.items() if e.startswith("task-0001"))
    v4_wh.execute("SET VARIABLE export_tool_version = 'x'")
    text = v4_wh.execute("SELECT CAST(record AS VARCHAR) FROM export_shopsimrl_v4 "
                         "WHERE episode_id = 'task-004100__sample-000'").fetchone()[0]
    assert re.search(RESPELL, text) and "\\u001F" in text and "10000000000000000.0" in text
    spelt = orjson.dumps(orjson.loads(text)).decode()
    assert "\\u001f" in spelt and "1e+16" in spelt and "5e-6" in spelt
    clean = v4_wh.execute("SELECT count(*) FROM export_shopsimrl_v4 WHERE record_fallback IS NULL AND "
                          "NOT regexp_matches(CAST(record AS VARCHAR), ?)", [RESPELL]).fetchone()[0]
    assert clean >= len(rows) - 3  # the rest needs no Python at all with both privacy flags on


def test_an_export_installs_its_own_kind_only(export_wh, tmp_path):
    """An export's own connection creates the building blocks and the views its kind reads, not every kind's
    (each view is bound on creation: all of them cost ~4 CPU-s an export); the export still writes its rows."""
    from shopsim_wh.export import core
    from shopsim_wh.export.registry import get_kind

    spec = get_kind("atif")
    con, _, _, _ = core._open(export_wh["root"], str(tmp_path / "spill"), core.reads(spec.sql) | {spec.view})
    try:
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE view_name LIKE 'export_%'").fetchall()}
    finally:
        con.close()
    assert {"export_atif", "export_episodes", "export_messages", "export_decisions"} <= views
    assert not views & {"export_shopsimrl_v4", "export_sft_action", "export_preference"}
    res = export("atif", export_wh["root"], tmp_path / "out", format="jsonl", where="true")
    assert res.rows > 0


def test_record_kinds_run_in_larger_batches(monkeypatch):
    """A record kind's header asks for batches of 2,000 episodes (its query's ~0.15 CPU-s planning spread over more
    of them), the others get the batch module's default; SHOPSIM_WH_EXPORT_BATCH_EPISODES, when set, rules both."""
    from shopsim_wh.export import batches
    from shopsim_wh.export.registry import get_kind

    monkeypatch.delenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", raising=False)
    assert batches.batch_episodes(get_kind("shopsimrl-v4")) == batches.batch_episodes(get_kind("atif")) == 2000
    assert batches.batch_episodes(get_kind("sft-action")) == batches.DEFAULT_BATCH_EPISODES < 2000
    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", "7")
    assert batches.batch_episodes(get_kind("shopsimrl-v4")) == batches.batch_episodes(get_kind("sft-action")) == 7


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(['{"a":', ",", "[", ":", "-", "1", "0", ".", "e", "5", "Infinity", "NaN", "x",
                                 "\\u001F", "\\u00", "A", "0.00000", "12345678901234567", '"', "}", "]"]),
                max_size=12))
def test_the_respelling_parts_flag_exactly_what_the_one_pattern_flags(pieces):
    """records.py checks RESPELL as four literal-led patterns (faster under RE2); they flag the same records."""
    import pyarrow as pa

    from shopsim_wh.export.records import _needs_python

    text = "".join(pieces)
    assert _needs_python(pa.array([text]), True, True) == [bool(re.search(RESPELL, text))]
