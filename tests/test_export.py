"""`shopsim-wh export`: every kind from runner episodes and real ingested traces, loads with `datasets`, keeps
the privacy, decontamination, determinism and manifest guarantees (issue 10)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from shopsim_wh.core.errors import QueryRefused, TestSplitGuard
from shopsim_wh.export import ExportError, export, list_kinds
from shopsim_wh.store.warehouse import Warehouse

from . import export_fixtures as fx
from .export_fixtures import PERSONA_CANARY, REASONING_CANARY

_fixtures = fx.export_wh, fx.export_con, fx.every_kind
_wh, _con, _kinds = _fixtures  # pytest finds fixtures among module attributes

# the sources each kind must export from (sft-summary: only Claude Code records summaries; sft-subagent: only
# sources with sub-agents)
EXPECTED = {
    "sft-summary": {"claude-code"},
    "sft-subagent": {"claude-code", "agent-multi-turn"},
    # prm needs a reward; preference needs several rated rollouts of one task (this warehouse has one per task)
    # and sft-reasoning a teacher's answers: tests/test_export_rl.py and test_synth_reasoning.py build warehouses
    # that have them
    "prm": {"shopsim-wh-runner", "shopsimrl-v4", "openai-messages"},
    "preference": set(),
    "sft-reasoning": set(),
    # the token kinds read the training namespace, which this warehouse has none of (no record_tokens run, no
    # slime dump): tests/test_export_tokens.py exports them from both writers
    "rl-tokens": set(),
    "slime-samples": set(),
    # the RL prompt kinds read shop tasks only: no other source has an environment to replay its first turn in
    "verl-rl": {"shopsim-wh-runner", "shopsimrl-v4"},
    "trl-grpo": {"shopsim-wh-runner", "shopsimrl-v4"},
}
ALL = {"shopsim-wh-runner", "shopsimrl-v4", "claude-code", "agent-multi-turn", "openai-messages", "atif"}


def _strings(value):
    """Every string inside a decoded value (JSON columns parsed, recursively)."""
    if isinstance(value, str):
        yield value
        if value[:1] in "[{":
            try:
                yield from _strings(json.loads(value))
            except ValueError:
                pass
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _rows(out: Path) -> list[dict]:
    return [r for f in sorted(out.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def test_every_kind_exports_from_every_source_and_loads_with_datasets(every_kind):
    import datasets

    assert {"ntp", "sft-trajectory", "sft-action", "sft-observation", "sft-subagent", "sft-summary",
            "sft-outcome"} <= set(every_kind)
    for name, (res, out) in every_kind.items():
        rows = _rows(out)
        assert len(rows) == res.rows and (res.rows > 0 or EXPECTED.get(name) == set()), name
        if not rows:
            continue
        sources = {r["source_format"] for r in rows}
        assert EXPECTED.get(name, ALL) <= sources, (name, sources)
        assert len({r["sample_id"] for r in rows}) == len(rows)
        ds = datasets.load_dataset("parquet", data_files=[str(f) for f in sorted(out.glob("*.parquet"))], split="train")
        assert len(ds) == res.rows
        for col in ("prompt", "completion", "messages"):
            if col in ds.column_names:
                for row in ds.select(range(min(len(ds), 40)))[col]:
                    for msg in row:
                        assert isinstance(msg, dict) and msg["role"] in ("system", "user", "assistant", "tool")
                        for call in msg.get("tool_calls") or []:
                            args = call["function"]["arguments"]
                            assert isinstance(args, dict) or not _is_object_text(args), args
    families = {r["family"] for r in _rows(every_kind["sft-subagent"][1])}
    assert families == {"delegate", "subagent"}
    schema = pq.read_schema(next(every_kind["sft-action"][1].glob("*.parquet")))
    assert str(schema.field("prompt").type) == "list<element: extension<arrow.json>>"


def _is_object_text(value) -> bool:
    try:
        return isinstance(json.loads(value), dict)
    except (TypeError, ValueError):
        return False


def test_default_exports_hold_no_reasoning_persona_or_goal(every_kind, export_con, export_wh, tmp_path):
    secrets = {REASONING_CANARY, PERSONA_CANARY, "用户个人文档：\n"} | export_wh["goals"]  # the persona section header
    scanned = 0
    for name, (_, out) in every_kind.items():
        for f in out.glob("*.parquet"):
            table = pq.read_table(f)
            for col in table.column_names:
                for value in table.column(col).to_pylist():
                    for s in _strings(value):
                        scanned += 1
                        assert not any(c in s for c in secrets), (name, col, s[:200])
    assert scanned > 10_000
    manifest = json.loads((every_kind["sft-action"][1] / "manifest.json").read_text())
    assert manifest["privacy"]["reasoning_included"] is False and manifest["privacy"]["persona_included"] is False
    # the canaries were planted: the flags bring them out
    res = export("sft-action", export_con, tmp_path / "flags", where="source_format = 'shopsim-wh-runner'",
                 include_reasoning=True, include_persona=True)
    text = "\n".join(s for r in _rows(tmp_path / "flags") for s in _strings(r["prompt"] + r["completion"]))
    assert REASONING_CANARY in text and PERSONA_CANARY in text and res.rows > 0
    assert not any(g in text for g in export_wh["goals"])


def test_reexport_is_byte_identical_and_the_manifest_describes_it(export_wh, tmp_path):
    root = export_wh["root"]
    runs = ["t", *(r for r in _run_ids(root) if r.startswith("claude-code"))]
    a = export("sft-action", root, tmp_path / "a", runs=runs, shard_rows=7, window=2, max_tokens=3000)
    b = export("sft-action", root, tmp_path / "b", runs=runs, shard_rows=7, window=2, max_tokens=3000)
    assert len(a.shards) > 1 and a.shards == b.shards
    for s in a.shards:
        assert (tmp_path / "a" / s["file"]).read_bytes() == (tmp_path / "b" / s["file"]).read_bytes()
    m = json.loads((tmp_path / "a" / "manifest.json").read_text())
    kind = next(k for k in list_kinds() if k.name == "sft-action")
    assert m["kind"] == "sft-action" and m["kind_sql_sha256"] == hashlib.sha256(kind.path.read_bytes()).hexdigest()
    assert m["warehouse"]["snapshot"] == Warehouse(root).snapshot().version
    assert m["parameters"]["window"] == 2 and m["parameters"]["max_tokens"] == 3000
    assert m["rows"] == sum(s["rows"] for s in m["shards"]) == a.rows
    assert m["filters"]["where_is_kind_default"] is True
    for s in m["shards"]:
        f = tmp_path / "a" / s["file"]
        assert hashlib.sha256(f.read_bytes()).hexdigest() == s["sha256"] and f.stat().st_size == s["bytes"]
    assert not list((tmp_path / "a").glob(".tmp-*"))
    rows_by_shard = [pq.read_table(tmp_path / "a" / s["file"]).to_pylist() for s in m["shards"]]
    episodes = [{r["episode_id"] for r in rows} for rows in rows_by_shard]
    assert sum(len(e) for e in episodes) == len(set().union(*episodes))  # an episode lives in one shard
    from shopsim_wh.export.batches import shard_of

    assert all(shard_of(e, len(episodes)) == i for i, eps in enumerate(episodes) for e in eps)  # the documented one
    for rows in rows_by_shard:
        assert [r["sample_id"] for r in rows] == sorted(r["sample_id"] for r in rows)
    # default selection: completed and successful only; fingerprints of the source runs recorded
    assert all(r["status"] == "completed" and r["success"] for rows in rows_by_shard for r in rows)
    from shopsim_wh.engines.db import connect

    con = connect(root)
    fps = dict(con.execute("SELECT run_id, fingerprint FROM runs WHERE run_id IN (SELECT unnest(?))", [runs]).fetchall())
    assert {r["run_id"]: r["fingerprint"] for r in m["source_runs"]} == fps
    assert m["decontamination"]["clean"] is True and m["decontamination"]["shop_tasks_checked"] > 0


def _run_ids(root) -> list[str]:
    return sorted(Warehouse(root).snapshot().run_ids())


def test_exact_duplicates_are_removed_and_counted(every_kind, export_con, export_wh):
    original, copy = export_wh["duplicate_of"]  # the same tau-bench run ingested twice under two trial numbers
    rows = _rows(every_kind["sft-action"][1])
    res = every_kind["sft-action"][0]
    n = export_con.execute("SELECT count(*) FROM steps WHERE episode_id = ? AND protocol_error IS NULL AND "
                           "policy_failure IS NULL", [original]).fetchone()[0]
    assert res.duplicates_removed >= n > 0
    manifest = json.loads((every_kind["sft-action"][1] / "manifest.json").read_text())
    assert manifest["duplicates_removed"] == res.duplicates_removed
    assert manifest["rows_selected"] == manifest["rows"] + manifest["duplicates_removed"]
    keys = [json.dumps([r["prompt"], r["completion"], r["tools"]]) for r in rows]
    assert len(keys) == len(set(keys))
    # of each identical pair the row with the smaller sample_id stays, from either episode
    assert len([r for r in rows if r["episode_id"] in (original, copy)]) == n


def test_context_window_and_budget_match_ir_context(export_con):
    export_con.execute("CREATE OR REPLACE TEMP TABLE export_scope AS SELECT run_id FROM runs")
    export_con.execute("SET VARIABLE export_include_reasoning = true")
    export_con.execute("SET VARIABLE export_include_persona = true")
    for k, budget in ((2, None), (None, 1200)):
        export_con.execute("SET VARIABLE export_window = ?", [k])
        export_con.execute("SET VARIABLE export_max_tokens = ?", [budget])
        rows = export_con.execute("""SELECT run_id, episode_id, agent_id, step_idx, len(prompt), prompt_tokens
                                     FROM export_decisions WHERE step_idx >= 3 ORDER BY decision_id LIMIT 8""").fetchall()
        assert len(rows) == 8
        for run, ep, agent, step, n, tokens in rows:
            ref = export_con.execute(
                "SELECT count(*), sum(est_tokens) FROM ir_context(?, ?, ?, ?, ?)" if budget is None else
                "SELECT count(*), sum(est_tokens) FROM ir_context_budget(?, ?, ?, ?, ?)",
                [run, ep, agent, step, k if budget is None else budget]).fetchone()
            assert (n, tokens) == ref, (run, ep, agent, step)
    for name in ("export_window", "export_max_tokens", "export_include_reasoning", "export_include_persona"):
        export_con.execute(f"SET VARIABLE {name} = NULL")


def test_where_is_checked_and_applied(export_con, tmp_path):
    res = export("sft-action", export_con, tmp_path / "atif", where="source_format = 'atif' AND est_tokens > 0")
    assert res.rows > 0 and {r["source_format"] for r in _rows(tmp_path / "atif")} == {"atif"}
    for bad, msg in (("status = 'completed'; DROP TABLE runs", "contains ';'"), ("right_product", "not a filter column"),
                     ("run_id IN (SELECT run_id FROM runs)", "subquery")):
        with pytest.raises((ExportError, QueryRefused), match=msg):  # ';' is the sandbox's refusal
            export("sft-action", export_con, tmp_path / "bad", where=bad)


def test_jsonl_lines_hold_objects(export_con, tmp_path):
    res = export("sft-action", export_con, tmp_path / "j", format="jsonl", where="source_format = 'claude-code'")
    lines = [json.loads(x) for f in sorted((tmp_path / "j").glob("*.jsonl")) for x in f.read_text().splitlines()]
    assert len(lines) == res.rows > 0
    calls = [c for r in lines for c in r["completion"][0].get("tool_calls", [])]
    assert calls and all(isinstance(c["function"]["arguments"], dict) for c in calls)


def test_test_split_is_refused_without_allow_test(tmp_path):
    from shopsim_wh.demo.shopsimrl_v4 import RecordSpec, line, record
    from shopsim_wh.ingest import IngestOptions, ingest

    f = tmp_path / "test.jsonl"
    small = RecordSpec(steps=2, obs_words=10, think_words=4, split="test")
    f.write_bytes(b"".join(line(record(3000 + i, spec=small)) for i in range(2)))
    ingest([f], tmp_path / "wh", IngestOptions(parallel=False))
    from shopsim_wh.engines.db import connect

    con = connect(tmp_path / "wh")
    with pytest.raises(TestSplitGuard, match="--allow-test"):
        export("sft-action", con, tmp_path / "out")
    res = export("sft-action", con, tmp_path / "out2", allow_test=True, where="true")
    assert res.rows > 0 and res.decontamination["train_only"] is False and res.decontamination["clean"] is False


def test_shopsimrl_v4_export_ingests_back(export_con, tmp_path):
    from shopsim_wh.engines.db import connect
    from shopsim_wh.ingest import IngestOptions, ingest

    res = export("shopsimrl-v4", export_con, tmp_path / "v4", runs=["t"], format="jsonl", where="true")
    lines = [json.loads(x) for x in (tmp_path / "v4" / res.shards[0]["file"]).read_text().splitlines()]
    assert len(lines) == res.rows == 3 and all(r["schema_version"] == "shopsimrl-episode-v4" for r in lines)
    s = ingest([tmp_path / "v4"], tmp_path / "wh2", IngestOptions(parallel=False))
    assert s.as_dict()["episodes_landed"] == 3
    a = export_con.execute("SELECT episode_id, reward FROM episodes WHERE run_id = 't' ORDER BY 1").fetchall()
    b = connect(tmp_path / "wh2").execute("SELECT episode_id, reward FROM episodes ORDER BY 1").fetchall()
    assert a == b


def test_cli_lists_kinds_and_exports_with_a_json_summary(export_wh, tmp_path):
    from typer.testing import CliRunner

    from shopsim_wh.cli.main import app

    root = str(export_wh["root"])
    res = CliRunner().invoke(app, ["export", "--list", "-w", root, "--summary-format", "json"])
    assert res.exit_code == 0, res.output
    kinds = {k["name"]: k for k in json.loads(res.stdout)}
    assert set(kinds) == {k.name for k in list_kinds()}
    assert kinds["sft-action"]["example"]["completion"][0]["role"] == "assistant"
    assert ["prompt", "JSON[]"] in kinds["sft-action"]["columns"]
    res = CliRunner().invoke(app, ["export", "sft-trajectory", "--out", str(tmp_path / "o"), "-w", root,
                                   "--runs", "t", "--quiet", "--summary-format", "json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["kind"] == "sft-trajectory" and summary["rows"] == 3 == len(_rows(tmp_path / "o"))
    res = CliRunner().invoke(app, ["export", "sft-action", "-w", root])
    assert isinstance(res.exception, ExportError) or "--out" in str(res.exception)
