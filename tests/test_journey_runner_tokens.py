"""Token ids recorded by the runner (issue 31, part B): `model.record_tokens` on real loopback HTTP servers.

* the embedded default served on loopback (the simulator and its policy), a logging proxy in front of the model:
  with the switch on every request asks for the ids, every model turn lands in `model_turn_tokens` and the main
  agent's turns in token-contiguous `training_samples` / `training_tokens` / `training_spans`, forked where a turn's
  prompt does not continue the sample (the built-in template renders each turn's tools, and the shop's tools change
  every turn); the masked tokens are exactly the sampled ids, the model spans decode to the assistant messages' text;
* with the switch off the requests are byte for byte the same minus the two token fields, and no training row lands;
* a server that answers without ids stops the run with exit 2 naming the server option;
* a 200 answer that is not JSON is retried when it would be recorded (a protocol error, as before, when not);
* a server answering in SGLang 0.5's shape (ids in `choices[0].prompt_token_ids` and `meta_info`), whose rendering
  keeps the prompt contiguous except that turn 2 changes the system prompt: two samples per episode, one rollout id.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
from collections import Counter
from pathlib import Path

import httpx
import pytest

from shopsim_wh.core.tokenizer import BUILTIN_ID, builtin
from shopsim_wh.engines.db import connect
from shopsim_wh.rollout.model import ChatModel, ChatOptions
from shopsim_wh.sim.policy import PolicyConfig, chat_completion
from shopsim_wh.sim.server import create_app
from shopsim_wh.sim.tasks import default_split_manifest_path
from shopsim_wh.testing.faultproxy import FaultProxy
from shopsim_wh.testing.servers import serve_asgi

from .conftest import read_body
from .helpers import write_config
from .journeys import ok, shopsim

TOKEN_FIELDS = ("return_token_ids", "logprobs")
TOK = builtin()
SEED = 3


class ChatServer:
    """A loopback OpenAI-compatible chat server: ``shape(request)`` answers each request; keeps every body."""

    def __init__(self, shape):
        self.shape, self.bodies = shape, []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        self.bodies.append(json.loads(body))
        data = json.dumps(self.shape(json.loads(body))).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": data})


def _without_ids(req: dict) -> dict:
    """An older vLLM: it ignores return_token_ids (and, here, logprobs)."""
    return chat_completion({k: v for k, v in req.items() if k not in TOKEN_FIELDS}, PolicyConfig())


def _sglang_drifting(req: dict) -> dict:
    """SGLang 0.5's chat answer to return_prompt_token_ids + return_meta_info + logprobs, from a server whose
    template renders no tools and whose system prompt changes from turn 2 on (a prefix drift at turn 2 only)."""
    if not (req.get("return_prompt_token_ids") and req.get("return_meta_info")):
        return _without_ids(req)
    answer = chat_completion(req, PolicyConfig())  # the embedded policy's ids and logprobs
    choice = answer["choices"][0]
    messages = [dict(m) for m in req["messages"]]
    if any(m["role"] == "assistant" for m in messages):
        messages[0]["content"] += "\n(turn 2 onwards)"
    del answer["prompt_token_ids"]
    ids, entries = choice.pop("token_ids"), choice.pop("logprobs")["content"]
    choice["prompt_token_ids"] = TOK.chat_ids(messages, None, add_generation_prompt=True)
    choice["meta_info"] = {"output_token_logprobs": [[e["logprob"], i, e["token"]] for e, i in zip(entries, ids,
                                                                                                   strict=True)]}
    return answer


def _job_order(n: int) -> list[int]:
    """The task ids of the run's jobs in order, by ShopSimRL's rule (a seeded draw from the val split)."""
    doc = json.loads(default_split_manifest_path().read_text())
    return random.Random(SEED).sample(doc["splits"]["val"]["task_ids"], n)


def _config(tmp: Path, name: str, model: dict, environment: str = "embedded", n: int = 2) -> Path:
    return write_config(tmp / f"{name}.yaml", experiment={"name": name, "seed": SEED},
                        tasks={"sample_size": n, "repeats": 1},
                        model={"name": "scripted-strong", **model}, environment={"url": environment},
                        runtime={"concurrency": 3, "max_steps": 12})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tokens")
    wh = tmp / "wh"
    out = {}
    with serve_asgi(create_app(seed=0)) as url:
        for name, on in (("tok-on", True), ("tok-off", False)):
            with FaultProxy(url + "/v1") as proxy:
                model = {"base_url": proxy.url, "record_tokens": on, **({"tokenizer": "builtin"} if on else {})}
                out[name] = ok(shopsim("run", _config(tmp, name, model, url), "-w", wh, "-q"))
                out[name + ":bodies"] = [e.body for e in proxy.log if e.path.endswith("/chat/completions")]
    plain, drift = ChatServer(_without_ids), ChatServer(_sglang_drifting)
    with serve_asgi(plain) as url:
        out["no-ids"] = shopsim("run", _config(tmp, "no-ids", {"base_url": url + "/v1", "record_tokens": True}),
                                "-w", wh, "-q")
    with serve_asgi(drift) as url:
        model = {"base_url": url + "/v1", "record_tokens": True, "tokenizer": "builtin",
                 "sampling": {"temperature": 0.0},  # no injected protocol errors: drift only where the server makes it
                 "extra_body": {"return_prompt_token_ids": True, "return_meta_info": True}}
        out["drift"] = ok(shopsim("run", _config(tmp, "drift", model), "-w", wh, "-q"))
    out["drift:bodies"] = drift.bodies
    out["wh"] = wh
    return connect(wh), out


def _rows(con, sql: str, *params) -> list[dict]:
    cur = con.execute(sql, list(params))
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _episodes(con, run: str) -> dict[str, dict]:
    """Per episode: its row, recorded turns (step order), samples with tokens and spans (sample order), messages."""
    out = {}
    for ep in _rows(con, "select * from episodes where run_id = ? order by episode_id", run):
        eid = ep["episode_id"]
        out[eid] = {
            "episode": ep,
            "turns": _rows(con, "select * from model_turn_tokens where run_id = ? and episode_id = ? order by step_idx",
                           run, eid),
            "samples": _rows(con, "select s.*, t.token_ids, t.loss_mask, t.rollout_logprobs from training_samples s "
                                  "join training_tokens t using (run_id, episode_id, attempt, agent_id, sample_idx) "
                                  "where run_id = ? and episode_id = ? order by sample_idx", run, eid),
            "spans": _rows(con, "select * from training_spans where run_id = ? and episode_id = ? "
                                "order by sample_idx, span_idx", run, eid),
            "messages": {m["msg_idx"]: m for m in _rows(con, "select * from messages where run_id = ? and "
                                                              "episode_id = ? and agent_id = 'main'", run, eid)},
        }
    return out


def _expected_forks(turns: list[dict]) -> list[list[int]]:
    """The steps of each sample, by the rule: a turn continues the sample iff its prompt starts with it."""
    groups, so_far = [], None
    for t in turns:
        p = list(t["prompt_token_ids"])
        if so_far is None or p[:len(so_far)] != so_far:
            groups.append([])
        groups[-1].append(t["step_idx"])
        so_far = p + list(t["completion_token_ids"])
    return groups


def _rendered_assistant(m: dict) -> str:
    """An assistant message as the built-in template renders it, without its role header and line end."""
    msg = {"role": "assistant", "content": m["content"], "tool_calls": json.loads(m["tool_calls"] or "[]")}
    text = TOK.render([msg])
    head = "<|im_start|>assistant\n"
    assert text.startswith(head) and text.endswith("\n")
    return text[len(head):-1]


def _check_episode(e: dict) -> None:
    """Every invariant of one recorded episode's samples against its recorded turns and its messages."""
    turns, samples = e["turns"], e["samples"]
    assert len(turns) == e["episode"]["model_steps"] and turns
    assert [s["sample_idx"] for s in samples] == list(range(len(samples)))
    assert [json.loads(s["metadata"])["steps"] for s in samples] == _expected_forks(turns)
    masked, logprobs = [], []
    for s in samples:
        ids, mask, lps = s["token_ids"], s["loss_mask"], s["rollout_logprobs"]
        assert s["prompt_length"] + s["response_length"] == s["total_length"] == len(ids)
        assert len(mask) == len(lps) == s["response_length"] and s["trainable_tokens"] == sum(mask)
        response = ids[s["prompt_length"]:]
        masked += [t for t, m in zip(response, mask, strict=True) if m == 1]
        logprobs += [lp for lp, m in zip(lps, mask, strict=True) if m == 1]
        assert all(lp == 0.0 for lp, m in zip(lps, mask, strict=True) if m == 0)
        spans = [sp for sp in e["spans"] if sp["sample_idx"] == s["sample_idx"]]
        assert [(sp["token_start"], sp["token_end"]) for sp in spans][0] == (0, s["prompt_length"])
        assert all(a["token_end"] == b["token_start"] for a, b in zip(spans, spans[1:], strict=False))
        assert spans[-1]["token_end"] == s["total_length"] and {sp["how"] for sp in spans} == {"recorded"}
        for sp in spans[1:]:
            cut = mask[sp["token_start"] - s["prompt_length"]:sp["token_end"] - s["prompt_length"]]
            assert set(cut) == ({1} if sp["kind"] == "model" else {0}) and sp["trainable"] == (sp["kind"] == "model")
            if sp["kind"] == "model":
                text = TOK.decode(ids[sp["token_start"]:sp["token_end"]])
                assert text == _rendered_assistant(e["messages"][sp["message_idx"]]), sp
            else:
                assert e["messages"][sp["message_idx"]]["role"] in ("tool", "user") and sp["step_idx"] is not None
        assert s["rollout_id"] == samples[0]["rollout_id"] and s["tokenizer_id"] == BUILTIN_ID
        assert s["tokenizer_hash"] == TOK.sha256 and s["source"] == "runner" and not s["remove_sample"]
        assert s["reward"] == e["episode"]["reward"] and s["r_strict"] == e["episode"]["r_strict"]
        assert s["group_index"] == e["episode"]["task_id"] and s["sample_index"] == e["episode"]["sample_id"]
        assert s["status"] == ("truncated" if e["episode"]["termination_reason"] == "generation_length" else "completed")
    assert masked == [i for t in turns for i in t["completion_token_ids"]]
    assert logprobs == [lp for t in turns for lp in t["completion_logprobs"]]


