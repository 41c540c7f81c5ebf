"""The purchase reward of the real ``shop_env`` (reward version ``shopsimulator-paper-reward-v2``).

Components, each as the real server computes them (``web_agent_site/engine/goal.py`` there; written anew here):

- ``r_type``: 1.0 when the bought and the wanted category paths share at least two parts (``category_match``)
  or when more than 20% of the wanted title's terms occur in the bought title (``title_score``); otherwise 0.0
  for no shared term, 0.1 below 10%, 0.5 up to 20%. Title terms are the lexical fallback of the real server
  (lower-cased latin words; Chinese character bigrams), which is what it uses without spaCy's Chinese model.
- ``r_att``: the share of goal attributes found in the bought product: a token-set fuzzy ratio above 85 against
  one of its attributes, or the attribute as a substring of title + bullet points + description.
- ``r_option``: the share of goal option values matched (fuzzy ratio above 85) by a selected option value; 1.0
  when the goal names no option.
- ``r_price``: 1.0 when the resolved purchase price is at most ``price_upper`` (1.0 without a budget; 0.0 when
  the price cannot be resolved).

``r_loose = r_type * (M_att + M_opt + r_price) / (N_att + N_opt + 1)``, ``r_strict = r_type * r_att * r_option *
r_price``, ``r_success = 1`` iff all four are 1. The primary (top-level) reward is ``r_strict``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from difflib import SequenceMatcher
from typing import Any

REWARD_VERSION = "shopsimulator-paper-reward-v2"
PRIMARY_REWARD = "r_strict"
VARIANT_PRICE_VERSION = "variant-price-paper-v2"
TERMINATION_REASONS = ("action_limit", "generation_length")


def fuzzy_ratio(left: object, right: object) -> int:
    """Token-set similarity in 0..100 (the classic ``token_set_ratio`` on difflib's ratio)."""

    def words(value: object) -> set[str]:
        return set(re.sub(r"\W+", " ", str(value).casefold()).split())

    a, b = words(left), words(right)
    common = " ".join(sorted(a & b))
    with_a = " ".join(sorted(a)).strip()
    with_b = " ".join(sorted(b)).strip()

    def ratio(x: str, y: str) -> int:
        return round(100 * SequenceMatcher(None, x, y).ratio())

    if not common:
        return ratio(with_a, with_b)
    return max(ratio(common, with_a), ratio(common, with_b), ratio(with_a, with_b))


def category_parts(value: object) -> list[str]:
    return [p.strip().casefold() for p in re.split(r"\s*(?:›|>|/|\\)\s*", str(value or "")) if p.strip()]


def title_terms(value: object) -> list[str]:
    text = str(value or "")
    latin = re.findall(r"[a-z0-9]+(?:[._+\-/][a-z0-9]+)*", text.casefold())
    han = [run[i : i + 2] for run in re.findall(r"[\u3400-\u4dbf\u4e00-\u9fff]+", text)
           for i in range(max(1, len(run) - 1))]
    return latin + han


def type_reward(bought_category: str, bought_title: str, goal_category: str, goal_name: str) -> dict:
    category_match = len(set(category_parts(bought_category)) & set(category_parts(goal_category))) >= 2
    wanted = set(title_terms(goal_name))
    title_score = len(set(title_terms(bought_title)) & wanted) / len(wanted) if wanted else 0.2
    if category_match or title_score > 0.2:
        r_type = 1.0
    elif title_score == 0:
        r_type = 0.0
    elif title_score < 0.1:
        r_type = 0.1
    else:
        r_type = 0.5
    return {"r_type": r_type, "category_match": category_match, "title_score": title_score}


def attribute_reward(attributes: Sequence[str], searchable_text: str, goal_attributes: Sequence[str]) -> tuple[float, int]:
    if not goal_attributes:
        return 1.0, 0
    haystack = searchable_text.casefold()
    matches = sum(
        1 for wanted in goal_attributes
        if any(fuzzy_ratio(a, wanted) > 85 for a in attributes) or str(wanted).casefold() in haystack
    )
    return matches / len(goal_attributes), matches


def option_reward(selected_values: Sequence[str], goal_options: Sequence[str]) -> tuple[float, int]:
    if not goal_options:
        return 1.0, 0
    matches = sum(1 for wanted in goal_options if any(fuzzy_ratio(v, wanted) > 85 for v in selected_values))
    return matches / len(goal_options), matches


def resolve_price(price: float, options: Mapping[str, Sequence[str]]) -> dict:
    """Price resolution of a catalog product whose every option entry carries the listing price.

    The embedded catalog has one price per product, so the real resolver's outcomes reduce to
    ``constant_option_price`` (a product with options) and ``single_listing_price`` (one without).
    """
    method = "constant_option_price" if any(options.values()) else "single_listing_price"
    return {"status": "pass", "price": price, "version": VARIANT_PRICE_VERSION, "method": method, "evidence": {}}


def empty_reward_detail(termination_reason: str) -> dict:
    """The detail of an episode that ended without a purchase: every component zero."""
    return {
        "reward_version": REWARD_VERSION,
        "termination_reason": termination_reason,
        "r_loose": 0.0,
        "r_strict": 0.0,
        "r_success": 0,
        "r_type": 0.0,
        "r_att": 0.0,
        "r_option": 0.0,
        "r_price": 0.0,
        "target_asin_match": False,
        "price_verifiable": False,
    }


def purchase_reward(product: Mapping[str, Any], goal: Mapping[str, Any], selected_options: Mapping[str, str],
                    price_resolution: Mapping[str, Any]) -> dict:
    """The full ``reward_detail`` of buying ``product`` (a public product record) with ``selected_options``.

    ``product`` needs ``asin``, ``title``, ``category``, ``attributes``, ``bullet_points``, ``description``;
    ``goal`` the private goal (``asin``, ``category``, ``name``, ``attributes``, ``goal_options``,
    ``price_upper``).
    """
    upper = goal.get("price_upper")
    verifiable = price_resolution.get("status") == "pass"
    if upper is None:
        r_price = 1.0
    elif verifiable:
        actual = price_resolution.get("price")
        r_price = float(actual is not None and math.isfinite(float(actual)) and float(actual) <= float(upper))
    else:
        r_price = 0.0
    typed = type_reward(product["category"], product["title"], goal.get("category", ""), goal.get("name", ""))
    searchable = " ".join((product["title"], " ".join(product.get("bullet_points") or ()),
                           product.get("description") or ""))
    goal_attributes = list(goal.get("attributes") or [])
    goal_options = [str(v) for v in goal.get("goal_options") or []]
    r_att, n_att = attribute_reward(list(product.get("attributes") or ()), searchable, goal_attributes)
    r_option, n_opt = option_reward([str(v) for v in selected_options.values()], goal_options)
    r_type = typed["r_type"]
    r_loose = r_type * (n_att + n_opt + r_price) / (len(goal_attributes) + len(goal_options) + 1)
    r_strict = r_type * r_att * r_option * r_price
    return {
        "reward_version": REWARD_VERSION,
        "termination_reason": "purchase",
        **typed,
        "num_attr_matches": n_att,
        "num_option_matches": n_opt,
        "r_att": r_att,
        "r_option": r_option,
        "r_price": r_price,
        "r_loose": r_loose,
        "r_strict": r_strict,
        "r_success": int(r_type == 1.0 and r_att == 1.0 and r_option == 1.0 and r_price == 1.0),
        "target_asin_match": str(product.get("asin")) == str(goal.get("asin")),
        "price_verifiable": verifiable,
        "price_upper": upper,
        "price_resolution": dict(price_resolution),
    }
