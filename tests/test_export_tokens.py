"""The token exports (issue 31, part C1): `rl-tokens`, `slime-samples` and the `prm` export's own stepwise schema.

One warehouse, built as users build it: the runner on the embedded default with `model.record_tokens: true` (the
policy answers token ids in the built-in tokenizer, as vLLM does; persona tasks, so the privacy rule has work), then
slime's own `torch.save` rollout dumps with the ShopSimRL traces they came from (tests/fixtures/slime, written by
real torch from facts) through `shopsim-wh ingest --format slime`. Then the installed CLI exports, and the tests
hold the outputs against what the other writers recorded, read independently:

* slime-samples: every valid sample of the dumps (read here as the zip / legacy pickles torch writes, no torch)
  comes back as one JSONL line equal to it field for field: tokens, loss_mask, rollout_log_probs exactly;
* rl-tokens: loads with `datasets`; on every row the tokens under the mask are the sampled ids: over an episode's
  samples they are the concatenation of its `model_turn_tokens.completion_token_ids` (runner), the dump's own
  (slime); both mask conventions agree; the GRPO advantage is recomputed here;
* prm: the default `steps` shape and `--prm-shape trl-stepwise` both export, the TRL shape loads in `datasets` with
  `prompt` / `completions` / `labels`, and both carry the same labels.
"""

from __future__ import annotations

import json
import math
import pickle
import statistics
import zipfile
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from shopsim_wh.core.tokenizer import builtin
from shopsim_wh.engines.db import connect, install_exports
from shopsim_wh.export import ExportError, export

from .helpers import write_config
from .journeys import ok, shopsim

REPO = Path(__file__).resolve().parents[1]
SLIME = REPO / "tests" / "fixtures" / "slime" / "train"
# slime's Sample dataclass fields (slime/utils/types.py), in order: what Sample.from_dict takes
SAMPLE_FIELDS = ("group_index", "index", "prompt", "tokens", "multimodal_inputs", "multimodal_train_inputs",
                 "response", "response_length", "label", "reward", "loss_mask", "weight_versions",
                 "rollout_log_probs", "rollout_routed_experts", "remove_sample", "teacher_log_probs",
                 "mopd_teacher_log_probs", "status", "metadata", "generate_function_path", "train_metadata",
                 "session_id", "non_generation_time", "spec_info", "prefix_cache_info")
STATUSES = {"pending", "completed", "truncated", "aborted", "failed"}