def test_the_embedded_default_records_every_turn_and_samples_follow_the_tokens(runs):
    con, out = runs
    episodes = _episodes(con, "tok-on")
    assert len(episodes) == 2 and all(e["episode"]["status"] == "completed" for e in episodes.values())
    for e in episodes.values():
        _check_episode(e)
    # rollout_id = the job's index in the run; every episode's samples share it
    by_task = {e["episode"]["task_id"]: e["samples"][0]["rollout_id"] for e in episodes.values()}
    assert [by_task[t] for t in _job_order(2)] == [0, 1]
    # the built-in template renders each turn's tools in the system prompt, and the shop offers other tools on
    # (nearly) every page: a turn offered other tools than the turn before forks (as in ShopSimRL's slime runtime)
    hashes = dict(((r[0], r[1]), r[2]) for r in con.execute(
        "select episode_id, step_idx, tools_hash from steps where run_id = 'tok-on'").fetchall())
    changed = {(eid, k) for eid, k in hashes if k > 0 and hashes[(eid, k)] != hashes[(eid, k - 1)]}
    forks = {(eid, json.loads(s["metadata"])["steps"][0]) for eid, e in episodes.items() for s in e["samples"][1:]}
    assert changed and changed <= forks
    bodies = [json.loads(b) for b in out["tok-on:bodies"]]
    assert len(bodies) == sum(len(e["turns"]) for e in episodes.values())
    assert all(b["return_token_ids"] is True and b["logprobs"] is True for b in bodies)


