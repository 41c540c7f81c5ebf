"""The RL kinds (preference, kto, prm, offline-rl) against an independent Python re-derivation.

The warehouse is tests/export_rl_support.py's (runner runs with shared states + the real traces). The Python
side reads the Parquet files directly (tests/test_analytics_support.py) and rebuilds states from the recorded
`messages`, the way docs/export_rl.md defines them.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest

from shopsim_wh.engines.db import connect
from shopsim_wh.export import export

from .export_rl_support import RUNS, rl_warehouse
from .test_analytics_support import final_rows
from .test_export_templates import _check_results, _common_prefix, _header, _render
from .test_export_templates import tokenizers as tokenizers  # the fixture: one tokenizer per chat template

GAMMA = 0.9
KINDS = ("preference", "kto", "prm", "offline-rl")
MESSAGE_COLUMNS = {"preference": ("prompt", "chosen", "rejected"), "kto": ("prompt", "completion"),
                   "prm": ("prompt", "steps"), "offline-rl": ("state", "action")}
PERSONA = re.compile(r"(\n\n)?用户个人文档：\n[^\n]*")


@pytest.fixture(scope="module")
def wh() -> Path:
    return rl_warehouse()


@pytest.fixture(scope="module")
def con(wh):
    c = connect(wh)
    yield c
    c.close()


@pytest.fixture(scope="module")
def exported(con, tmp_path_factory) -> dict:
    """Each RL kind exported once with the library's defaults (privacy flags off), on one connection, from the
    runner runs and the real traces (tau-bench, the one real source with rewards, for the kinds that need
    them); kind -> (out dir, ExportResult, rows as dicts)."""
    out = tmp_path_factory.mktemp("exports")
    runs = [r for (r,) in con.execute("SELECT run_id FROM runs").fetchall()]
    small = [r for r in runs if not r.startswith("openai-messages.")]  # tau-bench (the big one) only where rewards matter
    done = {}
    for kind in KINDS:
        res = export(kind, con, out / kind, gamma=GAMMA, runs=runs if kind in ("preference", "prm") else small)
        files = sorted((out / kind).glob("*.parquet"))
        done[kind] = (out / kind, res, [r for f in files for r in pq.read_table(f).to_pylist()])
    return done


@pytest.fixture(scope="module")
def rules(con) -> dict:
    """The taxonomy's step-scope label of each decision (lowest precedence), from the error_labels view."""
    return dict(((r, e, a, s), c) for r, e, a, s, c in con.execute(
        "SELECT run_id, episode_id, agent_id, step_idx, arg_min(code, precedence) FROM error_labels "
        "WHERE scope = 'step' GROUP BY ALL").fetchall())


def ours(exported, kind: str) -> list[dict]:
    return [r for r in exported[kind][2] if r["run_id"] in RUNS]


def _args(text):
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def _norm(m: dict) -> tuple:
    calls = tuple((c["function"]["name"], json.dumps(_args(c["function"]["arguments"]), sort_keys=True))
                  for c in json.loads(m["tool_calls"] or "[]"))
    content = m["content"]
    if m["role"] == "system" and content:
        content = PERSONA.sub("", content).lstrip("\n")  # the persona is not exported by default
    return m["role"], content, calls


