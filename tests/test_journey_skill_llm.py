"""Journey: `shopsim-wh skills mine --builder llm`, a model writing one skill per failure-mechanism cluster, through
the installed CLI.

A user runs the noisy demo policy (persona on: the agent's prompts hold a persona section, its steps recorded
reasoning), then mines with a model behind a real loopback OpenAI-compatible server started here. The server reads
each request as a model would (the mechanism from its `## Failure mechanism` section) and answers: a valid skill
for `option_miss`, the same in a ```json fence for `over_budget`, a skill that copies the title of a product page
shown in the request's evidence for `wrong_product`, JSON without a procedure for `navigation`, prose for
`protocol`. The journey checks the stored candidates against what the server answered and against the rules
builder's clusters, the gold firewall's finding on the leak (and that the leak never reaches a snapshot although
accepted), the two failures reported with exit 1, what the requests held (the evidence, never the private goal, the
persona or the reasoning), and that mining again adds nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from pathlib import Path

import pytest
import yaml

from shopsim_wh.sim.tasks import generate_tasks, persona_profile
from shopsim_wh.testing.servers import serve_asgi

from .conftest import read_body
from .journeys import facts, noisy_run, ok, shopsim

SKILLS = {
    "option_miss": {"title": "Choose every option the request names",
                    "applicable_when": "a product page offers option axes",
                    "procedure": ["Read each option axis on the page.", "Click the value the request names on each axis.",
                                  "Buy only when every axis shows a selected value."],
                    "verification": "the page says every option is selected",
                    "common_failure": "buying with the first value of an axis left selected"},
    "over_budget": {"title": "Check the price before buying",
                    "applicable_when": "the request states a price limit",
                    "procedure": ["Compare each result's price with the limit.", "Skip items above it."],
                    "verification": "the price on the product page is under the limit",
                    "common_failure": "buying the best match without looking at its price"},
}
REF = '[{"run_id":"VARCHAR","episode_id":"VARCHAR","step_idx":"INTEGER"}]'


def digest(messages: list[dict]) -> str:
    canon = json.dumps(messages, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()


class SkillModel:
    """A loopback OpenAI-compatible model; keeps every request body and what it answered (by the messages' hash)."""

    def __init__(self):
        self.bodies: list[dict] = []
        self.sent: dict[str, str] = {}
        self.copied: dict[str, str] = {}  # mechanism -> the product title a leaking answer copied
        self.lock = threading.Lock()

    def answer(self, user: str) -> tuple[str, str]:
        mechanism = user.split("## Failure mechanism\n", 1)[1].split(" ", 1)[0]
        if mechanism == "option_miss":
            return mechanism, json.dumps(SKILLS[mechanism])
        if mechanism == "over_budget":
            return mechanism, "```json\n" + json.dumps(SKILLS[mechanism], indent=2) + "\n```"
        if mechanism == "wrong_product":
            title = re.search(r"^- 标题：(.+)$", user, re.MULTILINE).group(1).strip()  # a product page it was shown
            self.copied[mechanism] = title
            return mechanism, json.dumps({
                "title": "Buy the item that matches", "applicable_when": "the results list similar products",
                "procedure": ["Compare the titles with the request.", f"Prefer {title} when it is listed."],
                "verification": "the product matches the request", "common_failure": "clicking the first result"})
        if mechanism == "navigation":
            return mechanism, json.dumps({"title": "Keep moving", "applicable_when": "always",
                                          "verification": "a purchase happens", "common_failure": "looping"})
        return mechanism, "The agent should simply answer with one tool call every turn."

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        raw = await read_body(receive)
        body = json.loads(raw)
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        _, content = self.answer(user)
        with self.lock:
            self.bodies.append(body)
            self.sent[digest(body["messages"])] = content
        doc = {"id": "chatcmpl-skill", "object": "chat.completion", "created": 0, "model": body["model"],
               "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
        out = json.dumps(doc).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]})
        await send({"type": "http.response.body", "body": out})


q = facts


def mine(wh: Path, *args) -> tuple[dict, object]:
    res = shopsim("skills", "mine", "--runs", "noisy", "--warehouse", wh, "-f", "json", *args)
    return json.loads(res.stdout), res