def test_compaction_rewrites_the_token_arrays_exactly(runs, tmp_path):
    """`shopsim-wh compact` merges the training tables' files (list columns: int32 ids, int8 masks, float64
    logprobs) and every sample keeps its arrays and spans, value for value."""
    _, out = runs
    wh = tmp_path / "wh"
    shutil.copytree(out["wh"], wh)
    query = ("select t.run_id, t.episode_id, t.sample_idx, t.token_ids, t.loss_mask, t.rollout_logprobs, "
             "(select list(struct_pack(s.span_idx, s.token_start, s.token_end, s.kind, s.step_idx) order by s.span_idx) "
             " from training_spans s where s.run_id = t.run_id and s.episode_id = t.episode_id "
             " and s.sample_idx = t.sample_idx) as spans from training_tokens t order by all")
    before = connect(wh).execute(query).fetchall()
    assert "file(s) replaced" in ok(shopsim("compact", "-w", wh)).stdout
    assert connect(wh).execute(query).fetchall() == before and len(before) > 2


def test_switched_off_the_requests_are_unchanged_and_nothing_is_recorded(runs):
    con, out = runs
    for table in ("model_turn_tokens", "training_samples", "training_tokens", "training_spans"):
        assert con.execute(f"select count(*) from {table} where run_id = 'tok-off'").fetchone()[0] == 0
    off = out["tok-off:bodies"]
    assert all(not any(k.encode() in b for k in TOKEN_FIELDS) for b in off)
    assert all(list(json.loads(b)) == ["model", "messages", "temperature", "max_tokens", "top_p", "seed", "tools",
                                       "tool_choice"] for b in off)
    # byte for byte: the switched-on bodies without the two fields are the switched-off bodies
    on = [b.replace(b',"return_token_ids":true,"logprobs":true', b"") for b in out["tok-on:bodies"]]
    assert Counter(on) == Counter(off) and len(off) > 3
    # and the policy chose the same: the same actions, episode by episode
    acts = "select episode_id, list(action order by step_idx, call_idx) from actions where run_id = ? group by 1 order by 1"
    assert con.execute(acts, ["tok-on"]).fetchall() == con.execute(acts, ["tok-off"]).fetchall()


