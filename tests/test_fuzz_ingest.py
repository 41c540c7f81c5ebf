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

from shopsim_wh.db import connect
from shopsim_wh.ingest import ingest
from shopsim_wh.testing.badinput import (
    ALL_CLASSES,
    READERS,
    SUFFIX,
    build_file,
    check_landed,
    decodable_prefix,
    templates,
    truncate_compressed,
)

from .conftest import REPO

RECORDS = int(os.environ.get("SHOPSIM_FUZZ_RECORDS", "150"))
EXAMPLES = int(os.environ.get("SHOPSIM_FUZZ_EXAMPLES", "1"))
MAX_FIELD = 4096
TPL = templates()
CORPUS = REPO / "tests" / "fixtures" / "fuzz" / "corpus.json"
CHOICES = ("good", "good", "good", *[c for c in ALL_CLASSES if c != "torn_line"])


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


def random_plan(rng: random.Random, n: int) -> list[tuple[str, int]]:
    """Every class once, then ``n`` random lines (a good record half the time), maybe a torn last line."""
    classes = [c for c in ALL_CLASSES if c != "torn_line"]
    plan = [(c, rng.randrange(6)) for c in classes] + [
        (rng.choice(("good",) * len(classes) + tuple(classes)), rng.randrange(6)) for _ in range(n)]
    rng.shuffle(plan)
    return plan + ([("torn_line", rng.randrange(6))] if rng.random() < 0.7 else [])


def ingest_plans(cases: list[tuple[str, list, str | None]]) -> list[str]:
    """Build one file per case (reader, plan, compression or None), ingest each reader's files in one call
    (forced format) into one warehouse, and return every problem found."""
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        expected, by_reader = {}, {}
        for i, (reader, plan, kind) in enumerate(cases):
            plan = [tuple(x) for x in plan]
            built = build_file(reader, plan, TPL[reader], MAX_FIELD)
            f = d / f"{i:03d}" / SUFFIX[reader]
            f.parent.mkdir()
            data, errors, good = built.data, built.errors, built.good
            if kind:  # the same records in a cut-short archive: the decodable whole lines land, one row says so
                packed = truncate_compressed(data, kind)
                f = f.with_name(f.name + (".gz" if kind == "gzip" else ".zst"))
                f.write_bytes(packed)
                prefix = decodable_prefix(packed, kind)
                whole = prefix.count(b"\n")  # complete lines before the cut
                tail = prefix[prefix.rfind(b"\n") + 1:]
                errors = [e for e in errors if e[0] <= whole]
                good -= sum(1 for i, (c, _) in enumerate(plan) if i >= whole and c in ("good", "bom"))
                errors.append((whole + 1, "truncated_file") if tail.strip() and whole else (None, "truncated_file"))
            else:
                f.write_bytes(data)
            expected[str(f)] = (reader, errors, good)
            by_reader.setdefault(reader, []).append(f)
        with no_hang(120):
            for reader, files in by_reader.items():
                summary = ingest(files, d / "wh", format=reader, max_field_bytes=MAX_FIELD)
                assert [x.status for x in summary.files] == ["landed"] * len(files), summary.files
        con = connect(d / "wh")
        problems = []
        for source, (reader, errors, good) in expected.items():
            problems += check_landed(con, source, reader, errors, good)
        return problems


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