@pytest.fixture(scope="module")
def model(wh) -> dict:
    """Plain-Python states, actions and Monte-Carlo values of the runner episodes (main agents)."""
    eps = {(e["run_id"], e["episode_id"]): e for e in final_rows(wh, "episodes") if e["run_id"] in RUNS}
    conv: dict[tuple, list] = defaultdict(list)
    for m in final_rows(wh, "messages"):
        if m["run_id"] in RUNS:
            conv[(m["run_id"], m["episode_id"], m["agent_id"])].append(m)
    for msgs in conv.values():
        msgs.sort(key=lambda m: m["msg_idx"])
    calls: dict[tuple, list] = defaultdict(list)
    for a in final_rows(wh, "actions"):
        if a["run_id"] in RUNS:
            calls[(a["run_id"], a["episode_id"], a["agent_id"], a["step_idx"])].append(a)
    steps = sorted((s for s in final_rows(wh, "steps") if s["run_id"] in RUNS and s["agent_id"] == "main"),
                   key=lambda s: (s["run_id"], s["episode_id"], s["step_idx"]))
    prefix_end = defaultdict(lambda: 10**9)
    for s in steps:
        key = (s["run_id"], s["episode_id"])
        prefix_end[key] = min(prefix_end[key], s["prompt_msg_count"])
    decisions = []
    for s in steps:
        key = (s["run_id"], s["episode_id"])
        msgs = conv[(*key, "main")]
        e = eps[key]
        decisions.append({
            "run_id": s["run_id"], "episode_id": s["episode_id"], "step_idx": s["step_idx"], "task_id": e["task_id"],
            "state": (tuple(_norm(m) for m in msgs[: s["prompt_msg_count"]]), s["tools_hash"]),
            "prefix": tuple(_norm(m) for m in msgs[: prefix_end[key]]),
            "action": (tuple((a["tool_name"], a["arguments"]) for a in sorted(
                calls[(*key, "main", s["step_idx"])], key=lambda a: a["call_idx"])), s["content"]),
            "reward": e["reward"], "rated": e["status"] == "completed" and e["reward"] is not None,
        })
    q: dict[tuple, list] = defaultdict(list)
    for d in decisions:
        if d["rated"]:
            q[(d["task_id"], d["state"], d["action"])].append(d["reward"])
    return {"episodes": eps, "decisions": decisions, "q": q}


def _margins(values_desc: list[float], min_margin: float, max_pairs: int) -> list[float]:
    """Best-with-worst pairing of docs/export.md, as the margins it yields (tie-independent)."""
    asc = sorted(values_desc)
    return [b - w for i, (b, w) in enumerate(zip(values_desc, asc, strict=True))
            if i < max_pairs and b - w > 0 and b - w >= min_margin - 1e-12]


def test_offline_rl_transitions_match_python(wh, exported, model):
    got = sorted(ours(exported, "offline-rl"), key=lambda r: (r["run_id"], r["episode_id"], r["step_idx"]))
    assert exported["offline-rl"][1].duplicates_removed == 0, "every transition is its own sample"
    by_ep = defaultdict(list)
    for r in got:
        by_ep[(r["run_id"], r["episode_id"])].append(r)
    expected_eps = {(d["run_id"], d["episode_id"]) for d in model["decisions"]}
    assert set(by_ep) == expected_eps
    for key, trans in by_ep.items():
        e = model["episodes"][key]
        n = len(trans)
        assert [r["t"] for r in trans] == list(range(n))
        for t, r in enumerate(trans):
            assert r["done"] == (t == n - 1)
            assert r["r_t"] == pytest.approx(e["reward"] if t == n - 1 else 0.0)
            assert r["return_to_go"] == pytest.approx(e["reward"] * GAMMA ** (n - 1 - t))
            assert (r["r_loose"], r["r_strict"], r["r_success"]) == (e["r_loose"], e["r_strict"], e["r_success"])
            assert "wrong_product" not in r["labels"]
            if t < n - 1:
                assert r["next_state"] == trans[t + 1]["state"]
            else:
                assert r["next_state"] is None
    # labels are the taxonomy's at that step; a protocol-error step carries its protocol_* code
    protocol = {(s["run_id"], s["episode_id"], s["step_idx"]) for s in final_rows(wh, "steps")
                if s["run_id"] in RUNS and s["agent_id"] == "main" and s["protocol_error"]}
    assert protocol, "the noisy run must have protocol errors"
    for r in got:
        has = any(c.startswith("protocol_") for c in r["labels"])
        assert has == ((r["run_id"], r["episode_id"], r["step_idx"]) in protocol)