def test_a_server_without_token_ids_stops_the_run_with_what_to_turn_on(runs):
    con, out = runs
    res = out["no-ids"]
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "record_tokens" in res.stderr and "return_token_ids" in res.stderr and "vLLM" in res.stderr \
        and "0.10.2" in res.stderr, res.stderr
    assert con.execute("select count(*) from model_turn_tokens where run_id = 'no-ids'").fetchone()[0] == 0
    # nothing half recorded: the failed episodes hold slime's placeholder (dropped by trainers) and nothing else
    rows = _rows(con, "select s.status, s.remove_sample, s.trainable_tokens, t.token_ids, e.status as episode_status "
                      "from training_samples s join training_tokens t using (run_id, episode_id, attempt, agent_id, "
                      "sample_idx) join episodes e using (run_id, episode_id, attempt) where run_id = 'no-ids'")
    assert rows and all((r["status"], r["remove_sample"], r["trainable_tokens"], r["token_ids"], r["episode_status"])
                        == ("aborted", True, 0, [0, 0], "failed") for r in rows)
    assert con.execute("select count(*) from failures where run_id = 'no-ids' and exception_type = 'TokenIdsMissing'"
                       ).fetchone()[0] == len(rows)


def test_a_drifted_prompt_forks_the_episode_into_samples_of_one_rollout(runs):
    con, out = runs
    episodes = _episodes(con, "drift")
    assert len(episodes) == 2
    for e in episodes.values():
        _check_episode(e)
        samples = e["samples"]
        steps = [t["step_idx"] for t in e["turns"]]
        assert len(steps) >= 3
        assert [json.loads(s["metadata"])["steps"] for s in samples] == [steps[:1], steps[1:]]
        assert len({s["rollout_id"] for s in samples}) == 1
        inserted = [sp for sp in e["spans"] if sp["kind"] == "inserted"]
        assert len(inserted) == len(steps) - 2  # between the turns of the second sample
        assert {e["messages"][sp["message_idx"]]["role"] for sp in inserted} == {"tool"}
        assert samples[1]["trainable_tokens"] < samples[1]["response_length"]
    assert all(b["return_prompt_token_ids"] and b["return_meta_info"] and b["return_token_ids"]
               for b in out["drift:bodies"])


class GarbledOnce:
    """A chat server whose first answer is a 200 with a body that is not JSON, then the embedded policy's."""

    def __init__(self):
        self.requests = 0

    async def __call__(self, scope, receive, send):
        body = json.loads(await read_body(receive))
        self.requests += 1
        data = b"<html>bad gateway</html>" if self.requests == 1 else json.dumps(chat_completion(body, PolicyConfig())).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": data})


@pytest.mark.parametrize("record", [False, True])
def test_a_garbled_answer_is_retried_only_when_it_would_be_recorded(record):
    server = GarbledOnce()
    messages = [{"role": "system", "content": "shop"}, {"role": "user", "content": "购物任务：\nfind a lamp\n\n页面：搜索首页"}]
    tools = [{"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]

    async def main():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server), base_url="http://m/v1") as client:
            model = ChatModel(client, "scripted-strong", ChatOptions(record_tokens=record, backoff_base_s=0.0))
            return await model.generate(messages, tools, seed=1)

    out = asyncio.run(main())
    if record:
        assert server.requests == 2 and out.protocol_error is None and out.tokens is not None
        assert out.tokens.prompt_ids == TOK.chat_ids(messages, tools, add_generation_prompt=True)
        assert TOK.decode(out.tokens.completion_ids).endswith("</tool_call><|im_end|>")
        assert len(out.tokens.logprobs) == len(out.tokens.completion_ids)
    else:
        assert server.requests == 1 and out.protocol_error["code"] == "invalid_json_response" and out.tokens is None