def chunk(s: dict) -> str:
    steps = "\n".join(f"  {i}. {x}" for i, x in enumerate(s["procedure"], 1))
    return (f"### {s['title']}\n\n- Applies when: {s['applicable_when']}\n- Procedure:\n{steps}\n"
            f"- Verify: {s['verification']}\n- Avoid: {s['common_failure']}")


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("journey-skill-llm")
    wh = noisy_run(tmp_path_factory, tmp / "wh")  # `shopsim-wh run` of the noisy demo, persona on, 8 x 2
    rules = json.loads(ok(shopsim("skills", "mine", "--runs", "noisy", "--round", "rules-000", "--warehouse", wh,
                                  "-f", "json")).stdout)
    model = SkillModel()
    with serve_asgi(model) as url:
        mcfg = tmp / "writer.yaml"
        mcfg.write_text(yaml.safe_dump({"model": {"name": "skill-writer", "base_url": url + "/v1", "max_retries": 0,
                                                  "sampling": {"temperature": 0.0}}, "concurrency": 2}))
        first, first_res = mine(wh, "--builder", "llm", "--model", mcfg)
        first_bodies = list(model.bodies)
        again, again_res = mine(wh, "--builder", "llm", "--model", mcfg)
        fewer, fewer_res = mine(wh, "--builder", "llm", "--model", mcfg, "--max-refs", "5")
    return {"tmp": tmp, "wh": wh, "rules": rules, "model": model, "mcfg": mcfg, "first": first,
            "first_res": first_res, "first_bodies": first_bodies, "again": again, "again_res": again_res,
            "fewer": fewer, "fewer_res": fewer_res}


def stored(wh: Path) -> dict[str, dict]:
    return {r["mechanism"]: r for r in q(wh, "SELECT * FROM skill_candidates WHERE run_id = 'round-000'")}


def test_each_cluster_gets_the_models_skill_or_a_reported_failure(env):
    wh, first, res = env["wh"], env["first"], env["first_res"]
    assert res.returncode == 1, res.stderr  # two clusters got no skill
    assert first["builder"] == "llm" and first["sent"] == 5
    assert {c["mechanism"] for c in first["candidates"]} == {"option_miss", "over_budget", "wrong_product"}
    failed = {f["mechanism"]: f["reason"] for f in first["failed"]}
    assert failed["navigation"].startswith("missing_field: procedure")
    assert failed["protocol"].startswith("not_json")
    assert set(failed) == {"navigation", "protocol"}
    assert "2 cluster(s) got no skill" in res.stderr and "navigation: missing_field" in res.stderr
    rows = stored(wh)
    assert set(rows) == {"option_miss", "over_budget", "wrong_product"}  # a malformed answer is stored nowhere
    answered = env["model"].sent
    for mechanism, row in rows.items():
        assert row["builder"] == "llm" and row["builder_fingerprint"] == first["builder_fingerprint"]
        assert row["raw_output"] == answered[row["builder_input_hash"]]  # the raw answer, as the server sent it
        if mechanism in SKILLS:
            assert row["content"] == chunk(SKILLS[mechanism]) and row["title"] == SKILLS[mechanism]["title"]
        canon = json.dumps({"operation": "ADD", "target_chunk_id": None, "content": row["content"]}, sort_keys=True,
                           separators=(",", ":"), ensure_ascii=False)
        assert row["candidate_id"] == "online-" + hashlib.sha256(canon.encode()).hexdigest()[:16]
    assert len({r["builder_fingerprint"] for r in rows.values()}) == 1 and len(first["builder_fingerprint"]) == 64


def test_the_candidates_carry_the_rules_builders_clusters_as_evidence(env):
    wh = env["wh"]
    rules = {r["mechanism"]: r for r in q(wh, "SELECT * FROM skill_candidates WHERE run_id = 'rules-000'")}
    for mechanism, row in stored(wh).items():
        assert json.loads(row["negative_refs"]) == json.loads(rules[mechanism]["negative_refs"])
        assert json.loads(row["positive_refs"]) == json.loads(rules[mechanism]["positive_refs"])
        assert json.loads(row["negative_refs"]) and json.loads(row["source_runs"]) == ["noisy"]
    bad = q(wh, f"""SELECT r.episode_id FROM skill_candidates c, unnest(from_json(c.negative_refs, '{REF}')) t(r)
                    WHERE c.run_id = 'round-000' AND c.mechanism = 'option_miss' AND NOT EXISTS (
                      SELECT 1 FROM error_labels l WHERE l.run_id = r.run_id AND l.episode_id = r.episode_id
                      AND l.step_idx = r.step_idx AND l.code = 'option_miss')""")
    assert bad == []
    # each request showed its cluster's failing evidence: the task of its first failing episode is in it
    task = {(r["run_id"], r["episode_id"]): r["instruction"]
            for r in q(wh, "SELECT run_id, episode_id, instruction FROM episodes")}
    for body in env["first_bodies"]:
        user = body["messages"][1]["content"]
        mechanism = user.split("## Failure mechanism\n", 1)[1].split(" ", 1)[0]
        ref = json.loads(rules[mechanism]["negative_refs"])[0]
        assert task[(ref["run_id"], ref["episode_id"])] in user and "### Failing episode 1" in user


