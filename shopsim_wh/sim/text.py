"""Tokenising and the BM25 search of the embedded shop (page text is rendered by ``observation.py``)."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence

from shopsim_wh.sim.catalog import Product, generate_catalog

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

    def search(self, query: str, limit: int = 150) -> list[Product]:
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
