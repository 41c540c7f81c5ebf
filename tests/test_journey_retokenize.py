"""Journey: do the stored token ids still equal their text through a chat template? (`shopsim-wh training
retokenize`, docs/training.md)

A user runs the embedded default with `model.record_tokens: true` (the scripted policy answers with the built-in
tokenizer's ids, as vLLM does) and ingests a slime rollout dump (tests/fixtures/slime: a real `torch.save` file of
ShopSimRL samples whose ids the built-in tokenizer rendered from the traces beside it) in which one stored id was
changed, then retokenizes every trainer sample with the built-in tokenizer: the recorded run and the untouched slime
samples (one of them ends on a turn cut off by generation_length) are identical, the changed one (the second sample
an episode was fanned out into) drifts at exactly its position, in its `model` span. A Hugging Face tokenizer built here with the `tokenizers` library (a byte-level BPE whose four
specials have the built-in's ids, and Qwen2.5's ChatML chat template from tests/fixtures/third_party) gives other ids
for the same text: every sample of the run drifts, at token 1 (the first after `<|im_start|>`), and
`training_token_drift` lists them. `training summary` counts it all. A bad tokenizer path exits 2 with a message that
says what to give.
"""

from __future__ import annotations

import json
import pickle
import shutil
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from shopsim_wh.core.schema import to_arrow
from shopsim_wh.engines.db import connect
from shopsim_wh.store.warehouse import Warehouse

from .helpers import write_config
from .journeys import ok, shopsim

RUN, SLIME_RUN = "tok", "slime-round-001"
FIXTURES = Path(__file__).parent / "fixtures"
TEMPLATE = FIXTURES / "third_party" / "chat_templates" / "qwen2_5.jinja"
SLIME_ENV = {"SHOPSIM_WH_SLIME_READER": "builtin"}  # the dump reader without torch, whatever this machine has
SPECIALS = ["<|pad|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"]  # ids 0-3, as the built-in's
CORPUS = ["你是一个购物助手 search click 购物任务 <tool_call> </tool_call> {\"name\": \"arguments\": \"query\"}",
          "system user assistant tool 商品 页面 价格 颜色 尺寸 购买 Buy Now < Prev Next > Back to Search"]
TAMPERED = 1  # the dump's second sample: episode 0's second fork (sample_idx 1)


