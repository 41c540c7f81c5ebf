"""Journey (issue 31, part A): slime's rollout dumps in, joined to the ShopSimRL traces they came from.

Input the code under test did not write: real ``torch.save`` files of slime ``Sample.to_dict()`` samples and the
ShopSimRL slime-runtime trace JSON they were rendered from (tests/fixtures/slime, written by its make_dump.py with
torch; read here by the shipped bytes only). Everything goes through the installed ``shopsim-wh`` in subprocesses:
the dumps first (their traces are found by the recorded paths' tails and land with them), the training output
directory (the full-skill retry lands, the rest is there already), the same again (nothing lands), a dump holding a
tensor (refused, exit 2), and the traces of the dump that had none, ingested after it (they join).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import zipfile
from pathlib import Path

import pytest

from shopsim_wh.core.tokenizer import BUILTIN_ID, builtin
from shopsim_wh.engines.db import connect
from shopsim_wh.ingest._torchsave import DumpRefused, load
from shopsim_wh.store.warehouse import Warehouse

from .journeys import ok, shopsim

FIXTURES = Path(__file__).parent / "fixtures" / "slime"
RUN = "slime-round-001"
ENV = {"SHOPSIM_WH_SLIME_READER": "builtin"}  # the reader without torch, whatever this machine has installed
TOK = builtin()


def q(con, query: str, params=None) -> list[dict]:
    cur = con.execute(query, params or [])
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def stored_rows(wh: Path) -> tuple[int, dict[str, int]]:
    """(snapshot version, rows per table): what a refused or repeated ingest must leave as it was."""
    snap = Warehouse(wh).snapshot()
    return snap.version, {t: sum(e.rows for e in es) for t, es in snap.tables.items()}


def unpickled(path: Path) -> dict:
    """The dump read independently of shopsim-wh: the zip's data.pkl, or the legacy format's pickles in a row
    (magic number, protocol, system info, the object, the storage keys)."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            return pickle.loads(z.read(next(n for n in z.namelist() if n.endswith("/data.pkl"))))
    with open(path, "rb") as f:
        magic, proto, _info, obj, keys = (pickle.load(f) for _ in range(5))
    assert (magic, proto, keys) == (0x1950A86A20F9469CFC6C, 1001, [])
    return obj


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    root = tmp_path_factory.mktemp("slime")
    src = root / "in"
    shutil.copytree(FIXTURES, src, ignore=shutil.ignore_patterns("*.py"))
    wh = root / "wh"
    out = {"src": src, "wh": wh}
    out["first"] = json.loads(ok(shopsim("ingest", src / "train" / "dumps", "-w", wh, "--output", "json",
                                         "--tokenizer", BUILTIN_ID, env=ENV)).stdout)
    out["second"] = ok(shopsim("ingest", src / "train", "-w", wh, env=ENV))
    out["stored"] = stored_rows(wh)
    out["again"] = json.loads(ok(shopsim("ingest", src / "train", "-w", wh, "--output", "json", env=ENV)).stdout)
    out["tensor"] = shopsim("ingest", src / "tensor" / "rollout_data_9.pt", "-w", wh, env=ENV)
    out["after_refusals"] = stored_rows(wh)
    w = Warehouse(wh)
    episodes = set(w.read("episodes", ["episode_id"]).column("episode_id").to_pylist())
    out["before_late"] = {e: e in episodes for e in w.read("training_samples", ["episode_id"]).column(
        "episode_id").to_pylist()}
    out["late"] = json.loads(ok(shopsim("ingest", "--format", "slime", src / "late", "-w", wh,
                                        "--output", "json")).stdout)
    return out


@pytest.fixture(scope="module")
def con(flow):
    c = connect(flow["wh"])
    yield c
    c.close()


def samples_of(src: Path) -> list[tuple[Path, int, dict]]:
    """(dump, position, sample) of every sample of the two training dumps, read independently."""
    return [(d, i, s) for d in sorted((src / "train" / "dumps").glob("*.pt"))
            for i, s in enumerate(unpickled(d)["samples"])]