def test_mc_values_and_prm_labels_match_python(exported, rules, model):
    got = [r for r in ours(exported, "prm") if r["agent_id"] == "main"]
    per_ep = defaultdict(list)
    for d in model["decisions"]:
        per_ep[(d["run_id"], d["episode_id"])].append(d)
    rated = {k for k, v in per_ep.items() if v[0]["rated"]}
    exported_eps = {(r["run_id"], r["episode_id"]) for r in got}
    assert exported_eps <= rated and len(got) + exported["prm"][1].duplicates_removed >= len(rated)
    shared = 0
    for r in got:
        ds = per_ep[(r["run_id"], r["episode_id"])]
        assert r["n_steps"] == len(ds) == len(r["steps"])
        assert [s["step_idx"] for s in r["steps"]] == [d["step_idx"] for d in ds]
        for d, step in zip(ds, r["steps"], strict=True):
            value, n, label, source = step["mc_value"], step["mc_count"], step["label"], step["label_source"]
            rewards = model["q"][(d["task_id"], d["state"], d["action"])]
            assert n == len(rewards) and value == pytest.approx(sum(rewards) / len(rewards))
            shared += n >= 2
            rule = rules.get((d["run_id"], d["episode_id"], "main", d["step_idx"]))
            if rule:
                assert (label, source) == (False, f"rule:{rule}")
            else:
                assert label == (value >= 0.5) and source == ("mc" if n >= 2 else "outcome")
    assert shared > 0, "the warehouse must have states shared by several rollouts"


def test_preference_pairs_match_python(exported, model):
    got = ours(exported, "preference")
    assert exported["preference"][1].duplicates_removed == 0
    assert {r["level"] for r in got} == {"trajectory", "step"}
    # trajectory level: per (task, prefix) group, the margins of best-with-worst pairing
    groups = defaultdict(list)
    for d in model["decisions"]:
        if d["rated"] and d["step_idx"] == min(x["step_idx"] for x in model["decisions"]
                                               if (x["run_id"], x["episode_id"]) == (d["run_id"], d["episode_id"])):
            groups[(d["task_id"], d["prefix"])].append(d)
    expected = sorted(round(m, 9) for g in groups.values()
                      for m in _margins(sorted((d["reward"] for d in g), reverse=True), 0.5, 8))
    traj = [r for r in got if r["level"] == "trajectory"]
    assert sorted(round(r["margin"], 9) for r in traj) == expected and expected
    for r in traj:
        c, w = model["episodes"][(r["run_id"], r["episode_id"])], model["episodes"][(r["rejected_run_id"], r["rejected_episode_id"])]
        assert c["task_id"] == w["task_id"] and r["margin"] == pytest.approx(c["reward"] - w["reward"])
        assert [m["role"] for m in map(json.loads, r["chosen"])][0] == "assistant"
    # step level: per (task, state) the action values; every pair names two actions of one state
    by_state = defaultdict(dict)
    reps = {}
    for d in model["decisions"]:
        if d["rated"]:
            k = (d["task_id"], d["state"])
            rewards = model["q"][(d["task_id"], d["state"], d["action"])]
            by_state[k][d["action"]] = sum(rewards) / len(rewards)
            rep = (d["run_id"], d["episode_id"], "main", d["step_idx"])
            reps[(k, d["action"])] = min(reps.get((k, d["action"]), rep), rep)
    expected = sorted(round(m, 9) for v in by_state.values() if len(v) >= 2
                      for m in _margins(sorted(v.values(), reverse=True), 0.25, 8))
    step = [r for r in got if r["level"] == "step"]
    assert sorted(round(r["margin"], 9) for r in step) == expected and expected
    where = {(d["run_id"], d["episode_id"], d["step_idx"]): d for d in model["decisions"]}
    for r in step:
        c, w = where[(r["run_id"], r["episode_id"], r["step_idx"])], where[(r["rejected_run_id"], r["rejected_episode_id"], r["rejected_step_idx"])]
        k = (c["task_id"], c["state"])
        assert (w["task_id"], w["state"]) == k, "a step pair shares its state"
        assert r["chosen_value"] == pytest.approx(by_state[k][c["action"]])
        assert r["rejected_value"] == pytest.approx(by_state[k][w["action"]])
        assert reps[(k, c["action"])] == (c["run_id"], c["episode_id"], "main", c["step_idx"])
        assert reps[(k, w["action"])] == (w["run_id"], w["episode_id"], "main", w["step_idx"])
        chosen = json.loads(r["chosen"][0])
        assert [(x["function"]["name"], x["function"]["arguments"]) for x in chosen.get("tool_calls", [])] == [
            (n, _args(a)) for n, a in c["action"][0]]