def hf_tokenizer(folder: Path) -> Path:
    """A Hugging Face tokenizer directory as save_pretrained writes one: tokenizer.json (a byte-level BPE trained
    here) and tokenizer_config.json whose chat_template is Qwen2.5's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS * 4, trainer=trainers.BpeTrainer(
        vocab_size=500, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|pad|>",
        "chat_template": TEMPLATE.read_text()}))
    return folder


def retokenize(wh: Path, *args) -> dict:
    return json.loads(ok(shopsim("training", "retokenize", *args, "--warehouse", wh, "--format", "json")).stdout)


def tampered_dump(root: Path) -> tuple[Path, str, int]:
    """A copy of the slime fixture (dumps and the traces beside them) whose rollout_data_0.pt has one response id of
    one sample changed (its data.pkl pickled again, the archive's other members as torch wrote them); (dump,
    episode id, token position)."""
    src = root / "slime"
    shutil.copytree(FIXTURES / "slime" / "train", src)
    dump = src / "dumps" / "rollout_data_0.pt"
    with zipfile.ZipFile(dump) as z:
        members = [(i, z.read(i)) for i in z.infolist()]
    [(pkl, data)] = [(i, b) for i, b in members if i.filename.endswith("/data.pkl")]
    doc = pickle.loads(data)
    sample = doc["samples"][TAMPERED]
    at = len(sample["tokens"]) - sample["response_length"] + 3
    sample["tokens"][at] += 1 if sample["tokens"][at] < 16 + 255 else -1  # another byte of the built-in
    with zipfile.ZipFile(dump, "w", zipfile.ZIP_STORED) as z:
        for info, body in members:
            z.writestr(info, pickle.dumps(doc, protocol=2) if info is pkl else body)
    group, rollout = Path(sample["metadata"]["shopsim_trace_path"]).parts[-2:]
    episode = f"train-{group}-sample-{int(rollout.split('-')[1].split('.')[0]):09d}"
    return dump, episode, at


def earlier_identical_check(wh: Path, result: dict) -> None:
    """An identical check of the drifted sample an hour ago, as an earlier run of the command leaves one."""
    [e] = result["examples"]
    row = {"episode_id": e["episode_id"], "attempt": 1, "agent_id": e["agent_id"], "sample_idx": e["sample_idx"],
           "tokenizer_id": result["tokenizer_id"], "tokenizer_hash": result["tokenizer_hash"],
           "stored_tokens": e["stored_tokens"], "retokenized_tokens": e["stored_tokens"],
           "checked_at": datetime.now(UTC) - timedelta(hours=1), "load_id": "earlier"}
    with Warehouse(wh).writer() as w:
        w.commit([("training_retokenization", e["run_id"], to_arrow("training_retokenization", [row]))])


@pytest.fixture(scope="module")
def journey(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("journey-retokenize")
    cfg = write_config(tmp / "tok.yaml", experiment={"name": RUN, "seed": 3}, tasks={"sample_size": 2, "repeats": 1},
                       model={"record_tokens": True})
    wh = tmp / "wh"
    ok(shopsim("run", cfg, "--warehouse", wh, "--quiet"))
    dump, episode, at = tampered_dump(tmp)
    ok(shopsim("ingest", dump, "--warehouse", wh, "--quiet", env=SLIME_ENV))
    builtin = retokenize(wh, "--tokenizer", "builtin")
    hf = retokenize(wh, "--tokenizer", hf_tokenizer(tmp / "hf-tokenizer"), "--run", RUN)
    summary = json.loads(ok(shopsim("training", "summary", "--warehouse", wh, "--format", "json")).stdout)
    if len(builtin["examples"]) == 1:  # (else the tests below say what drifted)
        earlier_identical_check(wh, builtin)
    return {"wh": wh, "tmp": tmp, "builtin": builtin, "hf": hf, "summary": summary, "tampered": (episode, at)}


@pytest.fixture(scope="module")
def con(journey):
    c = connect(journey["wh"])
    yield c
    c.close()


def samples(con, run: str) -> int:
    """Trainer samples of a run (the view: each episode's last attempt), aborted placeholders left out."""
    return con.execute("SELECT count(*) FROM training_samples WHERE run_id = $r AND NOT remove_sample",
                       {"r": run}).fetchone()[0]


def test_the_recorded_run_and_the_slime_samples_retokenize_identically(journey, con):
    res, n = journey["builtin"], samples(con, RUN)
    assert n >= 4  # two episodes; the click enum changes the tools on every page, so each page forks a sample
    assert res["runs"] == [SLIME_RUN, RUN] and res["tokenizer_id"] == "builtin:shopsim-bytes-v1"
    assert res["checked"] == n + samples(con, SLIME_RUN) and res["placeholders"] == 1  # the aborted episode
    assert (res["identical"], res["drifted"], res["not_renderable"]) == (res["checked"] - 1, 1, 0)
    latest = dict(con.execute(
        "SELECT run_id, count(*) FILTER (WHERE first_mismatch IS NULL AND detail IS NULL) FROM training_retokenization "
        "WHERE tokenizer_hash = $h GROUP BY ALL", {"h": res["tokenizer_hash"]}).fetchall())
    assert latest == {RUN: n, SLIME_RUN: samples(con, SLIME_RUN) - 1}
    # among the slime samples that match: a plain episode's and one whose last turn generation_length cut off
    matched = con.execute(
        "SELECT DISTINCT s.status FROM training_retokenization AS r JOIN training_samples AS s "
        "USING (run_id, episode_id, agent_id, sample_idx) WHERE r.run_id = $r AND r.tokenizer_hash = $h "
        "AND r.first_mismatch IS NULL AND r.detail IS NULL ORDER BY 1",
        {"r": SLIME_RUN, "h": res["tokenizer_hash"]}).fetchall()
    assert matched == [("completed",), ("truncated",)]


def test_one_changed_id_drifts_at_exactly_its_position(journey, con):
    episode, at = journey["tampered"]
    res = journey["builtin"]
    [example] = res["examples"]
    assert (example["run_id"], example["episode_id"], example["sample_idx"], example["first_mismatch"]) == \
        (SLIME_RUN, episode, TAMPERED, at)
    assert example["stored_tokens"] == example["retokenized_tokens"]  # one id changed, none added
    drift = con.execute("SELECT run_id, episode_id, sample_idx, first_mismatch, detail, same_tokenizer, span_kind "
                        "FROM training_token_drift WHERE tokenizer_hash = $h", {"h": res["tokenizer_hash"]}).fetchall()
    # the changed id is a sampled one (a `model` span); the dump names no tokenizer, so same_tokenizer is unknown
    assert drift == [(SLIME_RUN, episode, TAMPERED, at, None, None, "model")]
    # lineage: each check names its invocation in `loads`
    assert con.execute("SELECT DISTINCT l.command FROM training_retokenization AS r JOIN loads AS l "
                       "USING (run_id, load_id)").fetchall() == [("retokenize",)]


def test_the_views_keep_the_latest_check(journey, con):
    """An older identical check of the drifted sample (as a re-run leaves) is stored and does not hide the drift."""
    episode, at = journey["tampered"]
    key = {"r": SLIME_RUN, "e": episode, "s": TAMPERED, "h": journey["builtin"]["tokenizer_hash"]}
    where = "WHERE run_id = $r AND episode_id = $e AND sample_idx = $s AND tokenizer_hash = $h"
    assert con.execute(f"SELECT load_id = 'earlier', first_mismatch FROM stg_training_retokenization {where} "
                       "ORDER BY checked_at", key).fetchall() == [(True, None), (False, at)]
    assert con.execute(f"SELECT first_mismatch FROM training_retokenization {where}", key).fetchall() == [(at,)]


def test_a_hugging_face_tokenizer_by_path_drifts_every_sample(journey, con):
    hf, n = journey["hf"], samples(con, RUN)
    folder = (journey["tmp"] / "hf-tokenizer").resolve()
    assert hf["tokenizer_id"] == str(folder) and hf["tokenizer_hash"] != journey["builtin"]["tokenizer_hash"]
    assert (hf["checked"], hf["drifted"], hf["identical"], hf["not_renderable"]) == (n, n, 0, 0)
    assert (hf["other_tokenizer"], journey["builtin"]["other_tokenizer"]) == (n, 0)  # slime: tokenizer unknown
    rows = con.execute("SELECT episode_id, sample_idx, first_mismatch, stored_tokens, retokenized_tokens "
                       "FROM training_token_drift WHERE tokenizer_hash = $h ORDER BY ALL",
                       {"h": hf["tokenizer_hash"]}).fetchall()
    assert len(rows) == n
    assert con.execute("SELECT DISTINCT same_tokenizer, span_kind FROM training_token_drift WHERE tokenizer_hash = $h",
                       {"h": hf["tokenizer_hash"]}).fetchall() == [(False, "prompt")]  # recorded with the built-in
    # both start with <|im_start|> (id 1 in each); the next token, "system", is bytes in one and BPE in the other
    assert {r[2] for r in rows} == {1}

    # the retokenization renders as Hugging Face does (a sandboxed Jinja environment with trim_blocks and
    # lstrip_blocks, tojson keeping non-ASCII; transformers' documented chat-template setup, rebuilt here with
    # jinja2 alone) over the sample's messages up to its last span's message (tool-call arguments as objects, as
    # vLLM hands them to a template) and its first turn's tools, tokenized by the `tokenizers` library
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from tokenizers import Tokenizer

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda value: json.dumps(value, ensure_ascii=False)
    episode, sample_idx, _, _, retokenized = rows[0]
    last, step = con.execute(
        "SELECT max(message_idx), min(step_idx) FROM training_spans WHERE run_id = $r AND episode_id = $e "
        "AND sample_idx = $s", {"r": RUN, "e": episode, "s": sample_idx}).fetchone()
    messages = []
    for role, content, calls, call_id in con.execute(
            "SELECT role, content, tool_calls, tool_call_id FROM messages WHERE run_id = $r AND episode_id = $e "
            "AND msg_idx <= $m ORDER BY msg_idx", {"r": RUN, "e": episode, "m": last}).fetchall():
        m = {"role": role, "content": content}
        if calls:
            m["tool_calls"] = [{**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
                               for c in json.loads(calls)]
        if call_id:
            m["tool_call_id"] = call_id
        messages.append(m)
    tools = [{"type": "function", "function": {"name": n, "description": d, "parameters": json.loads(p)}}
             for n, d, p in con.execute(
                 "SELECT t.name, t.description, t.parameters FROM steps AS s, "
                 "unnest(CAST(json(s.tool_schema_hashes) AS VARCHAR[])) WITH ORDINALITY AS h(hash, pos) "
                 "JOIN tools AS t ON t.run_id = s.run_id AND t.episode_id = s.episode_id AND t.schema_hash = h.hash "
                 "WHERE s.run_id = $r AND s.episode_id = $e AND s.step_idx = $s ORDER BY h.pos",
                 {"r": RUN, "e": episode, "s": step}).fetchall()]
    text = env.from_string(TEMPLATE.read_text()).render(messages=messages, tools=tools, add_generation_prompt=False)
    assert text.endswith("<|im_end|>\n")  # the newline after the last turn is glue no model samples: not counted
    assert len(Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text[:-1], add_special_tokens=False).ids) \
        == retokenized


def test_summary_counts_samples_tokens_and_checks(journey, con):
    s, builtin, hf = journey["summary"], journey["builtin"], journey["hf"]
    n, m = samples(con, RUN), samples(con, SLIME_RUN)
    rows = {(r["run_id"], r["source"], r["tokenizer_id"]): r for r in s["samples"]}
    assert set(rows) == {(RUN, "runner", "builtin:shopsim-bytes-v1"), (SLIME_RUN, "slime", "(unknown)")}
    runner, slime = rows[(RUN, "runner", "builtin:shopsim-bytes-v1")], rows[(SLIME_RUN, "slime", "(unknown)")]
    assert (runner["samples"], runner["placeholders"], slime["samples"], slime["placeholders"]) == (n, 0, m + 1, 1)
    for r in (runner, slime):
        assert r["tokens"] > r["trainable_tokens"] > 0
    assert s["totals"]["samples"] == n + m + 1
    checks = {(c["run_id"], c["tokenizer_hash"]): (c["checked"], c["identical"], c["drifted"], c["not_renderable"])
              for c in s["checks"]}
    assert checks == {(RUN, builtin["tokenizer_hash"]): (n, n, 0, 0), (SLIME_RUN, builtin["tokenizer_hash"]): (m, m - 1, 1, 0),
                      (RUN, hf["tokenizer_hash"]): (n, 0, n, 0)}


def test_a_bad_tokenizer_is_a_usage_error_that_says_what_to_give(journey, tmp_path):
    res = shopsim("training", "retokenize", "--tokenizer", tmp_path / "missing", "--warehouse", journey["wh"])
    assert res.returncode == 2, res.stderr
    assert f"tokenizer '{tmp_path / 'missing'}': no such file or directory" in res.stderr
    assert "give `builtin`" in res.stderr and "tokenizer_config.json" in res.stderr and "Traceback" not in res.stderr


def test_bad_tokenizer_files_are_refused_with_what_to_fix(journey, tmp_path):
    """(In-process: each case is refused before transformers is imported.)"""
    from shopsim_wh.core.errors import ConfigError
    from shopsim_wh.core.tokenizer import load, locate

    good = journey["tmp"] / "hf-tokenizer"
    config = json.loads((good / "tokenizer_config.json").read_text())

    def folder(name: str, config_text: str | None, tokenizer: bytes | None = None) -> Path:
        d = tmp_path / name
        d.mkdir()
        (d / "tokenizer.json").write_bytes(tokenizer or (good / "tokenizer.json").read_bytes())
        if config_text is not None:
            (d / "tokenizer_config.json").write_text(config_text)
        return d

    cases = {
        "has no chat template": folder("no-template", json.dumps({k: v for k, v in config.items()
                                                                   if k != "chat_template"})),
        "is not valid JSON": folder("bad-config", "{not json"),
        "is not a tokenizer the `tokenizers` library reads": folder("bad-tokenizer", json.dumps(config), b'{"x": 1}'),
        "holds no tokenizer.json": tmp_path,
        "unknown built-in tokenizer": "builtin:other-v9",
    }
    for message, spec in cases.items():
        with pytest.raises(ConfigError, match=message):
            load(str(spec))
    # a tokenizer.json given as a file finds its config and template beside it: the same identity
    assert locate(str(good / "tokenizer.json")).sha256() == journey["hf"]["tokenizer_hash"]
    assert locate(str(good / "tokenizer.json")).template == TEMPLATE.read_text()


def test_the_comparison_rules():
    """(In-process, no warehouse.) The fallbacks and edges of the comparison, with the built-in tokenizer."""
    from shopsim_wh.analytics.retokenize import AgentContext, SampleText, check_sample
    from shopsim_wh.core.tokenizer import builtin

    tok = builtin()
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "ok"}, {"role": "tool", "content": "page"}]
    full = tok.chat_ids(msgs[:3])
    assert tok.decode(full[-2:]) == "<|im_end|>\n"
    # the newline after the last turn is not sampled: a sample that stops at <|im_end|> is identical
    assert check_sample(tok, full[:-1], SampleText(messages=msgs[:3])).identical
    # stored ids that go on past the rendering differ where the rendering ends
    assert check_sample(tok, full + [20, 21], SampleText(messages=msgs[:3])).first_mismatch == len(full)
    # a sample that ends on the prompt of a turn that never came (generation prompt included) is identical
    prompt = tok.chat_ids(msgs, add_generation_prompt=True)
    assert check_sample(tok, prompt, SampleText(messages=msgs)).identical
    # no spans: the sample's own prompt text (or its messages as JSON) and response
    assert check_sample(tok, full[:-1], SampleText(prompt=tok.render(msgs[:2], add_generation_prompt=True),
                                                   response="ok<|im_end|>")).identical
    assert check_sample(tok, full[:-1], SampleText(prompt=json.dumps(msgs[:2]), response="ok<|im_end|>")).identical
    assert check_sample(tok, full, SampleText(detail="no text")).detail == "no text"
    # slime's mask-runs spans name turns, not messages: the last one inserted covers the tool answer after it
    agent = AgentContext(messages=msgs, steps={0: {"prompt_msg_count": 2, "tool_schema_hashes": None,
                                                   "metadata": None, "reasoning": None, "content": "ok"}})
    spans = [{"kind": "prompt", "step_idx": None, "message_idx": None},
             {"kind": "model", "step_idx": 0, "message_idx": None},
             {"kind": "inserted", "step_idx": 0, "message_idx": None}]
    assert agent.text({"agent_id": "main"}, spans).messages == msgs
    assert agent.text({"agent_id": "main"}, spans[:2]).messages == msgs[:3]
    assert agent.text({"agent_id": "main", "prompt": None, "response": None}, []).detail.startswith("the sample names")
