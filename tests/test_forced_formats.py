"""Forced formats and inputs with no valid record: only their error rows land, and a run of nothing usable
exits non-zero (docs/ingest.md, "Inputs that hold nothing")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shopsim_wh.analytics.summary import summarize
from shopsim_wh.cli.main import app
from shopsim_wh.engines.db import connect
from shopsim_wh.ingest import IngestOptions, ingest

from .conftest import REPO

GOOD = REPO / "tests" / "fixtures" / "ingest" / "claude_code" / "5e55a0b0-hook-fixture.jsonl"


def _cli(*args):
    return CliRunner().invoke(app, list(args))


def _counts(wh: Path, con=None) -> dict[str, int]:
    con = con or connect(wh)
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("runs", "episodes", "steps", "messages", "ingest_errors", "run_metrics")}


@pytest.fixture
def hostname(tmp_path) -> Path:
    p = tmp_path / "hostname"
    p.write_text("build-host-7\n")  # what /etc/hostname holds: one line, not JSON
    return p


def test_forcing_a_format_on_a_file_with_no_valid_record_lands_only_its_error_rows(tmp_path, hostname):
    wh = tmp_path / "wh"
    out = _cli("ingest", "--format", "claude-code", str(hostname), "-w", str(wh))
    assert out.exit_code == 2, out.output
    assert "no valid claude-code record" in out.output and "no episode landed" in out.output
    con = connect(wh)
    assert _counts(wh, con) == {"runs": 0, "episodes": 0, "steps": 0, "messages": 0, "ingest_errors": 1,
                                "run_metrics": 0}
    assert con.execute("SELECT line, error_class FROM ingest_errors").fetchall() == [(1, "invalid_json")]
    assert summarize(con) == []
    # idempotent: the same bytes again replace the error rows, they do not pile up
    assert _cli("ingest", "--format", "claude-code", str(hostname), "-w", str(wh)).exit_code == 2
    assert _counts(wh)["ingest_errors"] == 1


def test_json_that_is_no_record_of_the_format_gets_an_error_row_saying_so(tmp_path):
    p = tmp_path / "other.jsonl"
    p.write_text('{"foo": 1}\n{"bar": [2]}\n')
    s = ingest([p], tmp_path / "wh", IngestOptions(format="claude-code", parallel=False))
    assert [(f.status, f.episodes) for f in s.files] == [("no_valid_record", 0)]
    rows = connect(tmp_path / "wh").execute("SELECT error_class, message FROM ingest_errors").fetchall()
    assert len(rows) == 1 and rows[0][0] == "no_records" and "check --format" in rows[0][1]


def test_a_good_unit_beside_a_bad_one_still_lands_and_exits_zero(tmp_path, hostname):
    wh = tmp_path / "wh"
    good = tmp_path / GOOD.name
    shutil.copy(GOOD, good)
    out = _cli("ingest", "--format", "claude-code", str(good), str(hostname), "-w", str(wh))
    assert out.exit_code == 0, out.output
    assert "no_valid_record" in out.output  # the bad one is listed
    c = _counts(wh)
    assert c["runs"] == c["run_metrics"] == 1 and c["episodes"] == 1 and c["steps"] > 0 and c["ingest_errors"] >= 1
    (row,) = summarize(connect(wh))
    assert row["completed"] == 1 and row["planned"] == 1


def test_only_unrecognised_inputs_exit_non_zero(tmp_path, hostname):
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list: milk\n")
    out = _cli("ingest", str(hostname), str(notes), "-w", str(tmp_path / "wh"))
    assert out.exit_code == 2, out.output
    assert out.output.count("  unrecognised  ") == 2 and "pass --format" in out.output
    assert not (tmp_path / "wh").exists() or _counts(tmp_path / "wh")["ingest_errors"] == 0