def read_dump(path: Path) -> dict:
    """A `torch.save` file of plain Python data, read without torch: the zip format's `<archive>/data.pkl`, or the
    legacy format's pickles (magic number, protocol version, system info, then the object)."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            return pickle.loads(z.read(next(n for n in z.namelist() if n.endswith("/data.pkl"))))
    with path.open("rb") as f:
        magic, protocol, _sys_info = pickle.load(f), pickle.load(f), pickle.load(f)
        assert (magic, protocol) == (0x1950A86A20F9469CFC6C, 1001)
        return pickle.load(f)


def _parquet_rows(out: Path) -> list[dict]:
    return [r for f in sorted(out.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def _jsonl(out: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(out.glob("*.jsonl")) for line in f.read_text().splitlines()]


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    base = tmp_path_factory.mktemp("export_tokens")
    write_config(base / "c.yaml", experiment={"name": "tok", "seed": 5},
                 tasks={"split": "train", "sample_size": 2, "repeats": 2},
                 model={"name": "scripted-noisy", "record_tokens": True}, environment={"persona": True})
    ok(shopsim("run", "c.yaml", "-w", "wh", "-q", cwd=base))
    ok(shopsim("ingest", SLIME, "--format", "slime", "-w", "wh", "-q", cwd=base))
    out = base / "out"
    ok(shopsim("export", "rl-tokens", "-w", "wh", "-o", out / "rl", "--include-persona", "--include-reasoning",
               "--quiet", cwd=base))
    ok(shopsim("export", "slime-samples", "-w", "wh", "-o", out / "slime", "-f", "jsonl", "--where",
               "source = 'slime'", "--quiet", cwd=base))
    bad = shopsim("export", "prm", "-w", "wh", "-o", out / "x", "--prm-shape", "trl", cwd=base)
    dumps = {p.name: read_dump(p) for p in sorted((SLIME / "dumps").glob("*.pt"))}
    con = connect(base / "wh")  # the library's exports below share it (the kinds' views installed once)
    install_exports(con, {"export_prm", "export_prm_trl_stepwise", "export_rl_tokens"})
    export("prm", con, out / "prm")
    export("prm", con, out / "prm-trl", prm_shape="trl-stepwise")
    yield {"base": base, "wh": base / "wh", "out": out, "dumps": dumps, "con": con, "bad_shape": bad}
    con.close()


def _valid(sample: dict) -> bool:
    """slime's own invariant (the ingest rejects a sample that breaks it): one mask value and one logprob per
    response token, within the tokens."""
    n = sample["response_length"]
    return (n <= len(sample["tokens"]) and (sample["loss_mask"] is None or len(sample["loss_mask"]) == n)
            and (sample["rollout_log_probs"] is None or len(sample["rollout_log_probs"]) == n))


def test_a_slime_sample_goes_in_and_comes_out_the_same(flow):
    """Every valid sample of both dumps (zip and legacy format) is one line, equal to the dump's `to_dict()` field
    for field (tokens, loss mask and logprobs exactly, the reward object and the metadata whole), with every field
    `Sample.from_dict` takes; the one broken sample is not there."""
    originals = [s for d in flow["dumps"].values() for s in d["samples"]]
    valid = [s for s in originals if _valid(s)]
    assert len(valid) == len(originals) - 1 >= 6  # the fixture's one broken sample
    lines = _jsonl(flow["out"] / "slime")
    assert len(lines) == len(valid)

    def by_episode(samples):
        out = defaultdict(list)
        for s in samples:
            out[(s["group_index"], s["index"])].append(json.dumps(s, sort_keys=True))
        return {k: sorted(v) for k, v in out.items()}

    assert by_episode(lines) == by_episode(valid)  # whole objects: an episode's fan-out compared as a multiset
    for line in lines:
        assert list(line)[:len(SAMPLE_FIELDS)] == list(SAMPLE_FIELDS) and line["status"] in STATUSES
    placeholder = [s for s in lines if s["remove_sample"]]
    assert placeholder and all(s["tokens"] == [0, 0] and s["loss_mask"] == [0] for s in placeholder)
    assert all(line["metadata"]["shopsim_trace_path"].endswith(".json") for line in lines)
    assert any(isinstance(line["reward"], dict) and "r_strict" in line["reward"] for line in lines)


def test_rl_tokens_masked_tokens_are_the_sampled_ids(flow):
    """On every row the tokens under the mask are what the model sampled: runner rows against the turns the runner
    recorded (model_turn_tokens), slime rows against the dump; the two mask conventions say the same."""
    import datasets

    files = sorted(str(p) for p in (flow["out"] / "rl").glob("*.parquet"))
    ds = datasets.load_dataset("parquet", data_files=files, split="train")
    rows = list(ds)
    assert {r["source"] for r in rows} == {"runner", "slime"} and not any(r["remove_sample"] for r in rows)
    for r in rows:
        ids, mask, full = r["input_ids"], r["loss_mask"], r["assistant_mask"]
        assert len(ids) == r["total_length"] == r["prompt_length"] + r["response_length"] == len(full)
        assert len(mask) == r["response_length"] == len(r["rollout_logprobs"]) and sum(mask) == r["trainable_tokens"]
        assert full == [0] * r["prompt_length"] + mask
        assert [t for t, m in zip(ids, full, strict=True) if m] == \
            [t for t, m in zip(ids[r["prompt_length"]:], mask, strict=True) if m]
        assert all(lp == 0.0 for lp, m in zip(r["rollout_logprobs"], mask, strict=True) if not m)

    turns = defaultdict(list)
    for run, ep, ids in flow["con"].execute(
            "SELECT run_id, episode_id, completion_token_ids FROM model_turn_tokens WHERE agent_id = 'main' "
            "ORDER BY run_id, episode_id, step_idx").fetchall():
        turns[(run, ep)] += ids
    sampled = defaultdict(list)
    for r in sorted((r for r in rows if r["source"] == "runner"), key=lambda r: (r["episode_id"], r["sample_idx"])):
        assert r["tokenizer_id"] == "builtin:shopsim-bytes-v1" and r["tokenizer_hash"]
        sampled[(r["run_id"], r["episode_id"])] += [t for t, m in zip(r["input_ids"], r["assistant_mask"],
                                                                       strict=True) if m]
    assert sampled and sampled == {k: v for k, v in turns.items() if k in sampled}
    assert len(sampled) == len(turns) == 4  # every episode of the run (2 tasks x 2 repeats) exported
    assert sum(r["source"] == "runner" for r in rows) > len(sampled)  # episodes fan out into several samples

    dumped = defaultdict(list)
    for d in flow["dumps"].values():
        for s in d["samples"]:
            if _valid(s) and not s["remove_sample"]:
                dumped[(s["group_index"], s["index"])].append((s["tokens"], s["loss_mask"], s["rollout_log_probs"]))
    mine = defaultdict(list)
    for r in (r for r in rows if r["source"] == "slime"):
        mine[(r["group_index"], r["sample_index"])].append((r["input_ids"], r["loss_mask"], r["rollout_logprobs"]))
    assert {k: sorted(v) for k, v in mine.items()} == {k: sorted(v) for k, v in dumped.items()}


def test_rl_tokens_advantage_is_grpo_over_the_group(flow):
    """No source here records an advantage: every row carries GRPO's, recomputed here per (run, rollout step,
    group) from each episode's reward (remove_sample placeholders out), with the sample standard deviation."""
    rows = _parquet_rows(flow["out"] / "rl")
    reward = {}
    for r in rows:
        reward[(r["run_id"], r["rollout_step"], r["group_index"], r["episode_id"])] = r["reward"]
    groups = defaultdict(list)
    for (run, step, group, _), value in reward.items():
        groups[(run, step, group)].append(value)
    assert any(len(v) > 1 for v in groups.values())
    for r in rows:
        values = groups[(r["run_id"], r["rollout_step"], r["group_index"])]
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        want = 0.0 if sd == 0 else (r["reward"] - statistics.fmean(values)) / (sd + 1e-6)
        assert r["advantage_source"] == "grpo" and math.isclose(r["advantage"], want, abs_tol=1e-9), r["sample_id"]


