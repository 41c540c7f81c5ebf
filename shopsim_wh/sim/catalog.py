"""Deterministic synthetic product catalog.

``generate_catalog(seed)`` builds ~1,200 products over 24 categories in pure Python, cached per seed.
Every field is a function of ``(seed, product index)``: prices and ASINs come from a SHA-256 hash, the rest
from a ``random.Random`` seeded with a string (string seeds are stable across processes and
``PYTHONHASHSEED``).
"""

from __future__ import annotations

import functools
import hashlib
import random
from dataclasses import dataclass

from shopsim_wh.sim.vocab import BRANDS, CATEGORIES, TITLE_SUFFIXES

PRODUCTS_PER_CATEGORY = 50


def stable_hash(*parts: object) -> int:
    """A 64-bit integer hash of ``parts`` that is stable across processes."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big")


@dataclass(frozen=True)
class Review:
    author: str
    rating: int
    text: str


@dataclass(frozen=True)
class Product:
    index: int
    asin: str
    title: str
    brand: str
    category: str
    noun: str
    attributes: tuple[str, ...]
    options: dict[str, tuple[str, ...]]
    price: float
    description: str
    features: tuple[str, ...]
    reviews: tuple[Review, ...]

    @property
    def category_path(self) -> str:
        """The category as a two-level path, as the real catalog writes categories (``a › b``)."""
        return f"shopsim › {self.category}"

    @property
    def price_tag(self) -> str:
        """The listing price as the real loader renders ``Price`` (``str`` of the first price)."""
        return f"{self.price}"

    def option_type_of(self, value: str) -> str | None:
        for kind, values in self.options.items():
            if value in values:
                return kind
        return None


@dataclass(frozen=True)
class Catalog:
    seed: int
    products: tuple[Product, ...]
    by_asin: dict[str, Product]

    @property
    def categories(self) -> list[str]:
        return sorted({p.category for p in self.products})


def make_asin(seed: int, index: int, salt: int = 0) -> str:
    """A 10-digit product id (the real shop_env's ids are 8-12 digits; its renderer refuses anything else)."""
    digest = hashlib.sha256(f"shopsim-asin:{seed}:{index}:{salt}".encode()).digest()
    return str(1_000_000_000 + int.from_bytes(digest[:8], "big") % 9_000_000_000)


def make_price(seed: int, index: int) -> float:
    """Price in [5.00, 200.00], two decimals, a pure function of (seed, product index)."""
    cents = 500 + stable_hash("shopsim-price", seed, index) % 19501
    return round(cents / 100, 2)


def _title_case(phrase: str) -> str:
    return " ".join(w if w[:1].isdigit() else w[:1].upper() + w[1:] for w in phrase.split())


_REVIEW_TEXTS = (
    ("Exactly as described, would buy again.", 5),
    ("Good value for the price.", 4),
    ("Does the job but feels a bit cheap.", 3),
    ("Arrived quickly and works great.", 5),
    ("Not what I expected, the fit was off.", 2),
    ("Solid quality, my second one.", 4),
    ("Stopped working after a month.", 1),
    ("Nice, though the color is slightly different from the photos.", 4),
)
_REVIEWERS = ("J. Park", "M. Rossi", "A. Okafor", "S. Lindqvist", "R. Gupta", "T. Moreau", "L. Chen", "D. Silva")


def _make_product(seed: int, index: int, category: str, asin: str) -> Product:
    rng = random.Random(f"shopsim-product:{seed}:{index}")
    nouns, attr_vocab, option_vocab = CATEGORIES[category]
    noun = rng.choice(nouns)
    attributes = tuple(rng.sample(attr_vocab, rng.randint(4, 6)))
    # the title names only some of the attributes: a reader of titles alone cannot see everything
    shown = list(rng.sample(attributes, 2))
    brand = rng.choice(BRANDS)
    suffix = rng.choice(TITLE_SUFFIXES)
    title = " ".join(x for x in (brand, _title_case(shown[0]), _title_case(shown[1]), _title_case(noun), suffix) if x)
    options: dict[str, tuple[str, ...]] = {}
    if rng.random() < 0.82:
        kinds = [k for k in option_vocab if rng.random() < 0.85] or [rng.choice(list(option_vocab))]
        for kind in option_vocab:  # keep the vocabulary's order of option types
            if kind in kinds:
                pool = option_vocab[kind]
                n = min(len(pool), rng.randint(3, 6))
                chosen = set(rng.sample(pool, n))
                options[kind] = tuple(v for v in pool if v in chosen)
    description = (
        f"The {brand} {noun} is made for people who want something {attributes[0]} and {attributes[1]}. "
        f"It is part of our {category} range and ships ready to use."
    )
    features = tuple(f"{_title_case(a)}: designed to be {a}." for a in attributes) + (
        f"Backed by a 1-year {brand} warranty.",
    )
    reviews = tuple(
        Review(author=rng.choice(_REVIEWERS), rating=r, text=t)
        for t, r in rng.sample(_REVIEW_TEXTS, rng.randint(2, 3))
    )
    return Product(
        index=index,
        asin=asin,
        title=title,
        brand=brand,
        category=category,
        noun=noun,
        attributes=attributes,
        options=options,
        price=make_price(seed, index),
        description=description,
        features=features,
        reviews=reviews,
    )


@functools.lru_cache(maxsize=8)
def generate_catalog(seed: int = 0) -> Catalog:
    """Build the catalog of ``seed`` (cached): 50 products in each of the 24 categories."""
    categories = list(CATEGORIES)
    n = PRODUCTS_PER_CATEGORY * len(categories)
    # interleave categories in a seeded order so product indices do not reveal the category
    layout = [c for c in categories for _ in range(PRODUCTS_PER_CATEGORY)]
    random.Random(f"shopsim-layout:{seed}").shuffle(layout)
    products: list[Product] = []
    seen: set[str] = set()
    for index in range(n):
        salt = 0
        asin = make_asin(seed, index)
        while asin in seen:
            salt += 1
            asin = make_asin(seed, index, salt)
        seen.add(asin)
        products.append(_make_product(seed, index, layout[index], asin))
    frozen = tuple(products)
    return Catalog(seed=seed, products=frozen, by_asin={p.asin: p for p in frozen})
