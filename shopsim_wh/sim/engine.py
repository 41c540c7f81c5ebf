"""One shopping session with the page rules of the real ``shop_env`` (written anew; no HTML underneath).

Pages: ``search_home`` -> ``search_results`` (20 per page, at most 150 results) -> ``product_detail`` (options
written ``axis=value``, ``buy now`` only once every axis is chosen, an ``attributes`` subpage when
``show_attrs``) -> ``terminal`` after a purchase. Clickables are case-folded and matched exactly; an invalid
action leaves the page as it was, is reported in ``action_feedback`` with one of :data:`FEEDBACK_REASONS`, and
counts towards the episode's action limit like a valid one. At the limit the episode ends with
``termination_reason = "action_limit"`` (the page stays where it was, as on the real server).

:class:`Episode` is transport-free; ``server.py`` puts the HTTP answers around it.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from shopsim_wh.sim import observation as obs
from shopsim_wh.sim import reward as rw
from shopsim_wh.sim.catalog import Product, generate_catalog
from shopsim_wh.sim.tasks import Task, persona_profile
from shopsim_wh.sim.text import get_search_index

OBSERVATION_VERSION = obs.OBSERVATION_VERSION
ENVIRONMENT_VERSION = "shopsim-wh-embedded-v1"
EPISODE_LIMITS = {"single_turn": 30, "multi_turn": 40}
DEFAULT_ACTION_LIMIT = EPISODE_LIMITS["single_turn"]
PAGE_SIZE = 20
SEARCH_TOP_K = 150
BACK_TO_SEARCH, PREV_PAGE, NEXT_PAGE, BUY_NOW, ATTRIBUTES = "back to search", "< prev", "next >", "buy now", "attributes"
FEEDBACK_REASONS = ("executed", "invalid_format", "multiple_actions_not_allowed", "empty_argument",
                    "search_unavailable", "already_selected", "incomplete_options", "unavailable_action")


class EpisodeDone(RuntimeError):
    """The episode already ended; the real server answers such a step with HTTP 500."""


class ActionParseError(ValueError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def extract_action(response: str) -> str:
    """The action inside a model response: the one ``Action: ...`` line if there is exactly one."""
    text = response.replace("\\n", "\n")
    found = re.findall(r"(?:^|\n)\s*Action\s*:\s*(.+?)\s*$", text, flags=re.IGNORECASE | re.MULTILINE)
    return found[0].strip() if len(found) == 1 else text.strip()


def parse_action(action: object) -> tuple[str, str | None]:
    """``search[x]`` / ``click[x]`` -> (name, argument); one action only, nothing around it."""
    if not isinstance(action, str):
        raise ActionParseError("invalid_format", "动作必须是字符串")
    text = action.strip()
    if not text:
        raise ActionParseError("invalid_format", "动作不能为空")
    labelled = re.findall(r"(?:^|\n)\s*Action\s*:\s*[^\r\n]+", text, flags=re.IGNORECASE)
    chained = re.search(r"\]\s*(?:[,;，；]\s*)?(?:search|click)\s*\[", text, flags=re.IGNORECASE)
    if len(labelled) > 1 or chained:
        raise ActionParseError("multiple_actions_not_allowed", "一次调用只能执行一个 search[...] 或 click[...] 动作")
    if "[" not in text and "]" not in text:
        if "\n" in text or "\r" in text:
            raise ActionParseError("invalid_format", "动作格式无效")
        return text, None
    m = re.fullmatch(r"([^\[\]\r\n]+)\[(.*)\]", text)
    if m is None:
        raise ActionParseError("invalid_format", "动作必须严格使用 search[...] 或 click[...] 格式")
    name = m.group(1).strip()
    if not name:
        raise ActionParseError("invalid_format", "动作名称不能为空")
    return name, m.group(2)


def normalize_query(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def product_summary(p: Product, rank: int | None = None) -> dict:
    out: dict[str, Any] = {"asin": p.asin, "title": p.title, "brand": p.brand, "category": p.category_path,
                           "price": p.price_tag, "key_attributes": list(p.attributes[:10])}
    if rank is not None:
        out["rank"] = rank
    return out


def option_action(axis: str, value: str) -> str:
    return f"{axis}={value}"


def private_goal(task: Task, product: Product) -> dict:
    """The task's private goal in the real server's shape (plus the opaque ``goal_signature``)."""
    g = task.goal
    return {
        "task_id": task.task_id,
        "task_uid": f"shopsim-{task.task_id}",
        "source_product_index": product.index,
        "asin": g.asin,
        "category": product.category_path,
        "name": product.title,
        "instruction_text": task.instruction,
        "instruction_simple": task.instruction,
        "attributes": list(g.attributes),
        "price_upper": g.price_upper,
        "price_constraint": None,
        "goal_options": list(g.options.values()),
        "user_persona": persona_profile(task.persona),
        "reason_key": None,
        "weight": 1,
        "goal_signature": g.goal_signature,
    }


class Episode:
    """One session on one slot: the page, the action count and, once done, the terminal status."""

    def __init__(self, task: Task, seed: int = 0, slot: int = 0, interaction_mode: str = "single_turn",
                 show_attrs: bool = False, if_persona: bool = False) -> None:
        if interaction_mode not in EPISODE_LIMITS:
            raise ValueError(f"unsupported interaction_mode {interaction_mode!r}; choose one of {sorted(EPISODE_LIMITS)}")
        self.task, self.seed, self.slot = task, seed, slot
        self.catalog = generate_catalog(seed)
        self.index = get_search_index(seed)
        self.session_id = f"slot-{slot}-{task.task_id}"
        self.interaction_mode = interaction_mode
        self.max_actions = EPISODE_LIMITS[interaction_mode]
        self.show_attrs, self.if_persona = show_attrs, if_persona
        self.goal = private_goal(task, self.catalog.by_asin[task.goal.asin])
        self.action_count = 0
        self.page = "search_home"
        self.keywords: list[str] = []
        self.normalized_query = ""
        self.result_asins: list[str] = []
        self.page_num = 1
        self.product: Product | None = None
        self.options: dict[str, str] = {}
        self.subpage: str | None = None
        self.last_action: dict | None = None
        self.done = False
        self.reward_detail: dict | None = None

    # ------------------------------------------------------------------------------------------ view
    @property
    def total_pages(self) -> int:
        return max(1, -(-len(self.result_asins) // PAGE_SIZE))

    def page_asins(self) -> list[str]:
        return self.result_asins[(self.page_num - 1) * PAGE_SIZE : self.page_num * PAGE_SIZE]

    def missing_axes(self) -> list[str]:
        assert self.product is not None
        return [axis for axis in self.product.options if axis not in self.options]

    def actions(self) -> list[str]:
        if self.page == "search_results":
            out = [BACK_TO_SEARCH]
            if self.page_num > 1:
                out.append(PREV_PAGE)
            if self.page_num < self.total_pages:
                out.append(NEXT_PAGE)
            return out + [a.casefold() for a in self.page_asins()]
        if self.page == "product_detail":
            assert self.product is not None
            out = [BACK_TO_SEARCH, PREV_PAGE]
            if self.show_attrs:
                out.append(ATTRIBUTES)
            if not self.missing_axes():
                out.append(BUY_NOW)
            return out + [option_action(axis, v) for axis, values in self.product.options.items()
                          for v in values if self.options.get(axis) != v]
        if self.page == "information_subpage":
            return [BACK_TO_SEARCH, PREV_PAGE]
        return []

    def state(self) -> dict:
        """The public ``observation_state`` of the current page."""
        st: dict[str, Any] = {"observation_version": OBSERVATION_VERSION, "page_type": self.page,
                              "search_available": self.page == "search_home", "actions": self.actions()}
        if self.last_action is not None:
            st["last_action"] = dict(self.last_action)
        if self.page == "search_results":
            page_asins = self.page_asins()
            first = (self.page_num - 1) * PAGE_SIZE + 1
            st.update(search_text=" ".join(self.keywords), normalized_search_text=self.normalized_query,
                      page=self.page_num, total_pages=self.total_pages, total_results=len(self.result_asins),
                      rank_start=first if page_asins else 0, rank_end=first + len(page_asins) - 1 if page_asins else 0,
                      products=[product_summary(self.catalog.by_asin[a], first + i) for i, a in enumerate(page_asins)])
        elif self.page in ("product_detail", "information_subpage"):
            p = self.product
            assert p is not None
            missing = self.missing_axes()
            st.update(product=product_summary(p), selected_options=dict(self.options),
                      available_options={axis: list(values) for axis, values in p.options.items()},
                      missing_option_axes=missing, options_complete=not missing,
                      selected_price=rw.resolve_price(p.price, p.options)["price"])
            if self.page == "information_subpage":
                st.update(subpage="Attributes", content=list(p.attributes))
        return st

    def observation(self) -> str:
        return obs.render(self.state())

    # ------------------------------------------------------------------------------------------ acting
    def step(self, action: str) -> dict:
        """Apply one action string; returns the status (``reward``, ``done``, ``action_feedback``, ...)."""
        if self.done:
            raise EpisodeDone("episode is already terminated; reset before stepping")
        status: dict[str, Any] = {"reward": 0, "done": False}  # an invalid action keeps the integer 0
        feedback: dict[str, Any] = {"action": str(action), "valid": False, "reason": "invalid_format",
                                    "message": "动作格式无效"}
        try:
            name, arg = parse_action(action)
        except ActionParseError as e:
            name, arg = "", None
            feedback.update(reason=e.code, message=str(e))
        self.action_count += 1
        name = name.casefold()
        actions = self.actions()
        selected_keys = {option_action(k, v) for k, v in self.options.items()}

        def ok(message: str) -> None:
            feedback.update(valid=True, reason="executed", message=message)

        if name == "search" and not (arg or "").strip():
            feedback.update(reason="empty_argument", message="search[...] 的关键词不能为空")
        elif name == "search" and self.page != "search_home":
            feedback.update(reason="search_unavailable", message="当前页面不提供搜索操作")
        elif name == "search":
            self._search(arg or "")
            status["reward"] = 0.0
            ok("搜索已执行")
        elif name == "click" and not (arg or "").strip():
            feedback.update(reason="empty_argument", message="click[...] 的点击值不能为空")
        elif name == "click" and arg in selected_keys:
            feedback.update(reason="already_selected", message=f"该规格已经选中：{arg}")
        elif name == "click" and arg == BUY_NOW and self.product is not None:
            missing = self.missing_axes()
            if not missing and BUY_NOW in actions:
                status = self._purchase()
                ok("购买已执行")
            elif not missing:
                feedback.update(reason="unavailable_action", message="当前页面没有可用的购买按钮")
            else:
                feedback.update(reason="incomplete_options", message="购买前还需选择规格轴：" + "、".join(missing),
                                missing_option_axes=missing)
        elif name == "click" and arg in actions:
            self._click(str(arg))
            status["reward"] = 0.0
            ok("点击已执行")
        elif name == "click":
            feedback.update(reason="unavailable_action", message=f"当前页面不存在可点击项：{arg}")
        elif name:
            feedback.update(reason="invalid_format", message="动作必须使用 search[...] 或 click[...] 格式")
        self.last_action = feedback
        if not status["done"] and self.action_count >= self.max_actions:
            status = self.terminate("action_limit")
        status["action_feedback"] = feedback
        return status

    def terminate(self, reason: str) -> dict:
        """End an unpurchased episode with zero reward (the page stays where it was)."""
        if reason not in rw.TERMINATION_REASONS:
            raise ValueError(f"unsupported termination reason: {reason}")
        if self.done:
            raise EpisodeDone("episode is already terminated")
        self.done = True
        self.reward_detail = rw.empty_reward_detail(reason)
        return {"reward": 0.0, "reward_detail": self.reward_detail, "done": True, "purchase": {},
                "goal": dict(self.goal), "termination_reason": reason}

    def _search(self, arg: str) -> None:
        self.keywords = arg.split(" ")
        self.normalized_query = normalize_query(arg)
        self.result_asins = [p.asin for p in self.index.search(arg, limit=SEARCH_TOP_K)]
        self.page, self.page_num, self.product, self.options, self.subpage = "search_results", 1, None, {}, None

    def _click(self, value: str) -> None:
        if value == BACK_TO_SEARCH:
            self.page, self.product, self.options, self.subpage = "search_home", None, {}, None
        elif self.page == "search_results" and value in (NEXT_PAGE, PREV_PAGE):
            self.page_num += 1 if value == NEXT_PAGE else -1
        elif self.page == "search_results":
            self.page, self.product, self.options = "product_detail", self.catalog.by_asin[value.upper()], {}
        elif self.page == "product_detail" and value == PREV_PAGE:
            self.page, self.product, self.options = "search_results", None, {}
        elif self.page == "product_detail" and value == ATTRIBUTES:
            self.page, self.subpage = "information_subpage", "Attributes"
        elif self.page == "product_detail":
            axis, _, chosen = value.partition("=")
            self.options[axis] = chosen
        elif self.page == "information_subpage":  # "< prev" back to the product
            self.page, self.subpage = "product_detail", None

    def _purchase(self) -> dict:
        p = self.product
        assert p is not None
        resolution = rw.resolve_price(p.price, p.options)
        record = {"asin": p.asin, "title": p.title, "category": p.category_path, "attributes": list(p.attributes),
                  "bullet_points": list(p.features), "description": p.description}
        detail = rw.purchase_reward(record, self.goal, self.options, resolution)
        self.done, self.reward_detail, self.page = True, detail, "terminal"
        purchase = {"asin": p.asin, "category": p.category_path, "name": p.title, "product_category": p.category,
                    "instruction_text": "", "attributes": list(p.attributes), "price": resolution["price"],
                    "options": dict(self.options)}
        return {"reward": detail[rw.PRIMARY_REWARD], "reward_detail": detail, "done": True, "purchase": purchase,
                "goal": dict(self.goal), "termination_reason": "purchase"}
