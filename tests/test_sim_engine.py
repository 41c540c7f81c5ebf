"""The transport-free session, the observation renderer and the reward formulas on constructed purchases."""

from __future__ import annotations

import pytest

from shopsim_wh.sim import observation as obs
from shopsim_wh.sim import reward as rw
from shopsim_wh.sim.catalog import generate_catalog
from shopsim_wh.sim.engine import (
    PAGE_SIZE,
    Episode,
    EpisodeDone,
    extract_action,
    parse_action,
    private_goal,
)
from shopsim_wh.sim.tasks import generate_tasks

TASKS = generate_tasks(0)
CATALOG = generate_catalog(0)


def task_with(n_axes: int):
    return next(t for t in TASKS.tasks if len(CATALOG.by_asin[t.goal.asin].options) == n_axes)


def test_parse_and_extract_action():
    assert parse_action("search[rain jacket]") == ("search", "rain jacket")
    assert parse_action("  click[< prev] ") == ("click", "< prev")
    assert parse_action("buy") == ("buy", None)
    for bad, code in (("", "invalid_format"), ("click[a] now", "invalid_format"), ("click[a], search[b]",
                      "multiple_actions_not_allowed"), ("Action: click[a]\nAction: click[b]", "multiple_actions_not_allowed")):
        with pytest.raises(ValueError) as e:
            parse_action(bad)
        assert e.value.code == code
    assert extract_action("Thought: 先搜索。\n  Action : click[buy now]  ") == "click[buy now]"
    assert extract_action("search[x]") == "search[x]"
    two = "Action: search[a]\nAction: click[b]"
    assert extract_action(two) == two  # left whole, so the parser rejects it