def test_kto_labels_follow_the_rule(wh, exported, rules):
    _, res, got = exported["kto"]
    steps = [s for s in final_rows(wh, "steps")]
    eps = {(e["run_id"], e["episode_id"]): e for e in final_rows(wh, "episodes")}
    scope = {r["run_id"] for r in got}
    assert {e["source_format"] for e in eps.values() if e["run_id"] in scope} >= {"shopsim-wh-runner", "claude-code", "atif"}
    completed = sum(eps[(s["run_id"], s["episode_id"])]["status"] == "completed" for s in steps if s["run_id"] in scope)
    assert res.rows + res.duplicates_removed == completed, "one row per decision of a completed episode"
    seen = set()
    for r in got:
        e = eps[(r["run_id"], r["episode_id"])]
        assert e["status"] == "completed"
        if e["reward"] is None and e["r_success"] is None:
            success = True  # a reward-less trace is a demonstration
        else:  # r_success as reported, else a task reward's reward >= 1 (docs/schema.md)
            success = (e["r_success"] if e["r_success"] is not None else float(e["reward"] >= 1)) == 1
        rule = rules.get((r["run_id"], r["episode_id"], r["agent_id"], r["step_idx"]))
        assert r["label"] == (success and rule is None), (r["run_id"], r["episode_id"], r["agent_id"], r["step_idx"], rule, success, r["label_source"], e["reward"], e["r_success"])
        assert r["label_source"] == (f"rule:{rule}" if rule else "outcome:success" if success else "outcome:failure")
        seen.add(r["label_source"].split(":")[0] + str(r["label"]))
    assert seen == {"ruleFalse", "outcomeTrue", "outcomeFalse"}


def test_kinds_load_with_datasets(exported):
    for kind, (out, res, _) in exported.items():
        files = sorted(str(p) for p in out.glob("*.parquet"))
        assert res.rows > 0 and files, kind
        ds = datasets.load_dataset("parquet", data_files=files, split="train")
        assert len(ds) == res.rows
        row = ds[0]
        for col in MESSAGE_COLUMNS[kind]:
            value = row[col]
            msgs = [m for step in value for m in step["completion"]] if kind == "prm" and col == "steps" else value
            assert all(isinstance(m, dict) and "role" in m for m in msgs), (kind, col)
        calls = [c for m in (row.get("chosen") or row.get("action") or row.get("completion") or []) for c in
                 (m.get("tool_calls") or [])]
        assert all(isinstance(c["function"]["arguments"], dict) for c in calls), kind


def file_text(path: Path) -> str:
    """Every string of a Parquet file, decoded (inside lists and structs too), joined with NUL."""
    out: list[str] = []

    def walk(v):
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, list | tuple):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for k, x in v.items():
                out.append(k)
                walk(x)

    for col in pq.read_table(path).columns:
        walk(col.to_pylist())
    return "\0".join(out)


def test_default_exports_hold_no_persona_reasoning_or_goal(wh, exported):
    personas = {e["persona"] for e in final_rows(wh, "episodes") if e["persona"]}
    reasoning = {s["reasoning"] for s in final_rows(wh, "steps") if s["reasoning"]}
    assert personas and reasoning, "the warehouse must hold personas and reasoning to test this"
    for kind, (out, _, _) in exported.items():
        for f in sorted(out.glob("*.parquet")):
            text = file_text(f)
            assert "用户个人文档：\n" not in text and not any(p in text for p in personas), (kind, f)
            assert not any(r in text for r in reasoning) and "reasoning_content" not in text, (kind, f)
            assert "wrong_product" not in text and "right_product" not in text, (kind, f)


def _loaded(exported, kind: str):
    out = exported[kind][0]
    return datasets.load_dataset("parquet", data_files=[str(f) for f in sorted(out.glob("*.parquet"))], split="train")


def _check_render(tok, template: str, prompt: list, continuation: list, tools: list) -> bool:
    """Render prompt + continuation; every call of the continuation appears in the part after the prompt as a
    JSON object (never JSON text quoted again), every tool result as often as the conversation holds it."""
    conversation = prompt + continuation
    if template == "gptoss" and any(len(m.get("tool_calls") or []) > 1 for m in conversation):
        return False  # gpt-oss's format carries one call per assistant message
    full = _render(tok, conversation, tools)
    _check_results(full, conversation, template)
    scope = full[_common_prefix(full, _render(tok, prompt, tools)):]
    calls = [c for m in continuation for c in m.get("tool_calls") or []]
    for call in calls:
        fn = call["function"]
        assert isinstance(fn["arguments"], dict), fn
        same = sum(1 for c in calls if c["function"] == fn)
        assert scope.count(_header(template, fn["name"])) >= same, (template, fn["name"])
        if fn["arguments"]:
            args = json.dumps(fn["arguments"], ensure_ascii=False)
            assert scope.count(args) == same, (template, args[:200])
            assert json.dumps(args, ensure_ascii=False) not in scope
    return True


