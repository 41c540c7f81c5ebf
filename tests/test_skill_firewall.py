"""The gold firewall as SQL (view skill_firewall, sql/analytics/skill_firewall.sql): each of ShopSimRL's six checks
and contains_heldout_task_id fires on a planted leak and stays quiet on its near misses, over a real run of the
embedded default (the instance checks read that run's product pages); the text checks agree with a plain-Python
re-derivation of the rules as the spec words them."""

from __future__ import annotations

import json
import re

import pytest

from .journeys import ok, shopsim

CONFIG = """experiment: {name: fw-run, seed: 3}
tasks: {split: val, sample_size: 4, repeats: 1}
model: {name: scripted-strong, base_url: embedded, checkpoint_id: scripted-strong@v1, send_seed: true}
environment: {url: embedded}
skills: {path: null}
"""
B = r"(?:^|[^0-9A-Za-z_])"
E = r"(?:[^0-9A-Za-z_]|$)"
TEXT_RULES = {  # the spec's words, ASCII word boundaries
    "mentions_asin": re.compile(B + r"asin" + E, re.I),
    "contains_long_identifier": re.compile(B + r"[0-9]{10,}" + E),
    "contains_task_id": re.compile(B + r"task[-_ ]?[0-9]+" + E, re.I),
}


@pytest.fixture(scope="module")
def fw(tmp_path_factory):
    from shopsim_wh.analytics.skill_candidates import ManualCandidate, add
    from shopsim_wh.core.splits import load_split_manifest
    from shopsim_wh.engines.db import connect

    d = tmp_path_factory.mktemp("fw")
    (d / "run.yaml").write_text(CONFIG)
    ok(shopsim("run", "run.yaml", "-q", "-w", d / "wh", cwd=d))
    con = connect(d / "wh")
    ep, title, brand, opts = con.execute(
        "SELECT episode_id, json_extract_string(observation_state, '$.product.title'), "
        "json_extract_string(observation_state, '$.product.brand'), json_extract(observation_state, '$.available_options') "
        "FROM observations WHERE run_id = 'fw-run' AND page = 'product_detail' "
        "AND json_extract(observation_state, '$.available_options') != '{}' ORDER BY episode_id, step_idx LIMIT 1").fetchone()
    con.close()
    option = next(v for vs in json.loads(opts).values() for v in vs if len(v.strip()) >= 6)
    splits = load_split_manifest(None).splits
    val_id, train_id = splits["val"][0], splits["train"][0]
    ref = (f"fw-run:{ep}",)
    cases = {  # name -> (text, evidence refs, expected findings)
        "asin": ("Never guess an ASIN: read the page.", ref, {"mentions_asin"}),
        "long_id": ("Product 12345678901 is a good pick.", ref, {"contains_long_identifier"}),
        "task_id": ("Do what Task_9 did.", ref, {"contains_task_id"}),
        "title": (f"Open {title} first.", ref, {"copies_instance_product_title"} | (
            {"copies_instance_brand"} if brand and brand in title else set())),
        "brand": (f"Prefer {brand} over the rest.", ref, {"copies_instance_brand"}),
        "option": (f"Choose the {option} variant.", ref, {"copies_gold_option"}),
        "heldout": (f"Remember case {val_id}.", ref, {"contains_heldout_task_id"}),
        # near misses: a basin, 9 digits, a subtask, a train task id, a title without its evidence episode
        "clean": (f"Rinse the basin; 123456789 is short; each subtask 3 counts; case {train_id}; open {title}.",
                  (), set()),
    }
    ids = {}
    for name, (text, refs, _) in cases.items():
        # every case but the clean one cites the run's episode (the held-out ids come from its split manifest)
        row = add(d / "wh", ManualCandidate(name, text, "fw", negative=refs))
        ids[name] = row["candidate_id"]
    con = connect(d / "wh")
    found = {}
    for cid, finding in con.execute("SELECT candidate_id, finding FROM skill_firewall WHERE run_id = 'fw'").fetchall():
        found.setdefault(cid, set()).add(finding)
    texts = dict(con.execute("SELECT candidate_id, concat_ws(chr(10), title, mechanism, content) FROM skill_candidates "
                             "WHERE run_id = 'fw'").fetchall())
    con.close()
    return {"cases": cases, "ids": ids, "found": found, "texts": texts}


@pytest.mark.parametrize("name", ["asin", "long_id", "task_id", "title", "brand", "option", "heldout", "clean"])
def test_each_check_fires_on_its_leak_only(fw, name):
    expected = fw["cases"][name][2]
    assert fw["found"].get(fw["ids"][name], set()) == expected


def test_text_checks_match_the_rules_in_words(fw):
    for cid, text in fw["texts"].items():
        want = {k for k, rx in TEXT_RULES.items() if rx.search(text)}
        got = fw["found"].get(cid, set()) & set(TEXT_RULES)
        assert got == want, (cid, text)
