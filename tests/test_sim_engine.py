"""The episode state machine: pages, invalid-action codes, action limit, terminate and reward."""

from __future__ import annotations

import pytest

from shopsim_wh.sim import text
from shopsim_wh.sim.catalog import generate_catalog
from shopsim_wh.sim.engine import OBSERVATION_VERSION, Episode, EpisodeDone, score_purchase
from shopsim_wh.sim.tasks import generate_tasks

TASKS = generate_tasks(0)
CATALOG = generate_catalog(0)


def _task_with_options(n_options: int = 2):
    return next(t for t in TASKS.tasks if len(t.goal.options) == n_options and t.goal.price_upper < 150)


def _open_goal_item(ep: Episode) -> dict:
    """Search with the instruction and page through the results until the goal ASIN is clickable."""
    r = ep.step(f"search[{ep.task.instruction}]")
    for _ in range(5):
        if ep.task.goal.asin in r["observation_state"]["actions"]:
            return ep.step(f"click[{ep.task.goal.asin}]")
        r = ep.step(f"click[{text.NEXT_PAGE}]")
    raise AssertionError("goal not found in the results")


def test_search_page_and_observation_state():
    task = TASKS.tasks[0]
    ep = Episode(task, action_limit=15)
    assert ep.observation.startswith(f"Instruction: [SEP] {task.instruction} [SEP] ")
    assert text.SEARCH_TOKEN in ep.observation
    assert ep.observation_state() == {
        "observation_version": OBSERVATION_VERSION,
        "page": "search",
        "search_available": True,
        "actions": [],
        "page_num": None,
        "asin": None,
        "selected_options": {},
    }


def test_results_paging_item_and_subpages():
    ep = Episode(TASKS.tasks[5], action_limit=50)
    r = ep.step("search[rain jacket]")
    st = r["observation_state"]
    assert st["page"] == "results" and st["page_num"] == 1 and not st["search_available"]
    assert st["actions"][:2] == [text.BACK_TO_SEARCH, text.NEXT_PAGE]
    asins = st["actions"][2:]
    assert len(asins) == text.RESULTS_PER_PAGE
    assert text.SEARCH_TOKEN not in r["observation"]
    for a in asins:
        p = CATALOG.by_asin[a]
        assert f"[button] {a} [button_] [SEP] {p.title} [SEP] ${p.price:.2f}" in r["observation"]
    r = ep.step("click[next >]")
    assert r["observation_state"]["page_num"] == 2 and text.PREV_PAGE in r["observation_state"]["actions"]
    r = ep.step("click[< prev]")
    assert r["observation_state"]["page_num"] == 1
    r = ep.step(f"click[{asins[0]}]")
    st = r["observation_state"]
    assert st["page"] == "item" and st["asin"] == asins[0]
    assert st["actions"][:2] == [text.BACK_TO_SEARCH, text.PREV]
    assert st["actions"][-4:] == [text.DESCRIPTION, text.FEATURES, text.REVIEWS, text.BUY_NOW]
    for sub in ("Description", "Features", "Reviews"):
        r = ep.step(f"click[{sub}]")
        assert r["observation_state"]["page"] == sub.lower()
        assert r["observation_state"]["actions"] == [text.BACK_TO_SEARCH, text.PREV]
        assert ep.step("click[< Prev]")["observation_state"]["page"] == "item"
    r = ep.step("click[< Prev]")
    assert r["observation_state"]["page"] == "results" and r["observation_state"]["page_num"] == 1
    r = ep.step("click[Back to Search]")
    assert r["observation_state"]["page"] == "search" and r["action_feedback"]["valid"]


@pytest.mark.parametrize(
    ("setup", "action", "code"),
    [
        ([], "buy the jacket", "malformed_action"),
        ([], "click[]x", "malformed_action"),
        (["search[rain jacket]"], "search[boots]", "search_unavailable"),
        ([], "search[   ]", "empty_query"),
        ([], "click[Search]", "unknown_clickable"),
        (["search[rain jacket]"], "click[B0NOTTHERE]", "unknown_clickable"),
    ],
)
def test_invalid_actions_keep_the_page_and_count(setup, action, code):
    ep = Episode(TASKS.tasks[1], action_limit=15)
    for a in setup:
        ep.step(a)
    before = (ep.observation, ep.observation_state())
    r = ep.step(action)
    assert r["action_feedback"]["valid"] is False and r["action_feedback"]["code"] == code
    assert r["action_feedback"]["message"]
    assert (r["observation"], r["observation_state"]) == before
    assert r["actions_taken"] == len(setup) + 1 and r["done"] is False and r["reward"] is None


def test_click_matching_is_exact_then_case_insensitive():
    ep = Episode(TASKS.tasks[2], action_limit=15)
    ep.step("search[coffee]")
    assert ep.step("click[back to search]")["observation_state"]["page"] == "search"
    ep.step("search[coffee]")
    assert ep.step("CLICK[NEXT >]")["observation_state"]["page_num"] == 2


