"""Hostile arguments: path traversal, odd Unicode and SQL injection through every name and value users pass.
Names follow the one rule of shopsim_wh.core.names (refused, never rewritten); values are bound, never spliced."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shopsim_wh.analytics.gate import GateError, GateOptions, gate
from shopsim_wh.analytics.summary import run_query, summarize
from shopsim_wh.core.config import load_config
from shopsim_wh.core.errors import ConfigError, NameRefused, WarehouseError
from shopsim_wh.core.names import check_name, is_name
from shopsim_wh.demo.shop import WarehouseSpec, default_runs, generate
from shopsim_wh.engines import sandbox
from shopsim_wh.engines.db import connect
from shopsim_wh.ingest import IngestOptions, ingest
from shopsim_wh.rollout.runner import plan
from shopsim_wh.store.warehouse import Warehouse

from .helpers import write_config

HOSTILE = [
    "../outside", "..", ".", "/etc/passwd", "a/b", "a\\b", "run\n", "run\r\nx", "nul\x00", "tab\tx", "a b", "",
    "-rf", ".hidden", "_x", "x" * 129, "ｅｘｐ", "café", "run\u202egnp", "x\u200b", "İ", "x'; DROP TABLE runs; --",
    "Robert'); DROP TABLE runs;--", "x\" OR \"1\"=\"1", "$(touch pwned)", "`id`", "x;y", "*", "a?b", "~root", "%2e%2e",
]
INJECTION_VALUES = ["x' OR '1'='1", "'; COPY (SELECT 1) TO '/tmp/pwned.csv'; --", "\x00", "../../etc/passwd",
                    "Qwen/Qwen3-8B", "$$ OR 1=1 $$", "ｒｕｎ", "\u202e"]


@pytest.mark.parametrize("name", HOSTILE)
def test_the_one_rule_refuses_every_hostile_name(name):
    assert not is_name(name)
    with pytest.raises(NameRefused, match="ASCII letters, digits"):
        check_name(name, "run id")


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.one_of(st.text(max_size=24), st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,130}", fullmatch=True),
                 st.text(alphabet="./\\-_ aZ9\n\x00é", max_size=12)))
def test_an_accepted_name_is_one_path_component_inside_the_root(name):
    root = "/srv/warehouse/runs"
    if not is_name(name):
        with pytest.raises(NameRefused):
            check_name(name, "name")
        return
    assert 1 <= len(name) <= 128 and name.isascii() and name.isprintable() and "/" not in name
    assert os.path.dirname(os.path.normpath(os.path.join(root, name))) == root and name not in (".", "..")


@pytest.mark.parametrize("name", ["../outside", "run\n", "a/b", "x'; DROP TABLE runs; --", "ｅｘｐ", ".hidden"])
def test_config_refuses_a_hostile_experiment_name(tmp_path, name):
    with pytest.raises(ConfigError, match="experiment.name.*ASCII letters"):
        load_config(write_config(tmp_path / "c.yaml", experiment={"name": name, "seed": 3}))


def test_the_writer_refuses_a_hostile_partition_and_creates_nothing(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    table = pa.table({"x": [1]})
    for name in ("../outside", "run\n", "a/b"):
        with wh.writer() as w, pytest.raises(NameRefused):
            w.commit([("loads", name, table)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wh"]
    assert not [p for p in (tmp_path / "wh").rglob("*") if "outside" in p.name or "\n" in p.name]


@pytest.mark.parametrize("source", ["../outside", "a/b", "x\n", "'; DROP TABLE runs; --", "ｓｒｃ"])
def test_ingest_refuses_a_hostile_source_name_before_reading(tmp_path, source):
    trace = tmp_path / "t.jsonl"
    trace.write_text("{}\n")
    with pytest.raises(NameRefused, match="--source"):
        ingest([trace], tmp_path / "wh", IngestOptions(source=source))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]  # no warehouse, nothing beside it


def test_model_and_skill_values_may_hold_anything_they_are_not_paths(tmp_path):
    bank = tmp_path / "bank.json"
    bank.write_text('{"version": "b", "skills": [{"id": "../../etc/x\'; --", "content": "Check the price."}]}')
    cfg = load_config(write_config(tmp_path / "c.yaml", model={"name": "Qwen/../../Qwen3-8B'; --",
                                                             "checkpoint_id": "ck/../1"}, skills={"path": str(bank)}))
    p = plan(cfg)
    assert p.fingerprint_fields["model_name"] == "Qwen/../../Qwen3-8B'; --" and p.run_id == "t"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["bank.json", "c.yaml"]


@pytest.fixture(scope="module")
def odd_root(tmp_path_factory) -> Path:
    """A warehouse whose own path has a quote, a space and non-ASCII: it is spliced (quoted) into DDL."""
    root = tmp_path_factory.mktemp("hostile") / "wh 'quoted' ü 倉庫"
    generate(root, 120, WarehouseSpec(runs=default_runs(2), seed=3, repeats=1, coding_episodes=0))
    return root


def test_values_are_bound_not_spliced(odd_root):
    con = sandbox.connect(odd_root)  # the quoted path works for the views and the sandbox's allowed directory
    runs = con.execute("SELECT count(*) FROM runs").fetchone()[0]
    assert runs == 2
    for value in INJECTION_VALUES:
        with pytest.raises(WarehouseError, match="no experiment or run named"):  # named back, bound, not run
            summarize(con, value)
        assert run_query(con, "SELECT count(*) AS n FROM runs WHERE run_id = $r", {"r": value}).rows == [(0,)]
        with pytest.raises(GateError, match="not in the warehouse"):
            gate(con, value, "synth-ckpt-a-skill", GateOptions(bootstrap=0))
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == runs
    assert not Path("/tmp/pwned.csv").exists()
    assert connect(odd_root).execute("SELECT count(*) FROM episodes").fetchone()[0] > 0