def test_dumps_land_joined_to_their_traces(flow, con):
    by_name = {Path(f["path"]).name: f for f in flow["first"]["files"]}
    assert {n: f["status"] for n, f in by_name.items()} == {"rollout_data_0.pt": "landed", "rollout_data_1.pt": "landed"}
    assert "5 sample(s) of 4 episode(s) landed in run slime-round-001; 4 trace(s) landed with them" in \
        by_name["rollout_data_0.pt"]["message"]
    assert flow["first"]["episodes_landed"] == 4
    # what a user asks: every sample beside the episode it came from (the installed CLI's own `sql`)
    got = json.loads(ok(shopsim(
        "sql", "-w", flow["wh"], "--format", "json",
        "select s.run_id, s.episode_id, s.sample_idx, e.run_id as e_run, e.episode_id as e_episode, "
        "e.status as e_status, e.reward as e_reward, s.reward, s.status, s.rollout_step, s.sample_index, "
        "s.tokenizer_id, s.tokenizer_hash, s.trace_path, s.source_file from training_samples s "
        "left join episodes e using (run_id, episode_id) order by s.episode_id, s.sample_idx")).stdout)
    landed = [(d, i, s) for d, i, s in samples_of(flow["src"]) if not (d.name == "rollout_data_1.pt" and i == 2)]
    assert len(got) == len(landed) == 7
    for r, (d, _, s) in zip(got, landed, strict=True):
        trace = s["metadata"]["shopsim_trace_path"]
        want_id = "train-group-{:09d}-sample-{:09d}".format(s["group_index"], s["index"])
        assert (r["run_id"], r["e_run"], r["episode_id"], r["e_episode"]) == (RUN, RUN, want_id, want_id)
        assert trace.endswith(f"group-{s['group_index']:09d}/rollout-{s['index']}.json") and r["trace_path"] == trace
        assert (r["rollout_step"], r["sample_index"], r["status"]) == (int(d.stem[-1]), s["index"], s["status"])
        assert r["reward"] == s["reward"]["reward"] and r["source_file"] == str(d)
        # the episode's own outcome agrees with the sample's reward (unscored: the failed episode's placeholder)
        assert r["e_reward"] == (None if s["status"] == "aborted" else s["reward"]["reward"])
        assert (r["tokenizer_id"], r["tokenizer_hash"]) == (BUILTIN_ID, TOK.sha256)  # --tokenizer
    fanned = [r for r in got if r["episode_id"].endswith("sample-000000000")]
    assert [r["sample_idx"] for r in fanned] == [0, 1]  # one episode, two token-contiguous samples
    placeholder = q(con, "select s.remove_sample, s.status, s.total_length, e.status as e_status from "
                         "training_samples s join episodes e using (run_id, episode_id) where s.remove_sample")
    assert placeholder == [{"remove_sample": True, "status": "aborted", "total_length": 2, "e_status": "failed"}]


def test_token_arrays_are_the_dump_exactly(flow, con, monkeypatch):
    monkeypatch.setenv("SHOPSIM_WH_SLIME_READER", "builtin")
    by_tokens = {json.dumps(r["token_ids"]): r for r in q(
        con, "select s.metadata, s.response, s.prompt, s.response_length, s.prompt_length, t.token_ids, "
                    "t.loss_mask, t.rollout_logprobs, t.ref_logprobs from training_samples s join training_tokens t "
                    "using (run_id, episode_id, attempt, agent_id, sample_idx)")}
    checked = 0
    for d in sorted((flow["src"] / "train" / "dumps").glob("*.pt")):
        ours, reader = load(d)
        assert reader == "builtin"
        theirs = unpickled(d)
        assert ours == theirs  # the safe reader gives what pickle itself gives
        for i, s in enumerate(theirs["samples"]):
            if d.name == "rollout_data_1.pt" and i == 2:
                continue  # the broken sample: in ingest_errors
            r = by_tokens[json.dumps(s["tokens"])]
            assert r["token_ids"] == s["tokens"] and all(type(t) is int for t in r["token_ids"])
            assert r["loss_mask"] == s["loss_mask"] and r["response_length"] == s["response_length"]
            assert r["rollout_logprobs"] == s["rollout_log_probs"]  # float64, bit for bit
            assert all(type(x) is float for x in r["rollout_logprobs"]) and r["ref_logprobs"] is None
            assert r["prompt_length"] == len(s["tokens"]) - s["response_length"]
            assert (r["response"], r["prompt"]) == (s["response"], s["prompt"])
            meta = json.loads(r["metadata"])  # everything no column holds, by name; the sample's metadata whole
            assert meta["metadata"] == s["metadata"]
            assert {k: meta[k] for k in ("spec_info", "prefix_cache_info", "non_generation_time")} == \
                {k: s[k] for k in ("spec_info", "prefix_cache_info", "non_generation_time")}
            checked += 1
    assert checked == 7