def test_preference_and_prm_rows_render_through_the_chat_templates(exported, tokenizers):
    rendered = Counter()
    pref = _loaded(exported, "preference")
    picked = [next(r for r in pref if r["level"] == level and r["source_format"] == src)
              for level, src in (("step", "shopsim-wh-runner"), ("trajectory", "shopsim-wh-runner"),
                                 ("trajectory", "openai-messages"))]
    prm = _loaded(exported, "prm")
    picked_prm = [next(r for r in prm if r["source_format"] == src) for src in ("shopsim-wh-runner", "openai-messages")]
    for template, tok in tokenizers.items():
        for row in picked:
            for side in ("chosen", "rejected"):
                rendered[("preference", row["level"], template)] += _check_render(
                    tok, template, row["prompt"], row[side], row["tools"])
        for row in picked_prm:
            steps = [m for step in row["steps"] for m in step["completion"]]
            rendered[("prm", template)] += _check_render(tok, template, row["prompt"], steps, row["tools"])
    assert all(rendered[("preference", level, t)] > 0 for level in ("step", "trajectory") for t in tokenizers)
    assert all(rendered[("prm", t)] > 0 for t in tokenizers)


def test_task_batches_give_the_bytes_of_one_batch(con, exported, tmp_path, monkeypatch):
    """preference (like prm, same `-- batch: task` header) compares the rollouts of a task: its batches keep a
    task's episodes together, so an export in many batches equals the one-batch export of the fixture."""
    kind = "preference"
    runs = [r for (r,) in con.execute("SELECT run_id FROM runs").fetchall()]
    tasks = con.execute("SELECT count(DISTINCT task_id), count(*) FROM episodes").fetchone()
    per_batch = max(1, tasks[1] // 3)
    assert tasks[0] > 3  # several batches of whole tasks
    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", str(per_batch))
    res = export(kind, con, tmp_path / kind, gamma=GAMMA, runs=runs)
    one_dir, one = exported[kind][0], exported[kind][1]
    assert res.rows == one.rows > 0 and res.shards == one.shards
    for s in one.shards:
        assert (tmp_path / kind / s["file"]).read_bytes() == (one_dir / s["file"]).read_bytes()


def test_batch_episodes_header_sets_the_batches(con, exported, tmp_path, monkeypatch):
    """A kind's `-- batch-episodes:` header sizes its batches (preference declares 4000: its view stack costs
    ~0.5 CPU s to plan per batch): the same header at a size smaller than the fixture runs several batches and
    gives the bytes of the one-batch export; SHOPSIM_WH_EXPORT_BATCH_EPISODES still overrides it."""
    import dataclasses

    from shopsim_wh.export import batches, core
    from shopsim_wh.export.registry import get_kind

    spec = get_kind("preference")
    monkeypatch.delenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", raising=False)
    assert spec.batch_episodes == 4000 == batches.batch_episodes(spec)
    assert batches.batch_episodes(get_kind("kto")) == batches.DEFAULT_BATCH_EPISODES  # no header: the default
    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", "7")
    assert batches.batch_episodes(spec) == 7
    monkeypatch.delenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES")

    episodes = con.execute("SELECT count(*) FROM episodes").fetchone()[0]
    small = dataclasses.replace(spec, batch_episodes=max(1, episodes // 3))
    planned = []
    real_plan = batches.plan

    def plan(c, s, per_batch, episodes_where=None):  # the real planner; the batches it made are kept
        planned.append(real_plan(c, s, per_batch, episodes_where))
        return planned[-1]

    monkeypatch.setattr(core, "get_kind", lambda name: small)
    monkeypatch.setattr(batches, "plan", plan)
    runs = [r for (r,) in con.execute("SELECT run_id FROM runs").fetchall()]
    res = export("preference", con, tmp_path / "pref", gamma=GAMMA, runs=runs)
    assert planned == [-(-episodes // small.batch_episodes)] and planned[0] >= 3
    one_dir, one = exported["preference"][0], exported["preference"][1]
    assert res.rows == one.rows > 0 and res.shards == one.shards
    for s in one.shards:
        assert (tmp_path / "pref" / s["file"]).read_bytes() == (one_dir / s["file"]).read_bytes()


@pytest.mark.parametrize("value", ["0", "-3", "many", "2.5"])
def test_a_bad_batch_episodes_header_says_what_to_write(tmp_path, value):
    from shopsim_wh.export import ExportError
    from shopsim_wh.export.registry import parse_kind

    kind = tmp_path / "mini.sql"
    kind.write_text(f"-- export: mini\n-- grain: g\n-- sample: a\n-- filters: a\n-- description: d\n"
                    f"-- batch-episodes: {value}\nSELECT 1;\n")
    with pytest.raises(ExportError, match="must be a positive whole number of episodes"):
        parse_kind(kind)
    kind.write_text(kind.read_text().replace(f"batch-episodes: {value}", "batch-episodes: 40"))
    assert parse_kind(kind).batch_episodes == 40


@pytest.mark.parametrize("window,max_tokens", [(None, None), (1, None), (None, 700)])
def test_a_decisions_subset_gives_the_full_views_rows(wh, window, max_tokens):
    """export_decisions restricted to export_decisions_wanted (preference's pairs, `-- decisions:`) reads only
    the wanted decisions' calls and their agents' messages up to the last wanted turn: each row equals the full
    view's, contexts trimmed by --window / --max-tokens, answers and tool calls included. The wanted set mixes
    first, middle and last turns, main and sub-agents, recorded and rendered conversations."""
    from shopsim_wh.engines.db import install_exports
    from shopsim_wh.export.scope import bind_params

    c = connect(wh)
    try:
        install_exports(c)
        bind_params(c, {"export_window": window, "export_max_tokens": max_tokens})
        c.execute("CREATE OR REPLACE TEMP TABLE export_scope AS SELECT run_id FROM runs")
        key = "run_id, episode_id, agent_id, step_idx"
        full = c.execute(f"SELECT * FROM export_decisions ORDER BY {key}").fetchall()
        names = [d[0] for d in c.description]
        k = [names.index(n) for n in ("run_id", "episode_id", "agent_id", "step_idx")]
        wanted = {tuple(r[i] for i in k) for j, r in enumerate(full) if j % 3 == 0 or r[names.index("is_last_turn")]}
        assert any(w[2] != "main" for w in wanted) and any(w[3] > 2 for w in wanted)
        assert any(r[names.index("tool_calls" if "tool_calls" in names else "n_calls")] for r in full)
        c.executemany("INSERT INTO export_decisions_wanted VALUES (?, ?, ?, ?)", [list(w) for w in sorted(wanted)])
        c.execute("SET VARIABLE export_decisions_subset = true")
        subset = c.execute(f"SELECT * FROM export_decisions ORDER BY {key}").fetchall()
        expected = [r for r in full if tuple(r[i] for i in k) in wanted]
        assert len(subset) == len(wanted) == len(expected) < len(full)
        assert subset == expected
        assert any(len(r[names.index("observation")]) for r in subset)  # answers are compared, not all empty
        assert any(len(r[names.index("prompt")]) > 3 for r in subset)  # and contexts beyond the prefix
    finally:
        c.close()


def test_monte_carlo_values_do_not_depend_on_the_order_rows_are_summed(tmp_path):
    """mc_value is a mean over rollouts; summed as floats, its last bit followed the order DuckDB's threads added
    the rows in, and prm's shards changed from run to run (sha256). The sums are exact now: same bytes each run."""
    import hashlib

    from shopsim_wh.demo.shop import WarehouseSpec, generate

    wh = tmp_path / "wh"
    generate(wh, 600, WarehouseSpec(runs=1, repeats=3, coding_episodes=0))
    digests = set()
    for i in range(4):
        res = export("prm", wh, tmp_path / f"prm{i}", where="true", format="jsonl")
        digests.add(tuple(hashlib.sha256((tmp_path / f"prm{i}" / s["file"]).read_bytes()).hexdigest()
                          for s in res.shards))
    assert len(digests) == 1