def test_exact_purchase_scores_one():
    task = _task_with_options(2)
    ep = Episode(task, action_limit=30)
    _open_goal_item(ep)
    for value in task.goal.options.values():
        r = ep.step(f"click[{value}]")
        assert r["action_feedback"]["valid"]
    assert r["observation_state"]["selected_options"] == task.goal.options
    r = ep.step("click[Buy Now]")
    assert r["done"] and r["reward"] == 1.0 and r["termination_reason"] == "purchase"
    assert r["reward_detail"] == {"r_type": 1.0, "r_att": 1.0, "r_option": 1.0, "r_price": 1.0}
    assert r["purchase"]["asin"] == task.goal.asin and r["purchase"]["options"] == task.goal.options
    assert r["goal"] == task.goal.to_dict()
    assert r["observation_state"]["page"] == "done" and r["observation_state"]["actions"] == []
    with pytest.raises(EpisodeDone):
        ep.step("click[Buy Now]")
    with pytest.raises(EpisodeDone):
        ep.terminate("late")


def test_partial_rewards_follow_the_webshop_formula():
    task = _task_with_options(2)
    goal = task.goal
    product = CATALOG.by_asin[goal.asin]
    n_att, n_opt = len(goal.attributes), 2
    # no options selected: r_option = 0
    d = score_purchase(goal, CATALOG, product, {})
    assert d.r_option == 0.0 and d.reward == pytest.approx((n_att + 1) / (n_att + n_opt + 1), abs=1e-6)
    # one of two options
    kind, value = next(iter(goal.options.items()))
    d = score_purchase(goal, CATALOG, product, {kind: value})
    assert d.r_option == 0.5
    # another category: r_type < 1 scales everything
    other = next(p for p in CATALOG.products if p.category != goal.category)
    d = score_purchase(goal, CATALOG, other, {})
    assert d.r_type < 1.0 and d.reward <= d.r_type
    # over budget
    pricey = next(
        p for p in CATALOG.products if p.category == goal.category and p.price > goal.price_upper
    )
    assert score_purchase(goal, CATALOG, pricey, {}).r_price == 0.0
    # a goal without options reports r_option None
    no_opt = next(t for t in TASKS.tasks if not t.goal.options)
    d = score_purchase(no_opt.goal, CATALOG, CATALOG.by_asin[no_opt.goal.asin], {})
    assert d.r_option is None and d.reward == 1.0


def test_action_limit_ends_with_zero_reward():
    ep = Episode(TASKS.tasks[3], action_limit=3)
    ep.step("search[towel]")
    ep.step("nonsense")
    r = ep.step("click[next >]")
    assert r["done"] and r["termination_reason"] == "action_limit" and r["reward"] == 0.0
    assert r["reward_detail"] == {"r_type": 0.0, "r_att": 0.0, "r_option": 0.0, "r_price": 0.0}
    assert r["actions_taken"] == 3 and r["action_limit"] == 3 and r["purchase"] is None
    assert r["goal"]["goal_signature"] == TASKS.tasks[3].goal.goal_signature
    # buying on the last allowed action is a purchase, not an action-limit stop
    task = _task_with_options(1)
    ep = Episode(task, action_limit=50)
    _open_goal_item(ep)
    ep.action_limit = ep.actions_taken + 1
    assert ep.step("click[Buy Now]")["termination_reason"] == "purchase"


def test_terminate_gives_zero_score_payload():
    ep = Episode(TASKS.tasks[4])
    ep.step("search[lamp]")
    r = ep.terminate("generation_length")
    assert r["done"] and r["reward"] == 0.0 and r["termination_reason"] == "generation_length"
    assert r["reward_detail"] == {"r_type": 0.0, "r_att": 0.0, "r_option": 0.0, "r_price": 0.0}
    assert r["observation_state"]["page"] == "done"


def test_same_actions_same_pages_and_rewards():
    task = _task_with_options(1)

    def play() -> list[dict]:
        ep = Episode(task, action_limit=20)
        out = [_open_goal_item(ep)]
        out.append(ep.step("click[Features]"))
        out.append(ep.step("click[< Prev]"))
        out.append(ep.step("click[Buy Now]"))
        return out

    assert play() == play()


def test_non_terminal_payloads_never_carry_the_goal():
    task = _task_with_options(2)
    ep = Episode(task, action_limit=40)
    payloads = [_open_goal_item(ep), ep.step("click[Reviews]"), ep.step("click[< Prev]"), ep.step("oops")]
    for p in payloads:
        assert p["goal"] is None and p["reward"] is None and not p["done"]
        assert task.goal.goal_signature not in repr(p)
