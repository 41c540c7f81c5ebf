"""Gate decisions as data: each `gate` run commits a gate_results row (not with --dry-run) that holds what a
dashboard charts and what an audit needs to re-run the decision and get the same answer."""

from __future__ import annotations

import json

import pytest

from shopsim_wh.analytics import gate_log
from shopsim_wh.engines.db import connect
from shopsim_wh.store.maintenance import remove_run
from shopsim_wh.store.warehouse import Warehouse

from .catalog_support import BARE, SKILL, cli, cli_in_process, warehouse_copy


def _rows(con):
    cur = con.execute("SELECT * FROM gate_results ORDER BY decided_at")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def test_gate_commits_its_decision_and_a_rerun_from_the_row_decides_the_same(tmp_path):
    root = warehouse_copy(tmp_path / "wh")
    res = cli("gate", "--bare", BARE, "--treatment", SKILL, "-w", str(root), "--format", "json",
              "--bootstrap", "200", "--seed", "7")
    assert res.returncode in (0, 1), res.stderr
    printed = json.loads(res.stdout)
    dry = cli_in_process("gate", "--bare", BARE, "--treatment", SKILL, "-w", str(root), "--rule",
                         "strictly-positive-top-k", "--dry-run")
    assert dry.exit_code in (0, 1) and "decision:" in dry.output and "recorded" not in dry.output
    con = connect(root)
    rows = _rows(con)
    assert len(rows) == 1  # the dry run left nothing
    row = rows[0]
    assert row["gate_id"] in res.stderr and row["run_id"] == row["treatment_run"] == SKILL
    assert row["decision"] == printed["decision"] and (res.returncode == 0) == (row["decision"] == "pass")
    assert json.loads(row["coefficients"]) == printed["coefficients"]
    assert row["n_pairs"] == printed["n_pairs"] and row["coverage"] == printed["coverage"]
    assert (row["rule"], row["bootstrap"], row["bootstrap_seed"], row["alpha"]) == ("significance", 200, 7, 0.05)
    fps = dict(con.execute("SELECT run_id, fingerprint FROM runs").fetchall())
    assert (row["bare_fingerprint"], row["treatment_fingerprint"]) == (fps[BARE], fps[SKILL])
    assert row["treatment_checkpoint_id"] == "ckpt-a" and "helps" in row["rule_text"] and row["tool_version"]
    assert json.loads(row["covariate_names"]) == [c["name"] for c in printed["coefficients"]]
    assert con.execute("SELECT command FROM loads WHERE load_id = ?", [row["gate_id"]]).fetchall() == [("gate",)]

    # the other rule, recorded through the library; both re-run from their rows alone
    args = gate_log.arguments(BARE, SKILL, "strictly-positive-top-k", budget=2)
    topk = gate_log.decide(con, args)
    topk_id = gate_log.record(root, con, topk, args)
    con = connect(root)
    for gate_id in (row["gate_id"], topk_id):
        stored, again = gate_log.rerun(con, gate_id)
        assert again.decision == stored["decision"]
        # equal up to the order DuckDB's parallel sums add X'X in (the significance rule sums in SQL)
        for new, old in zip(gate_log.coefficient_rows(again), json.loads(stored["coefficients"]), strict=True):
            assert new["name"] == old["name"]
            assert {k: v for k, v in new.items() if isinstance(v, float)} == pytest.approx(
                {k: v for k, v in old.items() if isinstance(v, float)}, rel=1e-9, abs=1e-12)
    kept = con.execute("SELECT name FROM gate_coefficients WHERE gate_id = ? AND status = 'selected' ORDER BY rank",
                       [topk_id]).fetchall()
    assert sorted(k[0] for k in kept) == sorted(topk.selected) and 0 < len(kept) <= 2
    n = con.execute("SELECT count(*) FROM gate_coefficients WHERE gate_id = ?", [row["gate_id"]]).fetchone()[0]
    assert n == len(printed["coefficients"])

    # lineage: the decisions live under the treatment run and go with it
    with pytest.raises(gate_log.GateRecordError, match=f"no gate decision 'nope'.*{topk_id}"):
        gate_log.recorded(con, "nope")
    remove_run(root, SKILL)
    assert Warehouse(root).snapshot().files("gate_results") == []