def test_the_firewall_blocks_the_leaking_answer_from_the_snapshot(env):
    wh, tmp = env["wh"], env["tmp"]
    title = env["model"].copied["wrong_product"]
    leak = stored(wh)["wrong_product"]
    # the title really is a product page of the candidate's evidence episodes (what the firewall compares with)
    pages = {r["t"] for r in q(wh, f"""SELECT DISTINCT json_extract_string(o.observation_state, '$.product.title') AS t
        FROM skill_candidates c, unnest(from_json(c.negative_refs, '{REF}')) x(r)
        JOIN observations o ON o.run_id = r.run_id AND o.episode_id = r.episode_id
        WHERE c.candidate_id = $cid""", cid=leak["candidate_id"])}
    assert title in pages and title in leak["content"]
    listed = {c["candidate_id"]: c for c in json.loads(ok(shopsim(
        "skills", "list", "--round", "round-000", "--warehouse", wh, "-f", "json")).stdout)["candidates"]}
    assert listed[leak["candidate_id"]]["state"] == "blocked"
    assert {"finding": "copies_instance_product_title", "example": title} in listed[leak["candidate_id"]]["findings"]
    clean = [cid for cid, c in listed.items() if cid != leak["candidate_id"]]
    assert len(clean) == 2 and all(listed[c]["findings"] == [] and listed[c]["state"] == "pending" for c in clean)
    ok(shopsim("skills", "review", *listed, "--accept", "--reason", "reads as general advice", "--reviewer", "rita",
               "--warehouse", wh))
    snap = json.loads(ok(shopsim("skills", "snapshot", "--out", tmp / "bank.json", "--round", "round-000",
                                 "--warehouse", wh, "-f", "json")).stdout)
    bank = json.loads((tmp / "bank.json").read_text())
    assert sorted(s["skill_id"] for s in bank["skills"]) == sorted(clean)
    assert [x["candidate_id"] for x in snap["left_out"]] == [leak["candidate_id"]]
    assert all(s["metadata"]["builder"] == "llm" for s in bank["skills"])
    assert title not in json.dumps(bank["skills"], ensure_ascii=False)


def test_the_requests_hold_no_private_goal_persona_or_reasoning(env):
    wh = env["wh"]
    eps = q(wh, "SELECT episode_id, task_id FROM episodes")
    tasks = generate_tasks(0).by_id
    text = json.dumps(env["model"].bodies, ensure_ascii=False)
    assert len(env["first_bodies"]) == 5 and all(len(b["messages"][1]["content"]) < 40_000 for b in env["first_bodies"])
    goals = {tasks[e["task_id"]].goal.goal_signature for e in eps}
    personas = {persona_profile(tasks[e["task_id"]].persona)[k] for e in eps for k in ("occupation", "preference")}
    assert not {g for g in goals if g in text}
    assert not {p for p in personas if p in text} and "用户个人文档：" not in text
    # the persona was recorded in the agent's prompts: the check above could fail
    assert q(wh, "SELECT count(*) AS n FROM messages WHERE content LIKE '%用户个人文档：%'")[0]["n"]
    reasoning = {r["reasoning"] for r in q(wh, "SELECT DISTINCT reasoning FROM steps WHERE length(reasoning) > 80")}
    assert reasoning and not {r for r in reasoning if r in text} and "reasoning]" not in text
    assert not {e["episode_id"] for e in eps if e["episode_id"] in text}  # no episode id (it names its task)


def test_mining_again_adds_nothing(env):
    wh, again, fewer = env["wh"], env["again"], env["fewer"]
    ids = {c["candidate_id"] for c in env["first"]["candidates"]}
    # the same evidence and model: the answered clusters are not asked again, the failed two are
    assert env["again_res"].returncode == 1 and again["sent"] == 2 and again["candidates"] == []
    assert set(again["already_mined"]) == ids
    # fewer refs: the clusters whose evidence changed are asked again (and the failed two), the same skill text
    # adds nothing
    changed = {c["mechanism"] for c in env["rules"]["candidates"] if c["negative_refs"] > 5 or c["positive_refs"] > 5}
    assert {"option_miss", "wrong_product"} <= changed and "over_budget" not in changed
    assert env["fewer_res"].returncode == 1 and fewer["candidates"] == []
    assert fewer["sent"] == len(changed | {"navigation", "protocol"})
    assert set(fewer["already_mined"]) == ids
    assert len(env["model"].bodies) == 5 + 2 + fewer["sent"]
    assert q(wh, "SELECT count(*) AS n FROM skill_candidates WHERE run_id = 'round-000'") == [{"n": 3}]


def test_the_llm_builder_needs_a_model_config(env):
    wh = env["wh"]
    res = shopsim("skills", "mine", "--builder", "llm", "--warehouse", wh)
    assert res.returncode == 2 and "--model CONFIG.yaml" in res.stderr
    res = shopsim("skills", "mine", "--builder", "llm", "--model", "embedded", "--warehouse", wh)
    assert res.returncode == 2 and "no scripted skill writer" in res.stderr
