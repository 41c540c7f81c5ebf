"""Bad-input generator for the ingest readers: JSONL files mixing good records with every bad-input class.

:func:`build_file` turns a plan (one class or ``"good"`` per line, e.g. drawn by hypothesis) into the bytes of a
JSONL file for one reader plus what ingesting it must give: the lines that must be one ``ingest_errors`` row
each (with their class) and how many good records must land. :func:`truncate_compressed` cuts a gzip / zstd
file short. Good records come from templates (:func:`templates`: the v4 writer's record and the repo's
fixture traces), made unique per line (episode ids, uuids), so every good record is a distinct landing.

Classes (docs/ingest.md "Bad input"): ``invalid_utf8``, ``nul_byte``, ``non_finite_number``, ``huge_number``,
``duplicate_key``, ``too_deep``, ``oversized_field``, ``wrong_type``, ``unknown_schema_version``,
``record_too_large`` (a line past the maximum record size, :data:`MAX_RECORD_BYTES` here), ``torn_line`` (only as
the last line), and ``bom`` (a BOM before the record: kept, noted).
"""

from __future__ import annotations

import copy
import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

import orjson

READERS = ("shopsimrl-v4", "agent-multi-turn", "claude-code", "openai-messages", "atif")
LINE_CLASSES = ("invalid_utf8", "nul_byte", "non_finite_number", "huge_number", "duplicate_key", "too_deep",
                "oversized_field", "wrong_type", "unknown_schema_version", "record_too_large")
MAX_RECORD_BYTES = 64 * 1024  # the maximum record size fuzz_ingest ingests with (every template is far below it)
KEPT_CLASSES = ("bom",)
ALL_CLASSES = (*LINE_CLASSES, *KEPT_CLASSES, "torn_line")
FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"


def templates(fixtures: Path = FIXTURES) -> dict[str, list[dict]]:
    """One or more good records per reader (claude-code: the lines of one session, in order)."""
    from ..demo import shopsimrl_v4 as synth_v4

    cc = [json.loads(line) for line in (fixtures / "ingest/claude_code/5e55a0b0-hook-fixture.jsonl").read_text().splitlines()
          if line.strip()]
    amt = json.loads((fixtures / "ingest/agent_multi_turn/sporehub.json").read_text())
    atif = json.loads((fixtures / "third_party/atif_login-trace/trajectory.json").read_text())
    tau = {"task_id": 1, "trial": 0, "reward": 1.0, "info": {"source": "fuzz"},
           "traj": [{"role": "system", "content": "You are an airline agent."}, {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "Hello, how can I help?"}]}
    v4 = synth_v4.record(1, spec=synth_v4.RecordSpec(steps=2, obs_words=4, think_words=4))
    return {"shopsimrl-v4": [v4], "agent-multi-turn": [amt],
            "claude-code": cc, "openai-messages": [tau], "atif": [atif]}


def _unique(reader: str, tpl: list[dict], i: int) -> dict:
    """Good record number ``i``: a template copy with its identity made unique."""
    if reader == "claude-code":
        rec = copy.deepcopy(tpl[i % len(tpl)])
        cycle = i // len(tpl)
        for k in ("uuid", "parentUuid", "leafUuid"):
            if isinstance(rec.get(k), str):
                rec[k] = f"{rec[k]}-{cycle}"
        return rec
    rec = copy.deepcopy(tpl[0])
    if reader == "shopsimrl-v4":
        from ..demo import shopsimrl_v4 as synth_v4

        return synth_v4.record(100000 + i, spec=synth_v4.RecordSpec(steps=2, obs_words=4, think_words=4))
    if reader == "agent-multi-turn":
        rec["data_id"] = f"fuzz-{i:06d}"
    elif reader == "openai-messages":
        rec["task_id"] = 100000 + i
    elif reader == "atif":
        rec["session_id"] = f"fuzz-{i:06d}"
    return rec


