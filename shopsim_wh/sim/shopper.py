"""What the scripted policy sees and how it decides: reading a chat request, then one shopping decision.

:func:`read_view` extracts, from the request alone, the instruction, the latest page text, the system text,
the offered tools and the policy's own earlier tool calls. :class:`Shopper` turns a view into one action
given effective behaviour probabilities. Nothing here touches the simulator.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shopsim_wh.sim import text as T

# ----------------------------------------------------------------------------------- reading the request

_INSTR_RE = re.compile(r"Instruction:\s*\[SEP\]\s*(.*?)\s*\[SEP\]", re.DOTALL)
_BUDGET_RE = re.compile(r"lower than \$?([0-9]+(?:\.[0-9]+)?) dollars")
_ROW_RE = re.compile(r"\[button\] (B0[A-Z2-7]{8}) \[button_\] \[SEP\] (.*?) \[SEP\] \$([0-9]+\.[0-9]{2})")
_BUTTON_RE = re.compile(r"\[button\] (.*?) \[button_\]")
_FIXED = {T.BACK_TO_SEARCH, T.PREV, T.PREV_PAGE, T.NEXT_PAGE, T.DESCRIPTION, T.FEATURES, T.REVIEWS, T.BUY_NOW}
_FILLER = set(T.tokenize("i'm looking for need find me that is want to buy show price lower than dollars "
                         "option options with the color size us in"))


def _content(msg: Mapping[str, Any]) -> str:
    c = msg.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return " ".join(str(p.get("text", "")) for p in c if isinstance(p, Mapping))
    return ""


@dataclass
class View:
    """What the policy can see in one request."""

    instruction: str
    observation: str
    system_text: str
    search_available: bool
    clickables: list[str]
    history: list[tuple[str, dict]]  # (tool name, parsed arguments) of earlier assistant tool calls

    @property
    def budget(self) -> float | None:
        m = _BUDGET_RE.search(self.instruction)
        return float(m.group(1)) if m else None

    def clicked(self) -> list[str]:
        return [str(a.get("value")) for name, a in self.history if name == "click"]

    def searches(self) -> int:
        return sum(1 for name, _ in self.history if name == "search")


def read_view(messages: list, tools: list | None) -> View:
    """Read one chat request. The observation is the latest user/tool message showing a page
    (``Instruction: [SEP]``), so protocol-error feedback messages do not hide the page."""
    observation, last_text, instruction, system_parts = "", "", "", []
    history: list[tuple[str, dict]] = []
    for msg in messages:
        if not isinstance(msg, Mapping):
            continue
        role, body = msg.get("role"), _content(msg)
        if role in ("system", "developer"):
            system_parts.append(body)
        elif role in ("user", "tool") and body:
            last_text = body
            if _INSTR_RE.search(body):
                observation = body
        for call in msg.get("tool_calls") or []:
            fn = (call.get("function") or {}) if isinstance(call, Mapping) else {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except (TypeError, ValueError):
                args = {}
            history.append((str(fn.get("name")), args if isinstance(args, dict) else {}))
    observation = observation or last_text
    m = _INSTR_RE.search(observation)
    if m:
        instruction = m.group(1)
    else:
        users = [_content(m) for m in messages if isinstance(m, Mapping) and m.get("role") == "user"]
        instruction = users[-1] if users else ""
    names, enum = set(), None
    for tool in tools or []:
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else {}
        names.add(fn.get("name"))
        if fn.get("name") == "click":
            prop = ((fn.get("parameters") or {}).get("properties") or {}).get("value") or {}
            enum = prop.get("enum")
    if tools:
        search = "search" in names
        clickables = [str(v) for v in enum] if enum is not None else []
    else:  # no tools: fall back to the buttons in the observation text
        buttons = _BUTTON_RE.findall(observation)
        search = "Search" in buttons
        clickables = [b for b in buttons if b != "Search"]
    return View(instruction, observation, "\n".join(system_parts), search, clickables, history)


def _mentions(haystack: str, phrase: str) -> bool:
    pattern = r"(?<![\w.\-])" + re.escape(phrase.lower()) + r"(?![\w\-]|\.\d)"
    return re.search(pattern, haystack.lower()) is not None


def _option_groups(observation: str) -> dict[str, list[str]]:
    segments = observation.split(" [SEP] ")
    groups: dict[str, list[str]] = {}
    label = None
    for seg in segments:
        if seg.startswith("Selected options:"):
            break
        m = re.fullmatch(r"\[button\] (.*) \[button_\]", seg)
        if m is None:
            label = seg
            groups[label] = []
        elif label is not None and m.group(1) not in _FIXED:
            groups[label].append(m.group(1))
    return {k: v for k, v in groups.items() if v}


def _selected(observation: str) -> dict[str, str]:
    m = re.search(r"Selected options: (.*?)(?: \[SEP\]|$)", observation)
    if not m or m.group(1) == "none":
        return {}
    pairs = (p.split(": ", 1) for p in m.group(1).split("; "))
    return {p[0]: p[1] for p in pairs if len(p) == 2}


# ------------------------------------------------------------------------------------------- deciding


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
        words = set(T.tokenize(v.instruction)) - _FILLER
        say = [f"The task: {v.instruction}."] if v.instruction else ["I could not find the instruction."]
        clickables = v.clickables
        if clickables and self.chance("p_random_click"):
            choice = self.rng.choice(clickables)
            return Decision("click", choice, say + [f"Let me just try '{choice}' and see what happens."])
        if v.search_available:
            return self._search(v, words, say)
        if T.BUY_NOW in clickables:
            return self._item(v, say)
        rows = _ROW_RE.findall(v.observation)
        if rows or "Total results" in v.observation:
            return self._results(v, words, rows, say)
        if T.PREV in clickables:
            return Decision("click", T.PREV, say + ["This page has nothing to act on, so I go back to the item."])
        if clickables:
            return Decision("click", clickables[0], say + [f"I am not sure where I am; I click '{clickables[0]}'."])
        return Decision("search", " ".join(sorted(words)) or "product", say + ["I start with a search."])

    def _search(self, v: View, words: set[str], say: list[str]) -> Decision:
        head = re.split(r",? and price lower than", v.instruction)[0]
        head = re.split(r" (?:with|in) (?:the )?\w+[: ]", head)[0] if v.searches() >= 1 else head
        query = " ".join(w for w in head.split() if not set(T.tokenize(w)) <= _FILLER)
        query = query.replace(":", "").strip() or "product"
        say.append(f"I am on the search page, so I search for the product words: '{query}'.")
        return Decision("search", query, say)

    def _results(self, v: View, words: set[str], rows: list[tuple[str, str, str]], say: list[str]) -> Decision:
        visited = set(v.clicked())
        candidates = [(a, t, float(p)) for a, t, p in rows if a not in visited]
        budget = v.budget
        if budget is not None and self.chance("p_check_price"):
            within = [c for c in candidates if c[2] <= budget]
            say.append(f"The budget is ${budget:.2f}; {len(candidates) - len(within)} of the results cost more.")
            if not within and T.NEXT_PAGE in v.clickables and v.clicked().count(T.NEXT_PAGE) < 2:
                return Decision("click", T.NEXT_PAGE, say + ["Nothing here fits, so I look at the next page."])
            candidates = within or candidates
        if not candidates:
            if T.NEXT_PAGE in v.clickables and v.clicked().count(T.NEXT_PAGE) < 2:
                return Decision("click", T.NEXT_PAGE, say + ["No new results here; next page."])
            return Decision("click", T.BACK_TO_SEARCH, say + ["No results fit; I go back and search again."])
        scored = sorted(candidates, key=lambda c: -len(words & set(T.tokenize(c[1]))))
        if self.chance("p_random_result"):
            pick = self.rng.choice(scored)
            say.append(f"Several results look plausible; I pick '{pick[1]}'.")
        else:
            pick = scored[0]
            overlap = len(words & set(T.tokenize(pick[1])))
            say.append(f"'{pick[1]}' at ${pick[2]:.2f} matches {overlap} of the requested words best.")
        return Decision("click", pick[0], say + ["I open it."])

    def _item(self, v: View, say: list[str]) -> Decision:
        price_m = re.search(r"Price: \$([0-9]+\.[0-9]{2})", v.observation)
        price = float(price_m.group(1)) if price_m else None
        budget = v.budget
        if (price is not None and budget is not None and price > budget and T.PREV in v.clickables
                and v.clicked().count(T.PREV) < 2 and self.chance("p_check_price")):
            return Decision("click", T.PREV, say + [
                f"This item costs ${price:.2f}, above the ${budget:.2f} budget, so I go back to the results."])
        selected = _selected(v.observation)
        targets = []
        for label, values in _option_groups(v.observation).items():
            named = sorted((x for x in values if _mentions(v.instruction, x)), key=len, reverse=True)
            if named and selected.get(label) != named[0] and named[0] in v.clickables:
                targets.append((label, named[0]))
        if targets:
            keep_going = bool(selected) and self.rng.random() < 0.97
            if keep_going or (not selected and self.chance("p_select_options")):
                label, value = targets[0]
                return Decision("click", value, say + [f"The instruction asks for {label} '{value}', so I select it."])
            say.append("The options look fine as they are.")
        if T.FEATURES in v.clickables and T.FEATURES not in v.clicked() and self.chance("p_inspect"):
            return Decision("click", T.FEATURES, say + ["Before buying I want to read the features."])
        return Decision("click", T.BUY_NOW, say + ["This product matches the request, so I buy it now."])
