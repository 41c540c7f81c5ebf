"""Fuzzed ingest: every reader, every bad-input class, hundreds of records, one ingest per example.

Hypothesis draws a seed that decides, per reader, which class (or a good record) each line of a JSONL file is;
derandomized, with no example database: the same files every run (more: SHOPSIM_FUZZ_EXAMPLES). Plans that once broke a reader are kept in
tests/fixtures/fuzz/corpus.json and replayed. Exactly one error row per bad record (its line, its class), every
good record landed once, no crash, no hang. Scale: SHOPSIM_FUZZ_RECORDS (bench/soak runs thousands).
"""

from __future__ import annotations

import json
import os
import random
import signal
import tempfile
from contextlib import contextmanager
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shopsim_wh.testing.badinput import READERS, fuzz_ingest, random_plan, templates

from .conftest import REPO

RECORDS = int(os.environ.get("SHOPSIM_FUZZ_RECORDS", "150"))
EXAMPLES = int(os.environ.get("SHOPSIM_FUZZ_EXAMPLES", "1"))
MAX_FIELD = 4096
TPL = templates()
CORPUS = REPO / "tests" / "fixtures" / "fuzz" / "corpus.json"


@contextmanager
def no_hang(seconds: int):
    """Fail (instead of hanging CI) when one ingest takes longer than ``seconds``."""
    def boom(*_):
        raise TimeoutError(f"ingest did not finish within {seconds} s")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def ingest_plans(cases: list[tuple[str, list, str | None]]) -> list[str]:
    with tempfile.TemporaryDirectory() as d, no_hang(120):
        return fuzz_ingest(cases, Path(d), TPL, MAX_FIELD).problems


@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_every_reader_every_class(seed):
    """Each example: one file per reader, every class at least once among RECORDS random lines."""
    rng = random.Random(seed)
    cases = [(r, random_plan(rng, RECORDS), None) for r in READERS]
    problems = ingest_plans(cases)
    if problems:  # print the plans so they can go into the replay corpus
        print(json.dumps([{"reader": r, "plan": p} for r, p, _ in cases]))
    assert problems == []


def test_truncated_archives_and_the_replay_corpus():
    """Cut-short .gz / .zst for every reader land what precedes the cut; the corpus plans still pass."""
    cases = [(r, [("good", 0)] * 25 + [("nul_byte", 0), ("good", 0)] * 3, kind)
             for r in READERS for kind in ("gzip", "zstd")]
    corpus = json.loads(CORPUS.read_text())["cases"]
    cases += [(c["reader"], c["plan"], c.get("compressed")) for c in corpus]
    assert ingest_plans(cases) == []