def test_results_pages_ranks_and_navigation():
    ep = Episode(TASKS.tasks[0])
    ep.step("search[shampoo]")
    st = ep.state()
    assert st["page_type"] == "search_results" and st["page"] == 1 and st["rank_start"] == 1
    assert st["total_results"] > PAGE_SIZE and st["total_pages"] == -(-st["total_results"] // PAGE_SIZE)
    assert st["rank_end"] == PAGE_SIZE == len(st["products"])
    assert [p["rank"] for p in st["products"]] == list(range(1, PAGE_SIZE + 1))
    assert st["actions"][:2] == ["back to search", "next >"] and "< prev" not in st["actions"]
    assert st["actions"][2:] == [p["asin"] for p in st["products"]]
    assert st["search_text"] == "shampoo" and st["normalized_search_text"] == "shampoo"
    ep.step("click[next >]")
    st2 = ep.state()
    assert st2["page"] == 2 and st2["rank_start"] == PAGE_SIZE + 1 and "< prev" in st2["actions"]
    ep.step("click[< prev]")
    assert ep.state()["products"] == st["products"]
    ep.step("click[back to search]")
    assert ep.state()["page_type"] == "search_home" and ep.state()["search_available"] is True


def test_product_page_options_buy_now_and_attributes_subpage():
    task = task_with(2)
    ep = Episode(task, show_attrs=True)
    ep.step("search[x]")
    ep.result_asins.insert(0, task.goal.asin)  # put the goal on the page without depending on the ranking
    ep.step(f"click[{task.goal.asin}]")
    st = ep.state()
    axes = list(st["available_options"])
    assert st["page_type"] == "product_detail" and len(axes) == 2
    assert st["actions"][:3] == ["back to search", "< prev", "attributes"] and "buy now" not in st["actions"]
    assert st["missing_option_axes"] == axes and st["options_complete"] is False and st["selected_options"] == {}
    first = f"{axes[0]}={st['available_options'][axes[0]][0]}"
    ep.step(f"click[{first}]")
    st = ep.state()
    assert first not in st["actions"] and st["selected_options"] == {axes[0]: first.split("=", 1)[1]}
    assert ep.step(f"click[{first}]")["action_feedback"]["reason"] == "already_selected"
    ep.step(f"click[{axes[1]}={st['available_options'][axes[1]][-1]}]")
    st = ep.state()
    assert st["options_complete"] is True and st["missing_option_axes"] == [] and "buy now" in st["actions"]
    assert st["selected_price"] == CATALOG.by_asin[task.goal.asin].price
    ep.step("click[attributes]")
    sub = ep.state()
    assert sub["page_type"] == "information_subpage" and sub["subpage"] == "Attributes"
    assert sub["content"] == list(CATALOG.by_asin[task.goal.asin].attributes)
    assert sub["actions"] == ["back to search", "< prev"]
    assert ep.step("click[buy now]")["action_feedback"]["reason"] == "unavailable_action"
    assert ep.observation().startswith("页面：商品属性页")
    ep.step("click[< prev]")
    assert ep.state()["page_type"] == "product_detail" and ep.state()["options_complete"] is True


def test_rendered_text_matches_the_state():
    task = task_with(1)
    ep = Episode(task)
    ep.step("search[" + task.instruction.split(",")[0] + "]")
    text = ep.observation()
    st = ep.state()
    assert text.startswith("页面：搜索结果\n搜索词：")
    assert f"结果：第 1/{st['total_pages']} 页，共 {st['total_results']} 项，当前显示排名 1-{st['rank_end']}" in text
    p = st["products"][0]
    assert f"1. {p['title']}\n   ASIN：{p['asin']}\n   价格：{p['price']}\n   品牌：{p['brand']}\n" in text
    assert "   关键属性：" + "；".join(p["key_attributes"]) in text
    assert text.endswith("可点击元素：\n" + "\n".join(f"- {a}" for a in st["actions"]) + "\n")
    assert "上次交互结果：\n- 结果：成功\n- 说明：搜索已执行" in text and "原因代码" not in text
    with pytest.raises(obs.ObservationError):
        obs.render({**st, "goal": {}})
    with pytest.raises(obs.ObservationError):
        obs.render({**st, "observation_version": "shopsim-obs-v1"})


def test_non_terminal_state_and_text_never_hold_the_goal():
    task = task_with(2)
    ep = Episode(task, show_attrs=True)
    secret = task.goal.goal_signature
    for action in ("search[" + task.instruction + "]", "click[next >]", "click[< prev]", "click[nothing]"):
        status = ep.step(action)
        assert "goal" not in status and secret not in str(ep.state()) + ep.observation()
        assert not obs.FORBIDDEN & set(ep.state())


def test_action_limit_and_terminate_keep_the_last_page():
    ep = Episode(TASKS.tasks[1])
    ep.step("search[lamp]")
    for _ in range(28):
        assert not ep.step("click[none]")["done"]
    last = ep.step("click[none]")
    assert last["done"] and last["termination_reason"] == "action_limit" and ep.action_count == 30
    assert ep.state()["page_type"] == "search_results"
    with pytest.raises(EpisodeDone):
        ep.step("click[back to search]")
    multi = Episode(TASKS.tasks[1], interaction_mode="multi_turn")
    assert multi.max_actions == 40
    with pytest.raises(ValueError):
        Episode(TASKS.tasks[1], interaction_mode="chat")
    t = Episode(TASKS.tasks[2])
    with pytest.raises(ValueError):
        t.terminate("bored")
    out = t.terminate("generation_length")
    assert out["reward"] == 0.0 and out["reward_detail"] == rw.empty_reward_detail("generation_length")
    with pytest.raises(EpisodeDone):
        t.terminate("action_limit")


def test_same_actions_same_pages_and_rewards():
    task = task_with(1)

    def play():
        ep = Episode(task)
        ep.step("search[" + task.instruction.split(",")[0] + "]")
        asin = ep.state()["products"][0]["asin"]
        ep.step(f"click[{asin}]")
        axis, values = next(iter(ep.state()["available_options"].items()))
        ep.step(f"click[{axis}={values[0]}]")
        return ep.observation(), ep.step("click[buy now]")

    assert play() == play()


# ---------------------------------------------------------------------------------------------- rewards


def record(**kw):
    base = {"asin": "1000000001", "title": "Nordvik Waterproof Hooded Rain Jacket", "category": "shopsim › rain jackets",
            "attributes": ["waterproof", "hooded", "packable"], "bullet_points": ["Seam sealed: designed to be seam sealed."],
            "description": "A light jacket."}
    return {**base, **kw}


GOAL = {"asin": "1000000001", "category": "shopsim › rain jackets", "name": "Nordvik Waterproof Hooded Rain Jacket",
        "attributes": ["waterproof", "seam sealed"], "goal_options": ["large", "navy"], "price_upper": 50.0}
PRICE = {"status": "pass", "price": 40.0, "method": "constant_option_price"}


def test_exact_purchase_scores_one_everywhere():
    d = rw.purchase_reward(record(), GOAL, {"size": "large", "color": "navy"}, PRICE)
    assert (d["r_type"], d["r_att"], d["r_option"], d["r_price"]) == (1.0, 1.0, 1.0, 1.0)
    assert d["r_loose"] == d["r_strict"] == 1.0 and d["r_success"] == 1 and d["target_asin_match"] is True
    assert d["num_attr_matches"] == 2 and d["num_option_matches"] == 2  # "seam sealed" found in the bullet points
    assert d["category_match"] is True and d["reward_version"] == "shopsimulator-paper-reward-v2"


def test_partial_purchase_follows_the_loose_and_strict_formulas():
    d = rw.purchase_reward(record(asin="1000000002", attributes=["hooded"], bullet_points=[]), GOAL,
                           {"size": "small", "color": "navy"}, {**PRICE, "price": 60.0})
    assert d["r_att"] == 0.5 and d["num_attr_matches"] == 1  # "waterproof" is in the title
    assert d["r_option"] == 0.5 and d["num_option_matches"] == 1 and d["r_price"] == 0.0
    assert d["r_loose"] == pytest.approx(1.0 * (1 + 1 + 0.0) / (2 + 2 + 1))
    assert d["r_strict"] == 0.0 and d["r_success"] == 0 and d["target_asin_match"] is False


def test_type_ladder_fuzzy_options_and_price_rules():
    other = "shopsim › desk lamps"
    assert rw.type_reward(other, "Sunfield Brass Desk Lamp", GOAL["category"], GOAL["name"])["r_type"] == 0.0
    # 1 of the 5 wanted title terms: title_score 0.2 is not above 0.2 -> 0.5
    assert rw.type_reward(other, "Nordvik Desk Lamp", GOAL["category"], GOAL["name"])["r_type"] == 0.5
    assert rw.type_reward(other, "Nordvik Hooded Lamp", GOAL["category"], GOAL["name"])["r_type"] == 1.0
    assert rw.type_reward("a › b › c", "x", "c › b", "y")["category_match"] is True
    assert rw.fuzzy_ratio("Navy", "navy") == 100 and rw.fuzzy_ratio("navy", "red") < 85
    assert rw.option_reward(["x-large"], ["large"])[1] == 1  # token sets: {x, large} contains {large}, ratio 100
    assert rw.option_reward(["us 9"], ["us 10"])[1] == 0 and rw.fuzzy_ratio("iphone 14", "iphone 15") == 89
    assert rw.option_reward([], []) == (1.0, 0) and rw.attribute_reward([], "", []) == (1.0, 0)
    no_budget = rw.purchase_reward(record(), {**GOAL, "price_upper": None}, {"a": "large", "b": "navy"}, PRICE)
    assert no_budget["r_price"] == 1.0 and no_budget["price_upper"] is None
    unverifiable = rw.purchase_reward(record(), GOAL, {"a": "large", "b": "navy"}, {"status": "unverifiable", "price": None})
    assert unverifiable["r_price"] == 0.0 and unverifiable["price_verifiable"] is False


def test_engine_purchase_uses_the_formulas_on_the_private_goal():
    task = task_with(2)
    product = CATALOG.by_asin[task.goal.asin]
    ep = Episode(task)
    ep.step("search[x]")
    ep.result_asins.insert(0, product.asin)
    ep.step(f"click[{product.asin}]")
    for axis, values in product.options.items():
        ep.step(f"click[{axis}={task.goal.options.get(axis, values[0])}]")
    out = ep.step("click[buy now]")
    goal = private_goal(task, product)
    assert out["goal"] == goal and out["reward"] == out["reward_detail"]["r_strict"] == 1.0
    assert out["purchase"]["options"] == {a: task.goal.options.get(a, v[0]) for a, v in product.options.items()}
    assert ep.state()["page_type"] == "terminal" and ep.observation().startswith("页面：任务已终止")
