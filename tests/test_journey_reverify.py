"""Journey: re-score stored episodes with the current reward and labelling code, without the policy, through the
installed CLI (`shopsim-wh reverify`, docs/reverify.md).

A user runs the noisy demo policy on the embedded default (`shopsim-wh run`), re-scores the run (`reverify --run`):
every episode is replayed from its stored actions and its recomputed reward, components, termination and rule
labels equal the stored ones (the code is unchanged); the same command again stores nothing. Then a changed reward
rule (`--primary-reward r_loose`, the pi-slime convention) becomes a second labels version, and the comparison view
shows which episodes it changed, on the same trajectories. An ingested ShopSimRL run directory (written here as raw
JSON lines) cannot be replayed: its rows say so, and only its rule labels are recomputed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from . import shopsimrl_raw as raw
from .helpers import write_config
from .journeys import ok, shopsim

# an ingested purchase that half-met the attributes (r_loose 0.75, r_strict 0) and a full success
MISS = {"r_type": 1.0, "r_att": 0.5, "r_option": 1.0, "r_price": 1.0, "r_loose": 0.75, "r_strict": 0.0,
        "r_success": 0}
HIT = {"r_type": 1.0, "r_att": 1.0, "r_option": 1.0, "r_price": 1.0, "r_loose": 1.0, "r_strict": 1.0, "r_success": 1}


@pytest.fixture(scope="module")
def wh(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("journey-reverify")
    cfg = write_config(tmp / "noisy.yaml", experiment={"name": "noisy", "seed": 3},
                       tasks={"sample_size": 6, "repeats": 1}, model={"name": "scripted-noisy"},
                       runtime={"max_steps": 15, "concurrency": 4})
    ok(shopsim("run", cfg, "--warehouse", tmp / "wh", "--quiet"))
    jobs = [raw.job("val", 201), raw.job("val", 202)]
    prov = raw.provenance(raw.NO_SKILLS)
    run_dir = raw.write_run(tmp / "runs", "ingested", [raw.record(jobs[0], prov, 0.0, MISS),
                                                        raw.record(jobs[1], prov, 1.0, HIT)],
                            plan_doc=raw.plan("ingested", jobs, raw.NO_SKILLS))
    ok(shopsim("ingest", run_dir, "--warehouse", tmp / "wh", "--quiet"))
    return tmp / "wh"


def sql(wh: Path, query: str, **params) -> list[dict]:
    args = [a for k, v in params.items() for a in ("-p", f"{k}={v}")]
    return json.loads(ok(shopsim("sql", query, "--warehouse", wh, "--format", "json", *args)).stdout)


def reverify(wh: Path, *args: str) -> dict:
    return json.loads(ok(shopsim("reverify", *args, "--warehouse", wh, "--format", "json")).stdout)


@pytest.fixture(scope="module")
def first(wh) -> dict:
    return reverify(wh, "--run", "noisy")


def test_every_replayed_episode_scores_as_stored(wh, first):
    assert (first["episodes"], first["replayed"], first["not_replayable"]) == (6, 6, 0)  # sample_size 6, all completed
    assert first["skipped"] is False and first["diverged_episodes"] == 0
    assert first["primary_reward"] == "r_strict"  # the run's own (runs.primary_reward of the embedded shop_env)
    rows = sql(wh, """
        WITH sent AS (  -- every action that reached the environment, and each runtime termination
            SELECT episode_id, count(*) AS n FROM actions WHERE run_id = 'noisy' AND agent_id = 'main'
              AND (action_type = 'terminate' OR (action_type = 'tool_use' AND action IS NOT NULL)) GROUP BY 1)
        SELECT l.episode_id, l.replayable, l.actions_replayed, s.n AS sent, l.actions_diverged, l.reward,
               e.reward AS stored, l.r_type, e.r_type AS s_type, l.r_att, e.r_att AS s_att, l.r_option,
               e.r_option AS s_option, l.r_price, e.r_price AS s_price, l.r_loose, e.r_loose AS s_loose, l.r_strict,
               e.r_strict AS s_strict, l.r_success, e.r_success AS s_success, l.termination_reason,
               e.termination_reason AS s_term, l.right_product, e.right_product AS s_right, l.primary_failure,
               p.primary_failure AS s_failure, l.reward_changed, l.components_changed, l.success_changed,
               l.termination_changed, l.label_changed, l.labels_version, d.command
        FROM episode_labels AS l
        JOIN episodes AS e USING (run_id, episode_id, attempt)
        JOIN episode_primary_failure AS p USING (run_id, episode_id)
        JOIN sent AS s USING (episode_id)
        JOIN loads AS d ON d.load_id = l.load_id
        WHERE l.run_id = 'noisy' AND e.status = 'completed' ORDER BY l.episode_id""")
    assert len(rows) == 6 and {r["labels_version"] for r in rows} == {first["labels_version"]}
    assert {r["command"] for r in rows} == {"reverify"}  # lineage: the load that wrote the version
    for r in rows:
        assert r["replayable"] and r["actions_diverged"] == 0 and r["actions_replayed"] == r["sent"] > 0
        for a, b in (("reward", "stored"), ("r_type", "s_type"), ("r_att", "s_att"), ("r_option", "s_option"),
                     ("r_price", "s_price"), ("r_loose", "s_loose"), ("r_strict", "s_strict"),
                     ("r_success", "s_success"), ("termination_reason", "s_term"), ("right_product", "s_right"),
                     ("primary_failure", "s_failure")):
            assert r[a] == r[b], (r["episode_id"], a, r[a], r[b])
        assert not any(r[f] for f in ("reward_changed", "components_changed", "success_changed",
                                      "termination_changed", "label_changed"))
    # the noisy policy gives the labels something to say: failures of several kinds, a mix of outcomes
    assert len({r["s_failure"] for r in rows}) >= 2 and 0 < sum(r["reward"] for r in rows) < 6


def test_the_same_version_again_is_skipped(wh, first):
    again = ok(shopsim("reverify", "--run", "noisy", "--warehouse", wh))
    assert "already stored (6 episode(s)" in again.stdout and "skipped" in again.stdout
    # nothing was added: episode_labels_versions counts 6 rows of that version (test below)


def test_a_changed_reward_rule_is_compared_on_the_same_trajectories(wh, first):
    loose = reverify(wh, "--run", "noisy", "--primary-reward", "r_loose", "--tag", "pi-slime-rule")
    assert loose["labels_version"] != first["labels_version"] and not loose["skipped"]
    cmp = sql(wh, """
        WITH stored AS (
            SELECT sum(CASE WHEN abs(r_loose - r_strict) > 1e-9 THEN 1 ELSE 0 END) AS differ,
                   avg(reward) AS strict_mean, avg(r_loose) AS loose_mean
            FROM episodes WHERE run_id = 'noisy')
        SELECT * FROM episode_labels_compare CROSS JOIN stored WHERE run_id = 'noisy'""")
    assert len(cmp) == 1
    c = stored = cmp[0]
    assert stored["differ"] >= 1  # partial purchases: r_loose credits what r_strict does not
    assert loose["reward_changed"] == stored["differ"] and loose["success_changed"] == 0
    assert (c["version_a"], c["version_b"]) == (first["labels_version"], loose["labels_version"])
    assert (c["primary_reward_a"], c["primary_reward_b"], c["tag_b"]) == ("r_strict", "r_loose", "pi-slime-rule")
    assert (c["episodes"], c["reward_changed"], c["success_changed"], c["label_changed"]) == (6, stored["differ"], 0, 0)
    assert c["mean_reward_a"] == pytest.approx(stored["strict_mean"])
    assert c["mean_reward_b"] == pytest.approx(stored["loose_mean"])
    assert c["mean_reward_b"] > c["mean_reward_a"]
    versions = sql(wh, "SELECT primary_reward, episodes, replayed, reward_changed, mean_reward, stored_mean_reward "
                       "FROM episode_labels_versions WHERE run_id = 'noisy' ORDER BY created_at")
    assert [(v["primary_reward"], v["episodes"], v["replayed"], v["reward_changed"]) for v in versions] == [
        ("r_strict", 6, 6, 0), ("r_loose", 6, 6, stored["differ"])]
    assert versions[0]["mean_reward"] == pytest.approx(versions[0]["stored_mean_reward"])


def test_an_ingested_trace_gets_rule_labels_only(wh):
    res = reverify(wh, "--run", "ingested")  # an experiment name of one run stands for its run id
    run = res["run_id"]
    assert run.startswith("shopsimrl-v4.") and (res["episodes"], res["replayed"], res["not_replayable"]) == (2, 0, 2)
    assert any("ingested trace (shopsimrl-v4)" in n for n in res["notes"])
    rows = sql(wh, """
        SELECT e.task_id, l.replayable, l.replay_note, l.actions_replayed, l.reward, l.stored_reward, l.r_att,
               l.primary_failure, p.primary_failure AS stored_failure, l.label_codes, l.success, l.label_changed
        FROM episode_labels AS l JOIN episodes AS e USING (run_id, episode_id, attempt)
        JOIN episode_primary_failure AS p USING (run_id, episode_id) JOIN runs AS u USING (run_id)
        WHERE l.run_id = $run AND u.experiment = 'ingested' ORDER BY e.task_id""", run=run)
    assert [(r["task_id"], r["replayable"], r["actions_replayed"]) for r in rows] == [(201, False, 0), (202, False, 0)]
    assert all("not here to replay" in r["replay_note"] for r in rows)
    assert [(r["reward"], r["stored_reward"], r["r_att"], r["success"]) for r in rows] == [
        (0.0, 0.0, 0.5, False), (1.0, 1.0, 1.0, True)]
    assert [(r["primary_failure"], r["stored_failure"]) for r in rows] == [("attribute_miss", "attribute_miss"),
                                                                            (None, None)]
    assert json.loads(rows[0]["label_codes"]) == ["attribute_miss"] and not any(r["label_changed"] for r in rows)
    # the reward rule switch re-reads the stored component where the rows hold it
    loose = reverify(wh, "--run", run, "--primary-reward", "r_loose")
    assert (loose["replayed"], loose["reward_changed"], loose["mean_reward"]) == (0, 1, pytest.approx(0.875))


def test_bad_input_says_what_to_do(wh):
    unknown = shopsim("reverify", "--run", "no-such-run", "--warehouse", wh)
    assert unknown.returncode == 2 and "runs list" in unknown.stderr
    rule = shopsim("reverify", "--run", "noisy", "--primary-reward", "r_best", "--warehouse", wh)
    assert rule.returncode == 2 and "r_strict, r_loose, r_success" in rule.stderr


def test_the_replay_recomputes_rather_than_copies(wh):
    """The library under the command: the stored actions of a purchase that missed an option, replayed as stored,
    score as stored; without the purchase they end nowhere; with another option chosen they score anew."""
    from shopsim_wh.analytics.replay import EmbeddedEnv, replay
    from shopsim_wh.engines.db import connect

    con = connect(wh)
    ep, task, stored = con.execute(
        "SELECT episode_id, task_id, r_option FROM episodes AS e WHERE run_id = 'noisy' AND r_option < 1 "
        "AND purchase_asin IS NOT NULL AND EXISTS (SELECT 1 FROM actions AS a WHERE a.run_id = e.run_id AND "
        "a.episode_id = e.episode_id AND a.action LIKE 'click[%=%]') ORDER BY episode_id LIMIT 1").fetchone()
    cur = con.execute("""
        SELECT a.step_idx, a.call_idx, a.action, a.action_type, a.action_valid, a.feedback_code, o.page
        FROM actions AS a JOIN observations AS o
            ON o.run_id = a.run_id AND o.episode_id = a.episode_id AND o.step_idx = a.step_idx AND o.call_id = a.call_id
        WHERE a.run_id = 'noisy' AND a.episode_id = ? AND a.action IS NOT NULL ORDER BY a.step_idx""", [ep])
    names = [d[0] for d in cur.description]
    actions = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    env = EmbeddedEnv(seed=0)
    whole = replay(env, task, actions)
    assert whole.done and whole.reward_detail["r_option"] == stored and whole.diverged == 0
    cut = replay(env, task, actions[:-1])
    assert not cut.done and cut.reward_detail is None
    # each option it chose, changed to every other value of that axis: the replay scores each anew, and one of them
    # is the option the goal wanted
    scores = []
    for i, a in enumerate(actions):
        if "=" not in a["action"]:
            continue
        axis, _, chosen = a["action"][len("click["):-1].partition("=")
        state = json.loads(con.execute("SELECT observation_state FROM observations WHERE run_id = 'noisy' AND "
                                       "episode_id = ? AND step_idx = ?", [ep, a["step_idx"]]).fetchone()[0])
        for other in state["available_options"][axis]:
            if other != chosen:
                moved = replay(env, task, [*actions[:i], {**a, "action": f"click[{axis}={other}]"}, *actions[i + 1:]])
                assert moved.done
                scores.append(moved.reward_detail["r_option"])
    assert scores and max(scores) == 1.0 > stored
