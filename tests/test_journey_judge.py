"""Journey: an offline judge over frozen traces, human labels and the calibration views, through the installed CLI.

A user runs the noisy demo policy (`shopsim-wh run`, persona on), judges the stored episodes with the scripted judge
of the embedded default (`shopsim-wh judge`, stopped half way with --limit and resumed, then re-run: nothing sent),
judges them again with a second rubric version and with a judge behind a real loopback OpenAI-compatible server
that answers some requests with malformed output, imports a labeler's CSV (`shopsim-wh labels import`) and reads
the confusion matrices and Cohen's kappa of `judge_confusion` / `judge_agreement`. Every figure is recomputed here
from the episodes (what the scripted judge must answer, from the public outcome) and the rule taxonomy.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from pathlib import Path

import pytest
import yaml

from shopsim_wh.core.errors import ConfigError
from shopsim_wh.rollout.judge import load_rubric
from shopsim_wh.sim import judge as scripted
from shopsim_wh.sim.tasks import generate_tasks, persona_profile
from shopsim_wh.testing.servers import serve_asgi

from .conftest import read_body
from .journeys import facts, noisy_run, ok, shopsim

FAILURES = ["none", "no_purchase", "action_limit", "protocol_budget", "generation_length", "type_miss",
            "attribute_miss", "option_miss", "over_budget", "wrong_product", "other"]
RUBRIC = {"id": "failure-mechanism", "version": "1",
          "instructions": "You review one recorded episode of a shopping agent. Say what went wrong, if anything.",
          "questions": [{"id": "primary_failure", "prompt": "What is the main reason it is not a strict success?",
                         "labels": FAILURES, "taxonomy": "primary_failure"},
                        {"id": "protocol_trouble", "prompt": "Did the agent break the tool protocol at least once?",
                         "labels": ["yes", "no"]}]}
# version 2 shows the judge the persona and has no option_miss: a purchase that is not a strict success is `other`
RUBRIC_V2 = {**RUBRIC, "version": "2", "include": ["persona"],
             "questions": [{**RUBRIC["questions"][0], "labels": [x for x in FAILURES if x != "option_miss"]},
                           RUBRIC["questions"][1]]}


def sql(wh: Path, query: str, **params) -> list[dict]:
    args = [a for k, v in params.items() for a in ("-p", f"{k}={v}")]
    return json.loads(ok(shopsim("sql", query, "--warehouse", wh, "--format", "json", *args)).stdout)


q = facts


def calibration(wh: Path, comparison: str, question: str, rater: str = "%", other: str = "%") -> tuple[dict, dict]:
    """(confusion {(judge label, other label): n}, the agreement row) of one comparison: one `shopsim-wh sql`."""
    where = "comparison = $c AND question = $qn AND rater LIKE $r AND other_rater LIKE $o"
    rows = sql(wh, f"SELECT 'confusion' AS what, judge_label, other_label, n, NULL AS agreed, NULL AS agreement, "
                   f"NULL AS kappa, other_rater FROM judge_confusion WHERE {where} UNION ALL "
                   f"SELECT 'agreement', NULL, NULL, n, agreed, agreement, kappa, other_rater FROM judge_agreement "
                   f"WHERE {where}", c=comparison, qn=question, r=rater, o=other)
    [agree] = [r for r in rows if r["what"] == "agreement"]
    return {(r["judge_label"], r["other_label"]): r["n"] for r in rows if r["what"] == "confusion"}, agree


def judge(wh: Path, rubric: Path, *args) -> dict:
    return json.loads(ok(shopsim("judge", "--rubric", rubric, "--warehouse", wh, "--format", "json", *args)).stdout)


def expected_failure(ep: dict, allowed: list[str]) -> str:
    """What the scripted judge must answer from the public outcome (docs/judge.md, the scripted judge)."""
    if ep["r_success"] == 1:
        label = "none"
    elif ep["termination_reason"] in ("action_limit", "protocol_budget", "generation_length"):
        label = ep["termination_reason"]
    elif ep["termination_reason"] != "purchase":
        label = "no_purchase"
    else:
        label = "option_miss"
    return label if label in allowed else "other"


def kappa(pairs: list[tuple[str, str]]) -> tuple[int, int, float | None]:
    n = len(pairs)
    agreed = sum(a == b for a, b in pairs)
    left, right = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
    pe = sum(left[k] * right[k] for k in left) / (n * n)
    return n, agreed, None if pe == 1 else (agreed / n - pe) / (1 - pe)


class Recorder:
    """A loopback OpenAI-compatible judge: the scripted judge's answers, except every third request (by the hash of
    its messages) gets prose and every fifth an unknown label; keeps every request body and what it answered."""

    def __init__(self):
        self.bodies: list[dict] = []
        self.sent: dict[str, str] = {}  # sha256 of the canonical messages -> content answered
        self.lock = threading.Lock()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        raw = await read_body(receive)
        body = json.loads(raw)
        doc = scripted.completion(body)
        canon = json.dumps(body["messages"], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        digest = hashlib.sha256(canon.encode()).hexdigest()
        if int(digest[:8], 16) % 3 == 0:
            doc["choices"][0]["message"]["content"] = "The agent bought a case; I would call it an option miss."
        elif int(digest[:8], 16) % 5 == 0:
            doc["choices"][0]["message"]["content"] = json.dumps(
                {"labels": {"primary_failure": "bad_luck", "protocol_trouble": "no"}, "rationale": "unlucky"})
        with self.lock:
            self.bodies.append(body)
            self.sent[digest] = doc["choices"][0]["message"]["content"]
        out = json.dumps(doc).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]})
        await send({"type": "http.response.body", "body": out})


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("journey-judge")
    wh = noisy_run(tmp_path_factory, tmp / "wh")  # `shopsim-wh run` of the noisy demo, persona on, 8 x 2
    r1, r2 = tmp / "rubric-v1.yaml", tmp / "rubric-v2.yaml"
    r1.write_text(yaml.safe_dump(RUBRIC))
    r2.write_text(yaml.safe_dump(RUBRIC_V2))
    first = judge(wh, r1, "--limit", "5")  # a judge stopped half way ...
    resumed = judge(wh, r1)  # ... resumes where it stopped
    again = judge(wh, r1)
    v2 = judge(wh, r2, "--model", "embedded")
    episodes = q(wh, "SELECT run_id, episode_id, task_id, status, termination_reason, r_success, protocol_errors "
                       "FROM episodes ORDER BY episode_id")
    return {"tmp": tmp, "wh": wh, "r1": r1, "r2": r2, "runs": (first, resumed, again), "v2": v2,
            "episodes": episodes}


def rater(result: dict) -> str:
    return (f"{result['rubric_id']}@{result['rubric_version']}#{result['rubric_sha256'][:8]}/"
            f"{result['judge_fingerprint'][:8]}")


def test_judge_resumes_and_a_rerun_sends_nothing(env):
    first, resumed, again = env["runs"]
    n = len(env["episodes"])
    assert n == 16
    assert (first["items"], first["sent"], first["parsed"]) == (n, 5, 5)
    assert (resumed["already_judged"], resumed["sent"], resumed["parsed"]) == (5, n - 5, n - 5)
    assert (again["already_judged"], again["sent"]) == (n, 0)
    rows = q(env["wh"], "SELECT count(*) AS n, count(DISTINCT output_id) AS ids, count(DISTINCT load_id) AS loads "
                          "FROM stg_judge_outputs WHERE rubric_sha256 = $sha", sha=first["rubric_sha256"])
    assert rows == [{"n": n, "ids": n, "loads": 2}]
    assert first["rubric_sha256"] == hashlib.sha256(env["r1"].read_bytes()).hexdigest()


def test_scripted_judge_labels_follow_the_trace_and_the_rule_calibration_adds_up(env):
    wh, first = env["wh"], env["runs"][0]
    got = {(r["episode_id"], r["question"]): r["label"] for r in q(
        wh, "SELECT episode_id, question, label FROM judge_labels WHERE rubric_sha256 = $sha",
        sha=first["rubric_sha256"])}
    eps = {e["episode_id"]: e for e in env["episodes"]}
    for ep_id, ep in eps.items():
        assert got[(ep_id, "primary_failure")] == expected_failure(ep, FAILURES)
        assert got[(ep_id, "protocol_trouble")] == ("yes" if ep["protocol_errors"] else "no")
    rules = {r["episode_id"]: r["primary_failure"] or "none"
             for r in q(wh, "SELECT episode_id, primary_failure FROM episode_primary_failure")}
    pairs = [(expected_failure(ep, FAILURES), rules[e]) for e, ep in eps.items()]
    confusion, agree = calibration(wh, "rules", "primary_failure", rater(first))
    assert confusion == dict(Counter(pairs))
    assert len(set(pairs)) >= 3 and any(a != b for a, b in pairs)  # the noisy run disagrees somewhere
    n, agreed, k = kappa(pairs)
    assert (agree["n"], agree["agreed"]) == (n, agreed)
    assert agree["agreement"] == pytest.approx(agreed / n)
    assert agree["kappa"] == pytest.approx(k)
    assert 0 < k < 1


def test_two_rubric_versions_are_compared_judge_against_judge(env):
    wh, first, v2 = env["wh"], env["runs"][0], env["v2"]
    assert v2["sent"] == len(env["episodes"]) and v2["rubric_version"] == "2"
    left, right = sorted([rater(first), rater(v2)])
    labels = {}
    for r in q(wh, "SELECT rubric_version, episode_id, label FROM judge_labels WHERE question = 'primary_failure'"
                     " AND judge_fingerprint = $fp", fp=first["judge_fingerprint"]):
        labels.setdefault(r["rubric_version"], {})[r["episode_id"]] = r["label"]
    by = {rater(first): labels["1"], rater(v2): labels["2"]}
    pairs = [(by[left][e], by[right][e]) for e in sorted(by[left])]
    assert any(a != b for a, b in pairs) and any(a == b for a, b in pairs)
    confusion, agree = calibration(wh, "judge", "primary_failure", left, right)
    assert confusion == dict(Counter(pairs))
    n, agreed, k = kappa(pairs)
    assert (agree["n"], agree["agreed"]) == (n, agreed) and agree["kappa"] == pytest.approx(k)


def _needles(env) -> tuple[set[str], set[str]]:
    tasks = generate_tasks(0).by_id
    ids = {e["task_id"] for e in env["episodes"]}
    goals = {tasks[t].goal.goal_signature for t in ids}
    personas = {"用户个人文档："} | {persona_profile(tasks[t].persona)[k] for t in ids for k in ("occupation", "preference")}
    return goals, personas


def test_a_loopback_judge_keeps_malformed_answers_and_sees_no_private_data(env):
    wh, tmp = env["wh"], env["tmp"]
    recorder = Recorder()
    with serve_asgi(recorder) as url:
        cfg = tmp / "judge.yaml"
        cfg.write_text(yaml.safe_dump({"model": {"name": "scripted-judge", "base_url": url + "/v1", "max_retries": 0,
                                                 "sampling": {"temperature": 0.0}}, "concurrency": 4}))
        res = judge(wh, env["r1"], "--model", cfg)
        first_bodies = list(recorder.bodies)
        res2 = judge(wh, env["r2"], "--model", cfg)
    n = len(env["episodes"])
    assert res["sent"] == n and len(first_bodies) == n and res2["sent"] == n
    rows = q(wh, "SELECT input_hash, raw_output, parse_error, labels FROM judge_outputs WHERE judge_fingerprint = $fp "
                   "AND rubric_sha256 = $sha", fp=res["judge_fingerprint"], sha=res["rubric_sha256"])
    assert len(rows) == n
    for row in rows:
        sent = recorder.sent[row["input_hash"]]  # the stored hash is the hash of what the judge was sent
        assert row["raw_output"] == sent  # every raw output kept, byte for byte
        if sent.startswith("The agent"):
            assert row["parse_error"].startswith("not_json") and json.loads(row["labels"]) == {}
        elif "bad_luck" in sent:
            assert row["parse_error"].startswith("invalid_label: primary_failure")
            assert json.loads(row["labels"]) == {"protocol_trouble": "no"}
        else:
            assert row["parse_error"] is None
    parse_errors = sum(r["parse_error"] is not None for r in rows)
    assert res["parse_errors"] == parse_errors and 0 < parse_errors < n
    goals, personas = _needles(env)
    text = json.dumps(first_bodies, ensure_ascii=False)
    assert not {g for g in goals if g in text}
    assert not {p for p in personas if p in text}  # rubric v1 includes no persona
    text2 = json.dumps(recorder.bodies[n:], ensure_ascii=False)
    assert not {g for g in goals if g in text2}
    assert "用户个人文档：" in text2  # rubric v2 asks for the persona: the check above could fail


def test_human_labels_import_idempotently_and_calibrate_the_judge(env):
    wh, tmp, first = env["wh"], env["tmp"], env["runs"][0]
    eps = env["episodes"]
    rules = {r["episode_id"]: r["primary_failure"] or "none"
             for r in q(wh, "SELECT episode_id, primary_failure FROM episode_primary_failure")}
    lines = ["experiment,run_id,episode_id,step_idx,label,value,labeler,note"]
    human = {}
    for i, ep in enumerate(eps[:12]):
        value = rules[ep["episode_id"]] if i % 4 else "other"
        human[ep["episode_id"]] = value
        run = "" if i == 0 else ep["run_id"]
        exp = "noisy" if i == 0 else ""  # the first row names the experiment instead of the run
        lines.append(f"{exp},{run},{ep['episode_id']},,primary_failure,{value},alice,\"looked, twice\"")
    lines.append(f",{eps[0]['run_id']},{eps[0]['episode_id']},0,step_note,fine,alice,")
    csv_file = tmp / "labels.csv"
    csv_file.write_text("\n".join(lines) + "\n")
    out = ok(shopsim("labels", "import", csv_file, "--warehouse", wh)).stdout
    assert "13 imported, 0 already stored" in out
    assert "0 imported, 13 already stored" in ok(shopsim("labels", "import", csv_file, "--warehouse", wh)).stdout
    assert q(wh, "SELECT count(*) AS n FROM labels") == [{"n": 13}]
    judged = {r["episode_id"]: r["label"] for r in q(
        wh, "SELECT episode_id, label FROM judge_labels WHERE rubric_sha256 = $sha AND judge_fingerprint = $fp "
            "AND question = 'primary_failure'", sha=first["rubric_sha256"], fp=first["judge_fingerprint"])}
    pairs = [(judged[e], v) for e, v in human.items()]
    confusion, agree = calibration(wh, "human", "primary_failure", rater(first))
    assert confusion == dict(Counter(pairs))
    n, agreed, k = kappa(pairs)
    assert (agree["other_rater"], agree["n"], agree["agreed"]) == ("human:alice", n, agreed)
    assert agree["kappa"] == pytest.approx(k)


def test_bad_label_rows_are_named_by_line_and_nothing_lands(env):
    wh, tmp = env["wh"], env["tmp"]
    ep = env["episodes"][0]
    bad = tmp / "bad.jsonl"
    bad.write_text("\n".join([
        json.dumps({"run_id": ep["run_id"], "episode_id": ep["episode_id"], "label": "x", "value": "y", "labeler": "bob"}),
        json.dumps({"run_id": ep["run_id"], "episode_id": "task-999999__sample-000", "label": "x", "value": "y",
                    "labeler": "bob"}),
        json.dumps({"run_id": ep["run_id"], "episode_id": ep["episode_id"], "step_idx": "two", "label": "x",
                    "value": "y", "labeler": "bob"}),
        json.dumps({"run_id": ep["run_id"], "episode_id": ep["episode_id"], "label": "x", "labeler": "bob"}),
    ]) + "\n")
    before = q(wh, "SELECT count(*) AS n FROM stg_labels")
    res = shopsim("labels", "import", bad, "--warehouse", wh)
    assert res.returncode == 2
    assert "3 of 4 label row(s) are wrong, nothing was imported" in res.stderr
    for line, what in ((2, "has no episode"), (3, "not a whole number"), (4, "value is missing")):
        assert f"bad.jsonl:{line}: " in res.stderr and what in res.stderr
    assert q(wh, "SELECT count(*) AS n FROM stg_labels") == before


def test_a_rubric_label_outside_the_taxonomy_is_refused(env):
    wh, tmp = env["wh"], env["tmp"]
    wrong = {**RUBRIC, "questions": [{**RUBRIC["questions"][0], "labels": ["none", "bought_wrong_colour"]}]}
    path = tmp / "wrong.yaml"
    path.write_text(yaml.safe_dump(wrong))
    res = shopsim("judge", "--rubric", path, "--warehouse", wh)
    assert res.returncode == 2
    assert "bought_wrong_colour" in res.stderr and "taxonomy" in res.stderr
    missing = tmp / "no-questions.yaml"
    missing.write_text(yaml.safe_dump({"id": "x", "version": "1"}))
    with pytest.raises(ConfigError, match="questions.*docs/judge.md"):
        load_rubric(missing)


def test_step_grain_judges_each_step_against_the_step_rules(env):
    wh, tmp = env["wh"], env["tmp"]
    codes = [r["code"] for r in q(wh, "SELECT code FROM taxonomy WHERE scope = 'step' ORDER BY code")]
    rubric = {"id": "step-protocol", "version": "1", "grain": "step",
              "questions": [{"id": "step_failure", "prompt": "Which protocol error, if any, did this step make?",
                             "labels": ["none", *codes], "taxonomy": "primary_failure"}]}
    path = tmp / "steps.yaml"
    path.write_text(yaml.safe_dump(rubric))
    res = judge(wh, path)
    steps = q(wh, "SELECT s.episode_id, s.step_idx, coalesce(c.label, 'none') AS label FROM steps AS s "
                    "LEFT JOIN protocol_codes AS c ON c.code = s.protocol_error AND c.kind = 'protocol' "
                    "WHERE s.agent_id = 'main'")
    assert res["grain"] == "step" and res["parsed"] == len(steps)
    got = {(r["episode_id"], r["step_idx"]): r["label"] for r in q(
        wh, "SELECT episode_id, step_idx, label FROM judge_labels WHERE rubric_sha256 = $sha", sha=res["rubric_sha256"])}
    assert got == {(s["episode_id"], s["step_idx"]): s["label"] for s in steps}
    assert len(set(got.values())) >= 3
    rule = {(r["episode_id"], r["step_idx"]): r["code"] for r in q(
        wh, "SELECT episode_id, step_idx, code FROM error_labels WHERE agent_id = 'main' AND scope = 'step' "
            "QUALIFY row_number() OVER (PARTITION BY episode_id, step_idx ORDER BY precedence, code) = 1")}
    pairs = [(label, rule.get(key, "none")) for key, label in got.items()]
    confusion, agree = calibration(wh, "rules", "step_failure")
    assert confusion == dict(Counter(pairs))
    n, agreed, k = kappa(pairs)
    assert (agree["n"], agree["agreed"]) == (n, agreed) and agree["kappa"] == pytest.approx(k)