def _wrong_type(reader: str, rec: dict) -> dict | None:
    if reader == "shopsimrl-v4":
        rec["steps"] = "oops"
    elif reader == "agent-multi-turn":
        rec["message"] = {"segments": "oops"}
    elif reader == "openai-messages":
        rec["traj"] = "oops"
    elif reader == "atif":
        rec["steps"] = "oops"
    else:  # claude-code: a line that is not an object
        return None
    return rec


def _unknown_version(reader: str, rec: dict) -> dict | None:
    if reader == "shopsimrl-v4":
        rec["schema_version"] = "shopsimrl-episode-v9"
    elif reader == "agent-multi-turn":
        rec["format"] = "agent_multi_turn_v9"
    elif reader == "atif":
        rec["schema_version"] = "ATIF-v9.0"
    else:  # openai-messages and claude-code records carry no schema version
        return None
    return rec


def applicable(reader: str, cls: str) -> bool:
    return not (cls == "unknown_schema_version" and reader in ("openai-messages", "claude-code"))


def _extra(good: bytes, value: bytes) -> bytes:
    """The record with one more top-level member holding ``value`` (raw JSON bytes)."""
    return good[:-1] + b',"x_fuzz":' + value + b"}"


def bad_line(reader: str, cls: str, rec: dict, variant: int = 0, max_field_bytes: int = 4096) -> bytes:
    """One record's line corrupted by ``cls`` (``variant`` picks among equivalent spellings)."""
    good = orjson.dumps(rec)
    first_key_at = 2  # inside the first key's string: b'{"' + key
    if cls == "invalid_utf8":
        return good[:first_key_at] + (b"\xff", b"\xc3\x28", b"\xed\xa0\x80")[variant % 3] + good[first_key_at:]
    if cls == "nul_byte":
        return good[:first_key_at] + b"\x00" + good[first_key_at:]
    if cls == "non_finite_number":
        return _extra(good, (b"NaN", b"Infinity", b"-Infinity")[variant % 3])
    if cls == "huge_number":
        return _extra(good, (b"123456789012345678901234567890", b"-99999999999999999999", b"1e999")[variant % 3])
    if cls == "duplicate_key":
        key = next(iter(rec))
        return _extra(good, b"1")[:-1] + b"," + orjson.dumps(key) + b":" + orjson.dumps(rec[key]) + b"}"
    if cls == "too_deep":
        n = 1100 + 1000 * (variant % 4)
        return _extra(good, (b"[" * n + b"]" * n) if variant % 2 == 0 else (b'{"a":' * n + b"1" + b"}" * n))
    if cls == "oversized_field":
        return _extra(good, b'"' + b"x" * (max_field_bytes + 1 + variant) + b'"')
    if cls == "record_too_large":  # one string under max_field_bytes, the line over MAX_RECORD_BYTES
        n = 2 * MAX_RECORD_BYTES // max_field_bytes + 1
        return _extra(good, b"[" + b",".join([b'"' + b"r" * (max_field_bytes // 2 + variant) + b'"'] * n) + b"]")
    if cls == "wrong_type":
        mutated = _wrong_type(reader, copy.deepcopy(rec))
        return orjson.dumps(mutated) if mutated is not None else (b"[1, 2]", b'"a string"', b"42")[variant % 3]
    if cls == "unknown_schema_version":
        mutated = _unknown_version(reader, copy.deepcopy(rec))
        if mutated is None:
            raise ValueError(f"{reader} records carry no schema version")
        return orjson.dumps(mutated)
    if cls == "bom":
        return b"\xef\xbb\xbf" + good
    if cls == "torn_line":
        return good[: max(2, len(good) // 2 - variant)]
    raise ValueError(f"unknown bad-input class {cls!r}")


def random_plan(rng, n: int) -> list[tuple[str, int]]:
    """Every class once, then ``n`` random lines (a good record half the time), maybe a torn last line."""
    classes = [c for c in ALL_CLASSES if c != "torn_line"]
    plan = [(c, rng.randrange(6)) for c in classes] + [
        (rng.choice(("good",) * len(classes) + tuple(classes)), rng.randrange(6)) for _ in range(n)]
    rng.shuffle(plan)
    return plan + ([("torn_line", rng.randrange(6))] if rng.random() < 0.7 else [])


@dataclass
class Built:
    data: bytes
    errors: list[tuple[int, str]] = field(default_factory=list)  # (1-based line, error_class) of rejected lines
    good: int = 0  # records that must land
    classes: dict[str, int] = field(default_factory=dict)


def build_file(reader: str, plan: list[tuple[str, int]], tpl: list[dict], max_field_bytes: int = 4096) -> Built:
    """A JSONL file for ``reader`` from ``plan`` = [(class or "good", variant), ...]; ``torn_line`` only last.

    A BOM is allowed only on the first line for the readers that read whole documents (the JSON-document
    readers treat a BOM as a property of the file)."""
    out, built = [], Built(b"")
    for i, (cls, variant) in enumerate(plan):
        rec = _unique(reader, tpl, i)
        line_no = i + 1
        if cls == "torn_line" and i != len(plan) - 1:
            cls = "good"
        if cls == "bom" and i != 0 and reader not in ("shopsimrl-v4", "claude-code"):
            cls = "good"
        if cls != "good" and not applicable(reader, cls):
            cls = "wrong_type"
        built.classes[cls] = built.classes.get(cls, 0) + 1
        if cls == "good":
            out.append(orjson.dumps(rec))
            built.good += 1
            continue
        out.append(bad_line(reader, cls, rec, variant, max_field_bytes))
        if cls in KEPT_CLASSES:
            built.good += 1
        else:
            built.errors.append((line_no, cls))
    torn = plan and plan[-1][0] == "torn_line" and built.errors and built.errors[-1][1] == "torn_line"
    built.data = b"\n".join(out) + (b"" if torn else b"\n")
    return built


def truncate_compressed(data: bytes, kind: str, keep: float = 0.6) -> bytes:
    """``data`` compressed with gzip or zstd, then cut to ``keep`` of its length (a torn download)."""
    if kind == "gzip":
        packed = gzip.compress(data)
    elif kind == "zstd":
        import pyarrow as pa

        sink = pa.BufferOutputStream()
        with pa.CompressedOutputStream(sink, "zstd") as s:
            s.write(data)
        packed = sink.getvalue().to_pybytes()
    else:
        raise ValueError(f"kind {kind!r}: gzip or zstd")
    return packed[: max(10, int(len(packed) * keep))]


SUFFIX = {"shopsimrl-v4": "traces.jsonl", "agent-multi-turn": "amt.jsonl", "claude-code": "session.jsonl",
          "openai-messages": "tau.jsonl", "atif": "atif.jsonl"}


def decodable_prefix(data: bytes, kind: str) -> bytes:
    """What an independent decoder gets out of a cut-short archive (the reference for a truncated input)."""
    if kind == "gzip":
        import zlib

        return zlib.decompressobj(wbits=31).decompress(data)
    import pyarrow as pa

    def upto(n: int) -> bool:
        with pa.input_stream(pa.py_buffer(data), compression="zstd") as s:
            try:
                return len(s.read(n)) == n
            except OSError:
                return False

    lo, hi = 0, 1  # bisect the longest prefix one read can return (reads are all-or-error here)
    while upto(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if upto(mid) else (lo, mid)
    with pa.input_stream(pa.py_buffer(data), compression="zstd") as s:
        return s.read(lo) if lo else b""


def check_landed(con, source_file: str, reader: str, errors: list[tuple[int | None, str]], good: int) -> list[str]:
    """Problems (empty = none) of one ingested file against what :func:`build_file` promised: exactly one
    ``ingest_errors`` row per bad record, at its line and of its class, and every good record landed once."""
    problems = []
    got = con.execute("select line, error_class from ingest_errors where source_file = ? and error_class <> 'bom' "
                      "order by line nulls last", [source_file]).fetchall()
    want = sorted(errors, key=lambda e: (e[0] is None, e[0] or 0))
    if got != want:
        extra = [g for g in got if g not in want]
        missing = [w for w in want if w not in got]
        problems.append(f"{reader}: error rows differ: unexpected {extra[:5]}, missing {missing[:5]}")
    if reader == "claude-code":
        n = con.execute("select coalesce(sum(converted + kept_raw), 0) from import_fidelity where source_file = ?",
                        [source_file]).fetchone()[0]
    else:
        n = con.execute("select count(*) from episode_attempts a join runs r using (run_id) where r.source_file = ? "
                        "and a.error_stage is distinct from 'ingest'", [source_file]).fetchone()[0]
    if n != good:
        problems.append(f"{reader}: {n} good records landed, expected {good}")
    return problems


@dataclass
class FuzzResult:
    problems: list[str] = field(default_factory=list)
    records: dict[str, int] = field(default_factory=dict)  # lines written per class ("good" included)
    files: int = 0


def fuzz_ingest(cases: list[tuple[str, list, str | None]], workdir: Path, tpl: dict[str, list[dict]] | None = None,
                max_field_bytes: int = 4096) -> FuzzResult:
    """Build one file per case (reader, plan, compression or None), ingest each reader's files in one call
    (forced format) into one warehouse under ``workdir``, and check every file (:func:`check_landed`)."""
    from ..engines.db import connect
    from ..ingest import IngestOptions, ingest

    tpl = tpl or templates()
    res, expected, by_reader = FuzzResult(), {}, {}
    for i, (reader, plan, kind) in enumerate(cases):
        plan = [tuple(x) for x in plan]
        built = build_file(reader, plan, tpl[reader], max_field_bytes)
        for c, n in built.classes.items():
            res.records[c] = res.records.get(c, 0) + n
        f = workdir / f"{i:04d}" / SUFFIX[reader]
        f.parent.mkdir(parents=True)
        data, errors, good = built.data, built.errors, built.good
        if kind:  # the same records in a cut-short archive: the decodable whole lines land, one row says so
            packed = truncate_compressed(data, kind)
            f = f.with_name(f.name + (".gz" if kind == "gzip" else ".zst"))
            f.write_bytes(packed)
            prefix = decodable_prefix(packed, kind)
            whole = prefix.count(b"\n")  # complete lines before the cut
            tail = prefix[prefix.rfind(b"\n") + 1:]
            errors = [e for e in errors if e[0] <= whole]
            good -= sum(1 for j, (c, _) in enumerate(plan) if j >= whole and c in ("good", "bom"))
            errors.append((whole + 1, "truncated_file") if tail.strip() and whole else (None, "truncated_file"))
            res.records[f"truncated_{kind}"] = res.records.get(f"truncated_{kind}", 0) + 1
        else:
            f.write_bytes(data)
        expected[str(f)] = (reader, errors, good)
        by_reader.setdefault(reader, []).append(f)
    for reader, files in by_reader.items():
        summary = ingest(files, workdir / "wh", IngestOptions(format=reader, max_field_bytes=max_field_bytes,
                                                              max_record_bytes=MAX_RECORD_BYTES))
        # a file whose every record is bad (or was cut off) lands its error rows only: `no_valid_record`
        bad = [x for x in summary.files if x.status != "landed"
               and not (x.status == "no_valid_record" and expected.get(str(x.path), (None, None, 1))[2] == 0)]
        res.problems += [f"{reader}: {x.path} {x.status}: {x.message}" for x in bad]
    res.files = len(expected)
    con = connect(workdir / "wh")
    for source, (reader, errors, good) in expected.items():
        res.problems += check_landed(con, source, reader, errors, good)
    con.close()
    return res
