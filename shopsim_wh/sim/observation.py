"""``observation_state`` (version ``shopping-observation-v7``) and the Chinese page text rendered from it.

The state is the only public view of a page; the text the model reads is rendered from the state alone, in the
layout of the real ``shop_env`` (``页面：搜索结果`` / ``商品列表：`` / ``可点击元素：`` ...). Neither ever holds the
goal: :func:`render` refuses a state carrying ``goal``, ``reward``, ``reward_detail``, ``target_asin`` or
``answer``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

OBSERVATION_VERSION = "shopping-observation-v7"
PAGE_TYPES = ("search_home", "search_results", "product_detail", "information_subpage", "terminal", "unknown")
FORBIDDEN = frozenset({"goal", "reward", "reward_detail", "target_asin", "answer"})
PRODUCT_ID_RE = re.compile(r"\d{8,12}")


class ObservationError(ValueError):
    """A state that must not be shown (wrong version, unknown page type, leaked private field)."""


def is_product_id(value: object) -> bool:
    return isinstance(value, str) and PRODUCT_ID_RE.fullmatch(value) is not None


def _text(value: object) -> str:
    return re.sub(r"\s+", " ", str(value if value is not None else "")).strip()


def _values(value: object) -> list[str]:
    return [_text(v) for v in value if _text(v)] if isinstance(value, list) else []


def _shown(value: object) -> str:
    if value is None or value == "":
        return "未提供"
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return _text(value)


def _results_lines(state: Mapping) -> list[str]:
    lines = [
        "页面：搜索结果",
        f"搜索词：{_text(state.get('search_text')) or '未提供'}",
        f"结果：第 {int(state.get('page', 1))}/{int(state.get('total_pages', 1))} 页，共 {int(state.get('total_results', 0))} 项，"
        f"当前显示排名 {int(state.get('rank_start', 0))}-{int(state.get('rank_end', 0))}",
        "",
        "商品列表：",
    ]
    products = state.get("products") or []
    for p in products:
        lines.append(f"{int(p.get('rank', 0))}. {_text(p.get('title')) or '未命名商品'}")
        lines += _product_facts(p, p.get("price"), "   ")
    if not products:
        lines.append("（本页没有商品）")
    return lines


def _product_facts(p: Mapping, price, prefix: str) -> list[str]:
    """The id, price, brand, category and key-attribute lines of a product, as results and detail pages show them."""
    lines = [f"{prefix}ASIN：{_text(p.get('asin'))}", f"{prefix}价格：{_shown(price)}",
             f"{prefix}品牌：{_text(p.get('brand')) or '未提供'}", f"{prefix}类别：{_text(p.get('category')) or '未提供'}"]
    attrs = _values(p.get("key_attributes"))
    if attrs:
        lines.append(f"{prefix}关键属性：" + "；".join(attrs))
    return lines


def _product_lines(state: Mapping) -> list[str]:
    product = state.get("product") or {}
    selected = state.get("selected_options") or {}
    available = state.get("available_options") or {}
    subpage = state.get("page_type") == "information_subpage"
    lines = [
        f"页面：{'商品属性页' if subpage else '商品详情'}",
        "商品：",
        f"- 标题：{_text(product.get('title')) or '未命名商品'}",
        *_product_facts(product, state.get("selected_price", product.get("price")), "- "),
    ]
    lines += ["", "规格选择："]
    if available:
        for axis, values in available.items():
            chosen = _text(selected.get(axis))
            lines.append(f"- {_text(axis)}：{'已选择 ' + chosen if chosen else '尚未选择'}")
            shown = _values(values)
            if shown:
                lines.append("  可选值：" + " / ".join(shown))
    else:
        lines.append("- 此商品没有规格选项")
    missing = _values(state.get("missing_option_axes"))
    if missing:
        lines.append("仍需选择：" + "、".join(missing))
    elif state.get("options_complete"):
        lines.append("规格状态：已选择全部规格，可以购买")
    invalid = state.get("invalid_selected_options")
    if invalid:
        lines.append("无效的历史规格选择：" + json.dumps(invalid, ensure_ascii=False, sort_keys=True))
    if subpage:
        lines += ["", f"子页面：{_text(state.get('subpage')) or 'attributes'}", "内容：" + _shown(state.get("content"))]
    return lines


def render(state: Mapping[str, Any]) -> str:
    """The model-facing page text of ``state`` (ends with a newline)."""
    if not isinstance(state, Mapping) or state.get("observation_version") != OBSERVATION_VERSION:
        raise ObservationError(f"observation_state must be an object of version {OBSERVATION_VERSION}")
    leaked = FORBIDDEN.intersection(state)
    if leaked:
        raise ObservationError("observation_state contains forbidden fields: " + ", ".join(sorted(leaked)))
    page_type = state.get("page_type") or "unknown"
    if page_type == "search_home":
        lines = ["页面：搜索首页"]
    elif page_type == "search_results":
        lines = _results_lines(state)
    elif page_type in ("product_detail", "information_subpage"):
        lines = _product_lines(state)
    elif page_type == "terminal":
        lines = ["页面：任务已终止", "不能再执行操作。"]
    else:
        raise ObservationError(f"unsupported page_type: {page_type!r}")
    last = state.get("last_action")
    if isinstance(last, Mapping):
        lines += ["", "上次交互结果：", f"- 结果：{'成功' if last.get('valid') else '无效'}"]
        if _text(last.get("message")):
            lines.append(f"- 说明：{_text(last.get('message'))}")
        if _text(last.get("reason")) and last.get("reason") != "executed":
            lines.append(f"- 原因代码：{_text(last.get('reason'))}")
    lines.append("")
    actions = _values(state.get("actions"))
    tail: list[str] = []
    if state.get("search_available"):
        tail += ["页面能力：", "- 支持商品搜索"]
    if actions:
        if tail:
            tail.append("")
        tail += ["可点击元素：", *(f"- {a}" for a in actions)]
    lines += tail or ["当前页面没有可交互元素。"]
    return "\n".join(lines).strip() + "\n"
