"""What the scripted policy sees and how it decides: reading a chat request, then one shopping decision.

:func:`read_view` reads, from the request alone, what a model would read there in the ShopSimRL runtime's
message format: the task (first user message ``购物任务：\\n{task_instruction}\\n\\n{observation}``), the latest
page (the newest ``tool`` message holding a page, or that first user message), the system text (system prompt,
``用户个人文档：`` persona, ``[可选策略提示]`` skills block), the tools offered (``search`` when search is
available, ``click`` with ``value`` an enum of the page's actions) and the policy's own earlier tool calls.
:class:`Shopper` turns a view into one action. Nothing here touches the simulator.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shopsim_wh.sim import text as T

TASK_PREFIX = "购物任务："
BACK_TO_SEARCH, PREV_PAGE, NEXT_PAGE, BUY_NOW, ATTRIBUTES = "back to search", "< prev", "next >", "buy now", "attributes"
_BUDGET_RE = re.compile(r"lower than \$?([0-9]+(?:\.[0-9]+)?) dollars")
_FILLER = set(T.tokenize("i'm looking for need find me that is want to buy show price lower than dollars "
                         "option options with the color size us in"))
_PAGES = {"搜索首页": "search_home", "搜索结果": "search_results", "商品详情": "product_detail",
          "商品属性页": "information_subpage", "任务已终止": "terminal"}


def _content(msg: Mapping[str, Any]) -> str:
    c = msg.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return " ".join(str(p.get("text", "")) for p in c if isinstance(p, Mapping))
    return ""


@dataclass
class Row:
    asin: str
    title: str
    price: float | None
    attributes: list[str]


@dataclass
class View:
    """What the policy can see in one request."""

    instruction: str
    observation: str
    system_text: str
    search_available: bool
    clickables: list[str]
    history: list[tuple[str, dict]] = field(default_factory=list)  # earlier (tool name, arguments)

    @property
    def page_type(self) -> str:
        m = re.search(r"^页面：(\S+)", self.observation, flags=re.MULTILINE)
        return _PAGES.get(m.group(1), "unknown") if m else "unknown"

    @property
    def budget(self) -> float | None:
        m = _BUDGET_RE.search(self.instruction)
        return float(m.group(1)) if m else None

    def clicked(self) -> list[str]:
        return [str(a.get("value")) for name, a in self.history if name == "click"]

    def searches(self) -> int:
        return sum(1 for name, _ in self.history if name == "search")

    def rows(self) -> list[Row]:
        out: list[Row] = []
        for block in re.split(r"\n(?=\d+\. )", self.observation.split("商品列表：", 1)[-1]):
            m = re.match(r"\d+\. (.*)\n\s+ASIN：(\S+)", block)
            if not m:
                continue
            price = re.search(r"价格：([0-9.]+)", block)
            attrs = re.search(r"关键属性：(.*)", block)
            out.append(Row(m.group(2), m.group(1), float(price.group(1)) if price else None,
                           attrs.group(1).split("；") if attrs else []))
        return out

    def price(self) -> float | None:
        m = re.search(r"^- 价格：([0-9.]+)$", self.observation, flags=re.MULTILINE)
        return float(m.group(1)) if m else None

    def option_axes(self) -> dict[str, list[str]]:
        axes: dict[str, list[str]] = {}
        last = None
        for line in self.observation.split("规格选择：", 1)[-1].splitlines():
            m = re.match(r"- (.+?)：(?:已选择 .+|尚未选择)$", line)
            if m:
                last = m.group(1)
                axes[last] = []
            elif line.startswith("  可选值：") and last is not None:
                axes[last] = line[len("  可选值："):].split(" / ")
        return axes

    def selected(self) -> dict[str, str]:
        return dict(re.findall(r"^- (.+?)：已选择 (.+)$", self.observation, flags=re.MULTILINE))


def read_view(messages: list, tools: list | None) -> View:
    """Read one chat request as a model would."""
    instruction, observation, system_parts = "", "", []
    history: list[tuple[str, dict]] = []
    for msg in messages:
        if not isinstance(msg, Mapping):
            continue
        role, body = msg.get("role"), _content(msg)
        if role in ("system", "developer"):
            system_parts.append(body)
        elif role == "user" and body.startswith(TASK_PREFIX):
            task, _, page = body[len(TASK_PREFIX):].lstrip("\n").partition("\n\n")
            instruction, observation = task.strip(), page or observation
        elif role in ("user", "tool") and "页面：" in body:
            observation = body  # protocol-error feedback holds no page and does not hide it
        for call in msg.get("tool_calls") or []:
            fn = (call.get("function") or {}) if isinstance(call, Mapping) else {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except (TypeError, ValueError):
                args = {}
            history.append((str(fn.get("name")), args if isinstance(args, dict) else {}))
    names, enum = set(), None
    for tool in tools or []:
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else {}
        names.add(fn.get("name"))
        if fn.get("name") == "click":
            enum = (((fn.get("parameters") or {}).get("properties") or {}).get("value") or {}).get("enum")
    if tools:
        search, clickables = "search" in names, [str(v) for v in enum or []]
    else:  # no tools: read the page's own list of clickables
        search = "- 支持商品搜索" in observation
        tail = observation.split("可点击元素：\n", 1)
        clickables = [ln[2:] for ln in tail[1].splitlines() if ln.startswith("- ")] if len(tail) == 2 else []
    return View(instruction, observation, "\n".join(system_parts), search, clickables, history)


def mentions(haystack: str, phrase: str) -> bool:
    pattern = r"(?<![\w.\-])" + re.escape(phrase.lower()) + r"(?![\w\-]|\.\d)"
    return re.search(pattern, haystack.lower()) is not None


@dataclass
class Decision:
    name: str  # "search" | "click"
    argument: str
    reasoning: list[str]


class Shopper:
    """One decision of one profile on one view, with effective (temperature-adjusted) parameters."""

    def __init__(self, params: dict[str, float], rng: random.Random) -> None:
        self.p, self.rng = params, rng

    def chance(self, name: str) -> bool:
        return self.rng.random() < self.p[name]

    def decide(self, v: View) -> Decision:
        say = [f"The task: {v.instruction}."] if v.instruction else ["I could not find the task."]
        if v.clickables and self.chance("p_random_click"):
            choice = self.rng.choice(v.clickables)
            return Decision("click", choice, say + [f"Let me just try '{choice}' and see what happens."])
        page = v.page_type
        if v.search_available:
            return self._search(v, say)
        if page == "product_detail":
            return self._item(v, say)
        if page == "search_results":
            return self._results(v, say)
        if PREV_PAGE in v.clickables:
            return Decision("click", PREV_PAGE, say + ["This page has nothing to act on, so I go back."])
        if v.clickables:
            return Decision("click", v.clickables[0], say + [f"I am not sure where I am; I click '{v.clickables[0]}'."])
        words = sorted(set(T.tokenize(v.instruction)) - _FILLER)
        return Decision("search", " ".join(words) or "product", say + ["I start with a search."])

    def _search(self, v: View, say: list[str]) -> Decision:
        head = re.split(r",? and price lower than", v.instruction)[0]
        if v.searches() >= 1:
            head = re.split(r" (?:with|in) (?:the )?\w+[: ]", head)[0]
        query = " ".join(w for w in head.split() if not set(T.tokenize(w)) <= _FILLER)
        query = query.replace(":", "").strip() or "product"
        return Decision("search", query, say + [f"I search for the product words: '{query}'."])

    def _results(self, v: View, say: list[str]) -> Decision:
        words = set(T.tokenize(v.instruction)) - _FILLER
        visited = set(v.clicked())
        rows = [r for r in v.rows() if r.asin.casefold() in v.clickables and r.asin.casefold() not in visited]
        budget = v.budget
        if budget is not None and self.chance("p_check_price"):
            within = [r for r in rows if r.price is not None and r.price <= budget]
            say.append(f"The budget is {budget:.2f}; {len(rows) - len(within)} of these results cost more.")
            if not within and NEXT_PAGE in v.clickables and v.clicked().count(NEXT_PAGE) < 2:
                return Decision("click", NEXT_PAGE, say + ["Nothing here fits, so I look at the next page."])
            rows = within or rows
        if not rows:
            if NEXT_PAGE in v.clickables and v.clicked().count(NEXT_PAGE) < 2:
                return Decision("click", NEXT_PAGE, say + ["No new results here; next page."])
            return Decision("click", BACK_TO_SEARCH, say + ["No results fit; I go back and search again."])

        def overlap(r: Row) -> int:
            return len(words & set(T.tokenize(r.title + " " + " ".join(r.attributes))))

        scored = sorted(rows, key=lambda r: -overlap(r))
        if self.chance("p_random_result"):
            pick = self.rng.choice(scored)
            say.append(f"Several results look plausible; I pick '{pick.title}'.")
        else:
            pick = scored[0]
            say.append(f"'{pick.title}' matches {overlap(pick)} of the requested words best.")
        return Decision("click", pick.asin.casefold(), say + ["I open it."])

    def _item(self, v: View, say: list[str]) -> Decision:
        price, budget = v.price(), v.budget
        if (price is not None and budget is not None and price > budget and PREV_PAGE in v.clickables
                and v.clicked().count(PREV_PAGE) < 2 and self.chance("p_check_price")):
            return Decision("click", PREV_PAGE, say + [
                f"This item costs {price:.2f}, above the {budget:.2f} budget, so I go back to the results."])
        selected = v.selected()
        for axis, values in v.option_axes().items():
            if axis in selected:
                continue
            named = sorted((x for x in values if mentions(v.instruction, x)), key=len, reverse=True)
            offered = [x for x in values if f"{axis}={x}" in v.clickables]
            if not offered:
                continue
            if named and named[0] in offered and self.chance("p_select_options"):
                value = named[0]
                say.append(f"The task asks for {axis} '{value}', so I select it.")
            else:
                value = offered[0]
                say.append(f"Every option must be chosen before buying; I take {axis} '{value}'.")
            return Decision("click", f"{axis}={value}", say)
        if ATTRIBUTES in v.clickables and ATTRIBUTES not in v.clicked() and self.chance("p_inspect"):
            return Decision("click", ATTRIBUTES, say + ["Before buying I want to read the attributes."])
        if BUY_NOW in v.clickables:
            return Decision("click", BUY_NOW, say + ["This product matches the request, so I buy it now."])
        fallback = PREV_PAGE if PREV_PAGE in v.clickables else (v.clickables or [BACK_TO_SEARCH])[0]
        return Decision("click", fallback, say + ["I cannot buy this one; I go back."])
