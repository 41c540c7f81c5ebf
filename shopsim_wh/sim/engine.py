"""The episode state machine: pages, canonical actions, action limit and the WebShop-style reward.

One :class:`Episode` per leased session. It is transport-agnostic: both HTTP dialects drive the same object.
The same task and the same action sequence always give the same pages and rewards.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shopsim_wh.sim import text
from shopsim_wh.sim.catalog import Catalog, Product, generate_catalog
from shopsim_wh.sim.tasks import Goal, Task

OBSERVATION_VERSION = "shopsim-obs-v1"
DEFAULT_ACTION_LIMIT = 15

_ACTION_RE = re.compile(r"^\s*(search|click)\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)


class EpisodeDone(Exception):
    """The episode already ended; no further step or terminate is accepted."""


@dataclass(frozen=True)
class RewardDetail:
    r_type: float
    r_att: float
    r_option: float | None
    r_price: float
    reward: float

    def components(self) -> dict:
        return {"r_type": self.r_type, "r_att": self.r_att, "r_option": self.r_option, "r_price": self.r_price}


def _title_score(goal_product: Product, bought: Product) -> float:
    goal_words = set(text.tokenize(goal_product.title)) - set(text.tokenize(goal_product.title.split()[0]))
    if not goal_words:
        return 0.0
    return len(goal_words & set(text.tokenize(bought.title))) / len(goal_words)


def score_purchase(goal: Goal, catalog: Catalog, bought: Product, selected: dict[str, str]) -> RewardDetail:
    """WebShop-style reward: ``r_type * (n_att*r_att + n_opt*r_option + r_price) / (n_att + n_opt + 1)``."""
    if bought.category == goal.category:
        r_type = 1.0
    else:
        title_score = _title_score(catalog.by_asin[goal.asin], bought)
        r_type = 0.5 if title_score >= 0.2 else 0.1 if title_score > 0 else 0.0
    n_att = len(goal.attributes)
    r_att = sum(a in bought.attributes for a in goal.attributes) / n_att if n_att else 1.0
    n_opt = len(goal.options)
    chosen = set(selected.values())
    r_option = sum(v in chosen for v in goal.options.values()) / n_opt if n_opt else None
    r_price = 1.0 if bought.price <= goal.price_upper else 0.0
    total = n_att * r_att + n_opt * (r_option or 0.0) + r_price
    reward = r_type * total / (n_att + n_opt + 1)
    return RewardDetail(
        r_type=r_type,
        r_att=round(r_att, 6),
        r_option=None if r_option is None else round(r_option, 6),
        r_price=r_price,
        reward=round(reward, 6),
    )


class Episode:
    """One task being played: the current page, the action count and, at the end, the terminal payload."""

    def __init__(self, task: Task, seed: int = 0, action_limit: int = DEFAULT_ACTION_LIMIT) -> None:
        if action_limit < 1:
            raise ValueError("action_limit must be >= 1")
        self.task = task
        self.seed = seed
        self.catalog = generate_catalog(seed)
        self.index = text.get_search_index(seed)
        self.action_limit = action_limit
        self.actions_taken = 0
        self.page = "search"
        self.results: list[Product] = []
        self.page_num: int | None = None
        self.product: Product | None = None
        self.selected: dict[str, str] = {}
        self.final: dict | None = None
        self._render()

    # ------------------------------------------------------------------------------------------ state
    @property
    def done(self) -> bool:
        return self.final is not None

    def _render(self) -> None:
        instr = self.task.instruction
        if self.page == "search":
            self.observation, self.actions = text.render_search(instr)
        elif self.page == "results":
            self.observation, self.actions = text.render_results(instr, self.results, self.page_num or 1)
        elif self.page == "item":
            self.observation, self.actions = text.render_item(instr, self.product, self.selected)
        else:
            self.observation, self.actions = text.render_subpage(instr, self.product, self.page)

    def observation_state(self) -> dict:
        in_item = self.page in ("item", "description", "features", "reviews") or (
            self.page == "done" and self.product is not None
        )
        return {
            "observation_version": OBSERVATION_VERSION,
            "page": self.page,
            "search_available": self.page == "search",
            "actions": list(self.actions),
            "page_num": self.page_num if self.page == "results" else None,
            "asin": self.product.asin if in_item else None,
            "selected_options": dict(self.selected) if in_item else {},
        }

    def _payload(self, valid: bool = True, code: str | None = None, message: str | None = None) -> dict:
        base = {
            "observation": self.observation,
            "observation_state": self.observation_state(),
            "action_feedback": {"valid": valid, "code": code, "message": message},
            "done": False,
            "reward": None,
            "reward_detail": None,
            "purchase": None,
            "goal": None,
            "termination_reason": None,
            "actions_taken": self.actions_taken,
            "action_limit": self.action_limit,
        }
        if self.final is not None:
            base.update(self.final)
        return base

    # ------------------------------------------------------------------------------------------ steps
    def step(self, action: str) -> dict:
        """Apply one canonical action; invalid actions leave the page unchanged but count toward the limit."""
        if self.done:
            raise EpisodeDone("the episode is already done")
        self.actions_taken += 1
        feedback = self._apply(action if isinstance(action, str) else "")
        if not self.done and self.actions_taken >= self.action_limit:
            self._finish_zero(
                "action_limit",
                f"Episode over: the action limit ({self.action_limit}) was reached without a purchase.",
            )
        return self._payload(*feedback)

    def terminate(self, reason: str) -> dict:
        """End the episode on the client's behalf with a zero-score terminal payload."""
        if self.done:
            raise EpisodeDone("the episode is already done")
        self._finish_zero(reason, f"Episode terminated by the client: {reason}.")
        return self._payload()

    def _finish_zero(self, reason: str, message: str) -> None:
        self.page, self.actions = "done", []
        self.observation = text.render_over(self.task.instruction, message)
        self.final = {
            "done": True,
            "reward": 0.0,
            "reward_detail": {"r_type": 0.0, "r_att": 0.0, "r_option": 0.0, "r_price": 0.0},
            "purchase": None,
            "goal": self.task.goal.to_dict(),
            "termination_reason": reason,
        }

    def _apply(self, action: str) -> tuple[bool, str | None, str | None]:
        m = _ACTION_RE.match(action)
        if m is None:
            return False, "malformed_action", "actions must look like search[<query>] or click[<value>]"
        kind, arg = m.group(1).lower(), m.group(2)
        if kind == "search":
            if self.page != "search":
                return False, "search_unavailable", f"search is not available on the {self.page} page"
            if not arg.strip():
                return False, "empty_query", "the search query is empty"
            self.results = self.index.search(arg.strip())
            self.page, self.page_num, self.product, self.selected = "results", 1, None, {}
            self._render()
            return True, None, None
        value = self._resolve(arg)
        if value is None:
            return False, "unknown_clickable", f"{arg!r} is not a clickable value on the {self.page} page"
        self._click(value)
        return True, None, None

    def _resolve(self, arg: str) -> str | None:
        if arg in self.actions:
            return arg
        folded = arg.strip().casefold()
        for value in self.actions:
            if value.casefold() == folded:
                return value
        return None

    def _click(self, value: str) -> None:
        if value == text.BACK_TO_SEARCH:
            self.page, self.results, self.page_num, self.product, self.selected = "search", [], None, None, {}
        elif self.page == "results":
            if value == text.NEXT_PAGE:
                self.page_num = (self.page_num or 1) + 1
            elif value == text.PREV_PAGE:
                self.page_num = max(1, (self.page_num or 1) - 1)
            else:
                self.page, self.product, self.selected = "item", self.catalog.by_asin[value], {}
        elif self.page == "item":
            assert self.product is not None
            if value == text.PREV:
                self.page, self.product, self.selected = "results", None, {}
            elif value in (text.DESCRIPTION, text.FEATURES, text.REVIEWS):
                self.page = value.lower()
            elif value == text.BUY_NOW:
                self._purchase()
                return
            else:
                kind = self.product.option_type_of(value)
                if kind is not None:
                    self.selected[kind] = value
        else:  # description / features / reviews: only "< Prev" is left
            self.page = "item"
        self._render()

    def _purchase(self) -> None:
        product = self.product
        assert product is not None
        detail = score_purchase(self.task.goal, self.catalog, product, self.selected)
        self.page, self.actions = "done", []
        self.observation = text.render_purchase(self.task.instruction, product, self.selected, detail.reward)
        self.final = {
            "done": True,
            "reward": detail.reward,
            "reward_detail": detail.components(),
            "purchase": {
                "asin": product.asin,
                "title": product.title,
                "category": product.category,
                "options": dict(self.selected),
                "price": product.price,
            },
            "goal": self.task.goal.to_dict(),
            "termination_reason": "purchase",
        }
