"""The synthetic shop: catalog, tasks, split manifest and search are deterministic and well-formed."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys

from shopsim_wh.core.splits import dump_persona_splits
from shopsim_wh.sim import text
from shopsim_wh.sim.catalog import generate_catalog, make_price
from shopsim_wh.sim.tasks import (
    default_split_manifest_path,
    default_task_ids,
    dump_split_manifest,
    embedded_persona_splits,
    generate_split_manifest,
    generate_tasks,
    load_default_split_manifest,
    task_groups,
)


def test_catalog_shape_and_fields():
    cat = generate_catalog(0)
    assert len(cat.products) >= 1000
    assert len(cat.categories) >= 20
    asins = [p.asin for p in cat.products]
    assert len(set(asins)) == len(asins)
    assert all(re.fullmatch(r"\d{10}", a) for a in asins)  # the real renderer accepts 8-12 digit ids only
    assert any(not p.options for p in cat.products) and any(p.options for p in cat.products)
    for p in cat.products:
        assert 5.0 <= p.price <= 200.0 and round(p.price, 2) == p.price
        assert p.price == make_price(0, p.index)
        assert p.attributes and p.title and p.description and p.features and p.reviews
        for values in p.options.values():
            assert values and all(v == v.casefold() and "=" not in v and "/" not in v for v in values)


def test_catalog_and_tasks_are_deterministic_across_processes():
    code = (
        "import hashlib, json; from shopsim_wh.sim.tasks import generate_tasks;"
        "ts = generate_tasks(0).tasks;"
        "print(hashlib.sha256(json.dumps([[t.task_id, t.instruction, t.persona, t.goal.to_dict()] for t in ts])"
        ".encode()).hexdigest())"
    )
    outs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={"PYTHONHASHSEED": str(h), "PYTHONPATH": str(_repo_root())}).stdout
        for h in (1, 2)
    }
    assert len(outs) == 1


def _repo_root():
    import pathlib

    import shopsim_wh.sim

    return pathlib.Path(shopsim_wh.sim.__file__).resolve().parents[2]


def test_generation_is_cached():
    # Speed is measured in bench/, not asserted here; this holds the cache and the seed dependence.
    generate_catalog.cache_clear()
    generate_tasks.cache_clear()
    ts = generate_tasks(3)
    assert generate_tasks(3) is ts
    assert generate_catalog(3).products[0].asin != generate_catalog(0).products[0].asin


def test_tasks_shape_ids_have_holes_and_private_goal_stays_private():
    ts = generate_tasks(0)
    assert len(ts.tasks) >= 4000
    ids = [t.task_id for t in ts.tasks]
    assert ids == sorted(set(ids))
    assert ids[-1] - ids[0] + 1 > len(ids)  # holes: not a range
    assert any(b - a > 1 for a, b in zip(ids, ids[1:], strict=False))
    cat = generate_catalog(0)
    sigs = [t.goal.goal_signature for t in ts.tasks]
    assert len(set(sigs)) == len(sigs) and all(re.fullmatch(r"goalsig-[0-9a-f]{16}", s) for s in sigs)
    personas = {t.persona for t in ts.tasks}
    assert 200 <= len(personas) <= 1000
    for t in ts.tasks:
        product = cat.by_asin[t.goal.asin]
        assert "price lower than" in t.instruction and f"{t.goal.price_upper:.2f} dollars" in t.instruction
        assert product.price <= t.goal.price_upper
        assert set(t.goal.attributes) <= set(product.attributes) and 1 <= len(t.goal.attributes) <= 3
        assert all(v in product.options[k] for k, v in t.goal.options.items())
        assert all(v in t.instruction for v in t.goal.options.values())
        assert t.goal.goal_signature not in t.instruction + t.persona
        assert set(t.public()) == {"task_id", "instruction", "persona"}
    public_text = json.dumps([t.public() for t in ts.tasks]) + json.dumps(
        [[p.title, p.description, p.features] for p in cat.products]
    )
    assert "goalsig-" not in public_text


def test_shipped_split_manifest_equals_regeneration():
    shipped = load_default_split_manifest()
    regenerated = generate_split_manifest(0)
    assert shipped == embedded_persona_splits(0)
    assert default_split_manifest_path().read_text(encoding="utf-8") == dump_persona_splits(embedded_persona_splits(0))
    assert shipped["schema_version"] == "shopsimrl-persona-splits-v1" and set(shipped["splits"]) == {"train", "val", "test"}
    for name in ("train", "val", "test"):  # the same ids as the flat generator's, with a valid count and checksum
        rec = shipped["splits"][name]
        assert rec["task_ids"] == regenerated[name] and rec["task_count"] == len(regenerated[name])
        assert rec["task_ids_sha256"] == hashlib.sha256(json.dumps(regenerated[name]).replace(" ", "").encode()).hexdigest()
    assert dump_split_manifest(regenerated).startswith('{\n  "version": "shopsim-splits.v1",')


def test_splits_are_grouped_and_roughly_80_10_10():
    m = {s: default_task_ids(s) for s in ("train", "val", "test")}
    ts = generate_tasks(0)
    all_ids = m["train"] + m["val"] + m["test"]
    assert sorted(all_ids) == [t.task_id for t in ts.tasks]  # a partition of every task
    n = len(all_ids)
    assert 0.75 < len(m["train"]) / n < 0.85
    assert 0.08 < len(m["val"]) / n < 0.12 and 0.08 < len(m["test"]) / n < 0.12
    for split in ("train", "val", "test"):
        ids = m[split]
        assert ids == sorted(ids) and any(b - a > 1 for a, b in zip(ids, ids[1:], strict=False))
    split_of = {tid: s for s in ("train", "val", "test") for tid in m[s]}
    for key in (lambda t: t.goal.asin, lambda t: t.instruction, lambda t: t.persona):
        owner: dict[str, str] = {}
        for t in ts.tasks:
            assert owner.setdefault(key(t), split_of[t.task_id]) == split_of[t.task_id]
    groups = task_groups(ts.tasks)
    assert len(groups) > 50 and sum(map(len, groups)) == n


def test_search_ranking_is_deterministic_bm25():
    idx = text.get_search_index(0)
    assert idx is text.get_search_index(0)
    fresh = text.SearchIndex(generate_catalog(0).products)
    for q in ("waterproof hooded rain jacket", "organic whole bean coffee", "noise cancelling headphones"):
        a, b = idx.search(q), fresh.search(q)
        assert [p.asin for p in a] == [p.asin for p in b]
        assert 0 < len(a) <= 150  # the real top_k
        top_words = set(text.tokenize(a[0].title + " " + " ".join(a[0].attributes) + " " + a[0].category))
        assert set(text.tokenize(q)) & top_words
    assert idx.search("zzzz qqqq") == []
    # identical documents tie, and ties are broken by ASIN
    ranked = idx.search("coffee")
    scores = [_bm25(idx, "coffee", p) for p in ranked]
    for (s1, p1), (s2, p2) in zip(zip(scores, ranked, strict=True), zip(scores[1:], ranked[1:], strict=True),
                                  strict=False):
        assert s1 > s2 - 1e-9 and (abs(s1 - s2) > 1e-9 or p1.asin < p2.asin)


def _bm25(idx: text.SearchIndex, query: str, product) -> float:
    i = idx.products.index(product)
    total = 0.0
    for term in set(text.tokenize(query)):
        tf = idx.doc_tf[i].get(term, 0)
        if tf:
            norm = tf + idx.k1 * (1 - idx.b + idx.b * idx.doc_len[i] / idx.avgdl)
            total += idx.idf[term] * tf * (idx.k1 + 1) / norm
    return round(total, 9)
