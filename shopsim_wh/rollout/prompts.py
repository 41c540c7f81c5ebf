"""The agent's prompt: system message (+ persona, + skills), first user message, per-page tools.

The layout follows ShopSimRL's runtime (action protocol ``openai-function-tools-repair-v3``):

* system = the system prompt, then ``用户个人文档：`` + the persona as sorted JSON when the reset
  answer has one (with ``environment.persona: false`` it never has: the adapter drops the ``user_persona``
  shop_env sends anyway, where ShopSimRL's runtime renders it), then an optional skills block (``[可选策略提示]``, one ``<skill id=".." version="..">``
  element per skill), sections separated by a blank line;
* the first user message is ``购物任务：\\n{task_instruction}\\n\\n{observation}``;
* tools come from ``observation_state`` alone: ``search(query)`` when ``search_available`` is true,
  ``click(value)`` with ``value`` an enum of ``actions`` when there are any.

The system prompt text is our own wording of the original's rules; the tool descriptions are the
original's (one short factual line each, kept so models see the same tool schema). ``PROMPT_VERSION``
changes whenever the rendered text or a tool schema changes meaning.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from ..core.errors import EnvProtocolError
from .skills import Skill

PROMPT_VERSION = "shopsim-wh-shopping-tools-v1"
SKILL_RENDERER_VERSION = "shopsim-wh-skill-block-v1"
PERSONA_HEADER = "用户个人文档："
SKILLS_HEADER = "[可选策略提示]"
SKILLS_NOTE = "以下提示只是通用做法，仍要按当前任务和页面自行核实。"
TASK_HEADER = "购物任务："

DEFAULT_SYSTEM = """你在一个模拟网店里替用户购物，要在商品库中找到并买下最符合用户需求的一件商品。
你会收到购物任务，可能还有一份用户个人文档。同类商品很多，请结合用户需求和当前页面的信息做判断。

每一轮只调用一个当前可用的函数工具：
- search：只有该工具出现时才能调用，填写简短、切题的检索词。
- click：参数只能是工具列出的可点击值之一，原样照抄，不要编造。

注意：
- 购买前先把当前商品的每个规格都选好。
- 先搜索、比较、选规格，再购买；不要买只部分符合需求的商品。
- 每次调用工具都会返回新的页面，请依据最新的页面决定下一步。
- 回复里只放一个标准的工具调用，不要附带文字、JSON、XML 或推理过程；分析在思考阶段完成。
"""

SEARCH_DESCRIPTION = "使用关键词搜索商品。仅在当前页面提供此工具时调用。"
QUERY_DESCRIPTION = "用于检索商品的简洁关键词。"
CLICK_DESCRIPTION = "点击当前页面的一个可用按钮、商品或规格选项。"
VALUE_DESCRIPTION = "必须逐字选择当前可点击值之一。"


def _canonical(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def sha256_text(obj) -> str:
    """sha256 of the canonical JSON of ``obj`` (ShopSimRL's fingerprint convention)."""
    return hashlib.sha256(_canonical(obj).encode("utf-8")).hexdigest()


def search_tool() -> dict:
    return {"type": "function", "function": {
        "name": "search", "description": SEARCH_DESCRIPTION,
        "parameters": {"type": "object",
                       "properties": {"query": {"type": "string", "minLength": 1, "description": QUERY_DESCRIPTION}},
                       "required": ["query"], "additionalProperties": False}}}


def click_tool(values: list[str]) -> dict:
    return {"type": "function", "function": {
        "name": "click", "description": CLICK_DESCRIPTION,
        "parameters": {"type": "object",
                       "properties": {"value": {"type": "string", "enum": list(values), "description": VALUE_DESCRIPTION}},
                       "required": ["value"], "additionalProperties": False}}}


def tools_for(state: dict) -> list[dict]:
    """Tools offered on this page, from observation_state alone (an unusable state is the server's fault)."""
    actions = state.get("actions")
    if not isinstance(actions, list) or not all(isinstance(a, str) and a for a in actions):
        raise EnvProtocolError(f"observation_state.actions must be a list of non-empty strings, got {str(actions)[:200]}; "
                               "the environment server sent a malformed page")
    tools = [search_tool()] if state.get("search_available") is True else []
    if actions:
        tools.append(click_tool(actions))
    if not tools:
        raise EnvProtocolError(f"page {state.get('page_type')!r} offers neither search nor a clickable element, so the "
                               "agent cannot act; the environment server should have ended the episode")
    return tools


def tool_schema_hash(tool: dict) -> str:
    fn = tool["function"]
    canon = {"name": fn["name"], "description": fn.get("description"), "parameters": fn.get("parameters")}
    return hashlib.sha256(json.dumps(canon, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()


def tool_set_hash_of(schema_hashes: list[str]) -> str:
    return hashlib.sha256(",".join(sorted(schema_hashes)).encode()).hexdigest()


def tool_set_hash(tools: list[dict]) -> str:
    return tool_set_hash_of([tool_schema_hash(t) for t in tools])


class PromptBuilder:
    def __init__(self, template_path: str | None = None, system_prompt: str | None = None):
        if template_path and system_prompt is not None:
            raise ValueError("give a system prompt text or a template path, not both")
        self.system_prompt = Path(template_path).read_text(encoding="utf-8") if template_path else (
            system_prompt if system_prompt is not None else DEFAULT_SYSTEM)
        self.version = PROMPT_VERSION

    @property
    def prompt_hash(self) -> str:
        """Covers everything that shapes what the model is told: version, system prompt, tool texts."""
        doc = {"version": self.version, "system": self.system_prompt, "skills": [SKILL_RENDERER_VERSION, SKILLS_NOTE],
               "search": search_tool(), "click": click_tool(["<values>"])}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]

    def identity(self) -> dict:
        return {"prompt_version": self.version, "system_prompt_sha256": sha256_text(self.system_prompt),
                "skill_renderer_version": SKILL_RENDERER_VERSION}

    @staticmethod
    def render_skills(skills: Sequence[Skill]) -> str:
        lines = [SKILLS_HEADER, SKILLS_NOTE]
        for s in skills:
            lines += [f"<skill id={json.dumps(s.id, ensure_ascii=False)} version={json.dumps(s.version, ensure_ascii=False)}>",
                      s.content.strip(), "</skill>"]
        return "\n".join(lines)

    def system(self, reset: dict, skills: Sequence[Skill]) -> str:
        sections = [self.system_prompt.rstrip()]
        persona = reset.get("user_persona")
        if isinstance(persona, dict) and persona:
            sections.append(PERSONA_HEADER + "\n" + json.dumps(persona, ensure_ascii=False, sort_keys=True))
        if skills:
            sections.append(self.render_skills(skills))
        return "\n\n".join(sections)

    @staticmethod
    def first_user(reset: dict) -> str:
        """``购物任务：`` + the instruction + the first page; a dialect without a separate instruction
        (pi-slime: it is part of the page text) sends the page alone."""
        instruction = reset.get("task_instruction")
        if instruction is None:
            return reset["observation"]
        return f"{TASK_HEADER}\n{instruction}\n\n{reset['observation']}"

    def messages_start(self, reset: dict, skills: Sequence[Skill]) -> list[dict]:
        return [{"role": "system", "content": self.system(reset, skills)},
                {"role": "user", "content": self.first_user(reset)}]
