"""Versioned prompt builder: system prompt (+ skills), the task message and the per-page tools.

``PROMPT_VERSION`` changes whenever the rendered text or the tool schemas change meaning; the
prompt hash covers the template and the tool descriptions, so two runs with equal hashes sent the
model the same instructions.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .skills import Skill

PROMPT_VERSION = "shop-single-turn.v1"

DEFAULT_SYSTEM = """You are a shopping assistant operating a web shop on behalf of a customer.
Read the customer's instruction and persona, search for a matching product, inspect it, choose the
options the customer asked for, and buy it within the budget. Act only through the tools you are
given: call exactly one tool per turn. The tools change with the page you are on."""

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the shop. Only available on pages with a search box.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "Search keywords."}},
                       "required": ["query"], "additionalProperties": False},
    },
}
CLICK_DESCRIPTION = "Click one of the clickable elements of the current page (a product, an option, a navigation button, Buy Now)."


def click_tool(values: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": "click",
            "description": CLICK_DESCRIPTION,
            "parameters": {"type": "object",
                           "properties": {"value": {"type": "string", "enum": list(values), "description": "The element to click."}},
                           "required": ["value"], "additionalProperties": False},
        },
    }


def tools_for(state: dict) -> list[dict]:
    """Tools exposed on this page, from observation_state alone."""
    tools = []
    if state.get("search_available"):
        tools.append(SEARCH_TOOL)
    if state.get("actions"):
        tools.append(click_tool(state["actions"]))
    return tools


def tool_schema_hash(tool: dict) -> str:
    fn = tool["function"]
    canon = {"name": fn["name"], "description": fn.get("description"), "parameters": fn.get("parameters")}
    return hashlib.sha256(json.dumps(canon, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()


def tool_set_hash(tools: list[dict]) -> str:
    return hashlib.sha256(",".join(sorted(tool_schema_hash(t) for t in tools)).encode()).hexdigest()


class PromptBuilder:
    def __init__(self, template_path: str | None = None):
        self.system_template = Path(template_path).read_text() if template_path else DEFAULT_SYSTEM
        self.version = PROMPT_VERSION

    @property
    def prompt_hash(self) -> str:
        doc = {"version": self.version, "system": self.system_template,
               "search": SEARCH_TOOL, "click_description": CLICK_DESCRIPTION}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]

    def system(self, skills: list[Skill]) -> str:
        if not skills:
            return self.system_template
        parts = [self.system_template, "", "Skills that may help:"]
        parts += [f"- [{s.id}] {s.content.strip()}" for s in skills]
        return "\n".join(parts)

    def task(self, task: dict, observation: str) -> str:
        lines = []
        if task.get("instruction"):
            lines.append(f"Customer instruction: {task['instruction']}")
        if task.get("persona"):
            lines.append(f"Customer persona: {task['persona']}")
        lines += ["", "Current page:", observation]
        return "\n".join(lines)

    def messages_start(self, skills: list[Skill], task: dict, observation: str) -> list[dict]:
        return [{"role": "system", "content": self.system(skills)},
                {"role": "user", "content": self.task(task, observation)}]
