"""Tokenising, BM25 search and the WebShop-like observation text of every page.

Observation text format (one line, segments joined by `` [SEP] ``)::

    Instruction: [SEP] <instruction> [SEP] <page segments...>

A clickable is rendered ``[button] <value> [button_]``; the search page shows ``[button] Search [button_]``,
which marks "search available" and is not itself a click value. Each ``render_*`` function returns the text and
the page's clickable values in page order.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence

from shopsim_wh.sim.catalog import Product, generate_catalog

SEP = " [SEP] "
RESULTS_PER_PAGE = 10
MAX_RESULTS = 50

BACK_TO_SEARCH = "Back to Search"
NEXT_PAGE = "next >"
PREV_PAGE = "< prev"
PREV = "< Prev"
DESCRIPTION = "Description"
FEATURES = "Features"
REVIEWS = "Reviews"
BUY_NOW = "Buy Now"
SEARCH_TOKEN = "[button] Search [button_]"

STOPWORDS = frozenset(
    "a an and are as at be but by for from i i'm im in into is it its me my need of on or that the this to "
    "want with you your looking find buy show please get some".split()
)
_TOKEN_RE = re.compile(r"[a-z0-9]+(?:\.[0-9]+)?")


def _stem(word: str) -> str:
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us")):
        return word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """Lower-cased, lightly stemmed word tokens without stopwords."""
    return [_stem(w) for w in _TOKEN_RE.findall(text.lower()) if w not in STOPWORDS]


def button(value: str) -> str:
    return f"[button] {value} [button_]"


class SearchIndex:
    """Okapi BM25 over title + attributes + category words; ties broken by ASIN."""

    def __init__(self, products: Sequence[Product], k1: float = 1.5, b: float = 0.75) -> None:
        self.products = list(products)
        self.k1, self.b = k1, b
        self.doc_tf: list[dict[str, int]] = []
        self.doc_len: list[int] = []
        df: dict[str, int] = {}
        for p in self.products:
            toks = tokenize(" ".join((p.title, " ".join(p.attributes), p.category)))
            tf: dict[str, int] = {}
            for t in toks:
                tf[t] = tf.get(t, 0) + 1
            self.doc_tf.append(tf)
            self.doc_len.append(len(toks))
            for t in tf:
                df[t] = df.get(t, 0) + 1
        n = len(self.products)
        self.avgdl = sum(self.doc_len) / max(n, 1)
        self.idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
        self.postings: dict[str, list[int]] = {}
        for i, tf in enumerate(self.doc_tf):
            for t in tf:
                self.postings.setdefault(t, []).append(i)

    def search(self, query: str, limit: int = MAX_RESULTS) -> list[Product]:
        scores: dict[int, float] = {}
        for term in dict.fromkeys(tokenize(query)):
            idf = self.idf.get(term)
            if idf is None:
                continue
            for i in self.postings[term]:
                tf = self.doc_tf[i][term]
                norm = tf + self.k1 * (1 - self.b + self.b * self.doc_len[i] / self.avgdl)
                scores[i] = scores.get(i, 0.0) + idf * tf * (self.k1 + 1) / norm
        ranked = sorted(scores, key=lambda i: (-round(scores[i], 9), self.products[i].asin))
        return [self.products[i] for i in ranked[:limit]]


@functools.lru_cache(maxsize=8)
def get_search_index(seed: int = 0) -> SearchIndex:
    return SearchIndex(generate_catalog(seed).products)


# ------------------------------------------------------------------------------------------- rendering


def _page(instruction: str, *segments: str) -> str:
    return SEP.join(("Instruction:", instruction, *segments))


def format_price(price: float) -> str:
    return f"${price:.2f}"


def format_selected(selected: Mapping[str, str]) -> str:
    if not selected:
        return "Selected options: none"
    return "Selected options: " + "; ".join(f"{k}: {v}" for k, v in selected.items())


def render_search(instruction: str) -> tuple[str, list[str]]:
    return _page(instruction, SEARCH_TOKEN), []


def render_results(instruction: str, results: Sequence[Product], page_num: int) -> tuple[str, list[str]]:
    total = len(results)
    n_pages = max(1, math.ceil(total / RESULTS_PER_PAGE))
    segments = [button(BACK_TO_SEARCH), f"Page {page_num} of {n_pages} (Total results: {total})"]
    actions = [BACK_TO_SEARCH]
    if page_num > 1:
        segments.append(button(PREV_PAGE))
        actions.append(PREV_PAGE)
    if page_num < n_pages:
        segments.append(button(NEXT_PAGE))
        actions.append(NEXT_PAGE)
    shown = results[(page_num - 1) * RESULTS_PER_PAGE : page_num * RESULTS_PER_PAGE]
    if not shown:
        segments.append("No products matched your search.")
    for p in shown:
        segments.extend((button(p.asin), p.title, format_price(p.price)))
        actions.append(p.asin)
    return _page(instruction, *segments), actions


def _rating(product: Product) -> str:
    return f"{sum(r.rating for r in product.reviews) / len(product.reviews):.1f}"


def render_item(instruction: str, product: Product, selected: Mapping[str, str]) -> tuple[str, list[str]]:
    segments = [button(BACK_TO_SEARCH), button(PREV)]
    actions = [BACK_TO_SEARCH, PREV]
    for kind, values in product.options.items():
        segments.append(kind)
        for v in values:
            segments.append(button(v))
            actions.append(v)
    segments += [
        format_selected(selected),
        product.title,
        f"Price: {format_price(product.price)}",
        f"Rating: {_rating(product)}",
    ]
    for v in (DESCRIPTION, FEATURES, REVIEWS, BUY_NOW):
        segments.append(button(v))
        actions.append(v)
    return _page(instruction, *segments), actions


def render_subpage(instruction: str, product: Product, page: str) -> tuple[str, list[str]]:
    segments = [button(BACK_TO_SEARCH), button(PREV)]
    if page == "description":
        segments.append(product.description)
    elif page == "features":
        segments.extend(product.features)
    else:
        for r in product.reviews:
            segments.extend((f"{r.author} rated it {r.rating} out of 5", r.text))
    return _page(instruction, *segments), [BACK_TO_SEARCH, PREV]


def render_purchase(instruction: str, product: Product, selected: Mapping[str, str], reward: float) -> str:
    return _page(
        instruction,
        "Thank you for shopping with us!",
        f"Purchased: {product.asin}",
        product.title,
        f"Price: {format_price(product.price)}",
        format_selected(selected),
        "Your score (min 0.0, max 1.0)",
        f"{reward:.4f}",
    )


def render_over(instruction: str, message: str) -> str:
    return _page(instruction, message, "Your score (min 0.0, max 1.0)", "0.0000")