def test_samples_carrying_persona_or_reasoning_need_the_flags(flow, tmp_path):
    """The persona tasks render the user persona into every runner sample's prompt tokens: without
    --include-persona none of them is exported (the slime samples, which carry none, are). The embedded policy's
    sampled ids hold no reasoning, except a turn cut by the length limit, whose ids are its reasoning: without
    --include-reasoning exactly the samples whose decoded response holds a turn's reasoning are left out."""
    every = _parquet_rows(flow["out"] / "rl")
    export("rl-tokens", flow["con"], tmp_path / "default")
    rows = _parquet_rows(tmp_path / "default")
    assert rows and {r["sample_id"] for r in rows} == {r["sample_id"] for r in every if r["source"] == "slime"}

    export("rl-tokens", flow["con"], tmp_path / "persona", include_persona=True)
    kept = {r["sample_id"] for r in _parquet_rows(tmp_path / "persona")}
    reasoning = defaultdict(list)
    for ep, text in flow["con"].execute("SELECT episode_id, reasoning FROM steps WHERE reasoning <> ''").fetchall():
        reasoning[ep].append(text)
    tok = builtin()
    holds = {r["sample_id"] for r in every if r["source"] == "runner"
             and any(x in tok.decode(r["input_ids"][r["prompt_length"]:]) for x in reasoning[r["episode_id"]])}
    assert holds and kept == {r["sample_id"] for r in every} - holds