def test_spans_cover_every_token_once_and_tie_model_turns_to_steps(con):
    spans: dict[tuple, list[dict]] = {}
    for r in q(con, "select * from training_spans order by episode_id, sample_idx, span_idx"):
        spans.setdefault((r["episode_id"], r["sample_idx"]), []).append(r)
    toks = {(r["episode_id"], r["sample_idx"]): r for r in q(con, "select * from training_tokens")}
    raw = {(r["episode_id"], r["step_idx"]): json.loads(r["metadata"])["model_extra"]["raw_output"]
           for r in q(con, "select episode_id, step_idx, metadata from steps")}
    assert set(spans) == set(toks) and len(toks) == 7
    tied: dict[str, list[int]] = {}
    for key, ss in spans.items():
        t = toks[key]
        ids, mask = t["token_ids"], t["loss_mask"]
        prompt = len(ids) - len(mask)
        assert ss[0]["token_start"] == 0 and ss[-1]["token_end"] == len(ids)  # every token once, in order
        assert all(a["token_end"] == b["token_start"] for a, b in zip(ss, ss[1:], strict=False))
        assert [s["span_idx"] for s in ss] == list(range(len(ss)))
        assert ss[0]["kind"] == "prompt" and ss[0]["token_end"] == prompt and ss[0]["step_idx"] is None
        for s in ss[1:]:
            cut = mask[s["token_start"] - prompt:s["token_end"] - prompt]
            assert set(cut) == {1 if s["kind"] == "model" else 0} and s["trainable"] == (s["kind"] == "model")
            assert s["how"] == "mask-runs"
            text = TOK.decode(ids[s["token_start"]:s["token_end"]])
            if s["kind"] == "model":  # the sampled tokens are that step's raw output, as the trace recorded it
                assert text == raw[(key[0], s["step_idx"])]
                tied.setdefault(key[0], []).append(s["step_idx"])
            elif s["step_idx"] is not None:  # template glue and the answer to the turn before
                assert text.startswith("\n<|im_start|>") and text.endswith("<|im_start|>assistant\n")
    broken = "train-group-000000002-sample-000000005"  # its second sample (step 1) is in ingest_errors
    steps = q(con, "select episode_id, count(*) as n from steps where episode_id in "
                   f"({', '.join(repr(e) for e in tied)}) group by 1")
    for r in steps:  # the k-th run of 1s across an episode's samples is its step k: every step once, in order
        assert tied[r["episode_id"]] == list(range(1 if r["episode_id"] == broken else r["n"])), r
    assert len(steps) == 5 and {"n": 2, "episode_id": broken} in steps
    assert tied["train-group-000000000-sample-000000000"] == [0, 1, 2]  # across its two samples
    assert {(s[0]["episode_id"], s[0]["sample_idx"]) for s in spans.values() if len(s) == 2 and
            s[1]["kind"] == "inserted"} == {("train-group-000000001-sample-000000002", 0)}  # the placeholder