def test_a_small_batch_size_gives_the_same_shards(flow, tmp_path, monkeypatch):
    """The token kinds are computed in one batch whatever the batch size (the samples of the episodes whose traces
    were not ingested, group 2's, belong to no batch of episodes): the shards are those the CLI wrote."""
    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", "2")
    res = export("rl-tokens", flow["con"], tmp_path / "rl", include_persona=True, include_reasoning=True)
    one = json.loads((flow["out"] / "rl" / "manifest.json").read_text())
    assert res.rows == one["rows"] and [s["sha256"] for s in res.shards] == [s["sha256"] for s in one["shards"]]
    assert res.duplicates_removed == 0 and any(r["task_id"] is None for r in _parquet_rows(tmp_path / "rl"))


def test_prm_default_shape_is_one_struct_per_step(flow):
    rows = _parquet_rows(flow["out"] / "prm")
    assert rows and {"prompt", "steps", "tools"} <= set(rows[0]) and "completions" not in rows[0]
    sources = set()
    for r in rows:
        assert len(r["steps"]) == r["n_steps"] > 0
        assert [s["step_idx"] for s in r["steps"]] == sorted(s["step_idx"] for s in r["steps"])
        for s in r["steps"]:
            msgs = [json.loads(m) for m in s["completion"]]
            assert msgs[0]["role"] == "assistant" and isinstance(s["label"], bool)
            assert s["label_source"] in ("mc", "outcome") or s["label_source"].startswith("rule:")
            assert 0 <= s["mc_value"] <= 1 and s["mc_count"] >= 1
            sources.add(s["label_source"].split(":")[0])
    assert "rule" in sources and sources & {"mc", "outcome"}  # the noisy policy breaks the protocol
    manifest = json.loads((flow["out"] / "prm" / "manifest.json").read_text())
    assert manifest["shape"] == "steps" and manifest["trl"] == "-"


def test_prm_trl_stepwise_shape_loads_in_datasets_with_the_same_labels(flow):
    import datasets

    files = sorted(str(p) for p in (flow["out"] / "prm-trl").glob("*.parquet"))
    ds = datasets.load_dataset("parquet", data_files=files, split="train")
    assert {"prompt", "completions", "labels"} <= set(ds.column_names) and "steps" not in ds.column_names
    default = {r["sample_id"]: r for r in _parquet_rows(flow["out"] / "prm")}
    assert sorted(ds["sample_id"]) == sorted(default)
    for row in ds:
        steps = default[row["sample_id"]]["steps"]
        assert row["labels"] == [s["label"] for s in steps] and len(row["completions"]) == len(steps)
        assert all(isinstance(m, dict) and m["role"] for step in row["completions"] for m in step)
        assert [m["role"] for m in row["completions"][0]] == [json.loads(m)["role"] for m in steps[0]["completion"]]
        assert all(m["role"] in ("system", "user") for m in row["prompt"])
    manifest = json.loads((flow["out"] / "prm-trl" / "manifest.json").read_text())
    assert manifest["shape"] == "trl-stepwise" and manifest["trl"].startswith("stepwise supervision")


def test_shape_options_are_checked(flow, tmp_path):
    bad = flow["bad_shape"]
    assert bad.returncode == 2 and "kind prm has no shape 'trl'; its shapes: steps, trl-stepwise" in bad.stderr
    assert not (flow["base"] / "out" / "x").exists()
    with pytest.raises(ExportError, match="no shape 'nope'; its shapes: steps, trl-stepwise"):
        export("prm", flow["con"], tmp_path / "a", prm_shape="nope")
    with pytest.raises(ExportError, match="--prm-shape applies to the prm export only"):
        export("rl-tokens", flow["con"], tmp_path / "b", prm_shape="steps")


def test_export_list_describes_the_token_kinds_with_an_example():
    """docs/export.md is `export --list` over the fixture warehouse (tests/test_docs.py keeps it current)."""
    text = (REPO / "docs" / "export.md").read_text()
    for kind, column in (("rl-tokens", "assistant_mask"), ("slime-samples", "sample"), ("prm", "steps")):
        section = text.split(f"### `{kind}`", 1)[1].split("\n### ", 1)[0]
        assert f"| `{column}` |" in section and "- grain: one row per" in section
        example = json.loads(section.split("```json\n", 1)[1].split("\n```", 1)[0])
        assert example and example["sample_id"], kind