def test_a_bad_sample_lands_in_ingest_errors_and_the_rest_lands(flow, con):
    errs = q(con, "select run_id, source_file, line, error_class, message from ingest_errors")
    dump = str(flow["src"] / "train" / "dumps" / "rollout_data_1.pt")
    assert errs == [{"run_id": RUN, "source_file": dump, "line": 2, "error_class": "invalid_sample",
                     "message": "sample 2: len(loss_mask) = 78 but response_length = 79: they must be equal"}]
    f = next(x for x in flow["first"]["files"] if x["path"] == dump)
    assert (f["records"], f["rejected"]) == (2, 1)
    fid = q(con, "select records_total, converted, dropped from import_fidelity where source_file = ?", [dump])
    assert fid == [{"records_total": 3, "converted": 2, "dropped": 1}]


def test_the_training_directory_adds_only_what_is_new_and_again_nothing(flow, con):
    second = flow["second"].stdout
    assert "run slime-round-001: 1 trace(s) landed as episodes, 4 already in the warehouse" in second
    assert second.count("skipped_same_hash") == 2 and second.count("not_an_episode") == 2
    retry = q(con, "select episode_id, status from episodes where episode_id like '%retry'")
    assert retry == [{"episode_id": "train-group-000000000-sample-000000002-full-skill-retry", "status": "completed"}]
    again = flow["again"]
    assert (again["units_read"], again["episodes_landed"], again["exit_code"]) == (0, 0, 0)
    assert sorted(f["status"] for f in again["files"]) == ["already_present", "not_an_episode", "not_an_episode",
                                                          "skipped_same_hash", "skipped_same_hash"]
    assert flow["after_refusals"] == flow["stored"]  # neither the repeat nor the refused dump added a row


def test_a_dump_holding_tensors_is_refused_without_torch(flow):
    res = flow["tensor"]
    assert res.returncode == 2
    assert ("rollout_data_9.pt holds tensors (a tensor storage); the built-in reader reads plain lists, dicts, "
            "numbers and strings only: pip install 'shopsim-wh[slime]' (torch) to read it") in res.stderr


def test_a_dump_without_its_traces_warns_and_joins_when_they_come(flow, con):
    msg = next(f["message"] for f in flow["first"]["files"] if f["path"].endswith("rollout_data_1.pt"))
    assert "warning: 2 sample(s) of 2 episode(s) have no trace here" in msg
    assert "/root/ShopSimRL/runs/slime-training/round-001/group-000000002/rollout-4.json" in msg
    before = flow["before_late"]
    assert {e for e, joined in before.items() if not joined} == {"train-group-000000002-sample-000000004",
                                                           "train-group-000000002-sample-000000005"}
    late = flow["late"]
    assert [f["status"] for f in late["files"]] == ["landed", "not_an_episode"] and late["episodes_landed"] == 2
    after = q(con, "select s.episode_id, e.status, e.source_file from training_samples s "
                             "join episodes e using (run_id, episode_id) where s.group_index = 2 order by 1")
    assert [r["episode_id"] for r in after] == sorted(e for e, joined in before.items() if not joined)
    assert all("/late/slime-training/round-001/group-000000002/" in r["source_file"] for r in after)


def test_the_builtin_reader_runs_no_code_and_expands_no_bomb(tmp_path, monkeypatch):
    """What a hostile dump can hold: a pickle whose REDUCE would call os.system, and one list referenced 2**40
    times over (a few hundred bytes that any JSON rendering would blow up). Neither is run nor expanded."""
    monkeypatch.setenv("SHOPSIM_WH_SLIME_READER", "builtin")
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    def dump(name: str, obj) -> Path:
        f = tmp_path / f"{name}.pt"
        with zipfile.ZipFile(f, "w") as z:  # torch.save's zip layout
            z.writestr(f"{name}/data.pkl", pickle.dumps(obj, protocol=2))
            z.writestr(f"{name}/version", "3\n")
        return f

    with pytest.raises(DumpRefused, match=r"holds Python objects of class (posix|os|nt)\.system.*shopsim-wh\[slime\]"):
        load(dump("evil", {"rollout_id": 5, "samples": [Evil()]}))
    assert not marker.exists()
    bomb = [0] * 100
    for _ in range(40):
        bomb = [bomb, bomb]
    f = dump("bomb", {"rollout_id": 6, "samples": bomb})
    assert f.stat().st_size < 2000
    with pytest.raises(DumpRefused, match="far larger than the file"):
        load(f)
