"""Record kinds: an export whose row is one whole episode in an interchange format (``shopsimrl-v4``, ``atif``).

The kind's SQL (sql/exports/shopsimrl-v4.sql, atif.sql) assembles every record of a batch at once as JSON text in
column ``record``, byte for byte what the dump writers (shopsim_wh/ingest/dump_v4.py, dump.py) give once spelt by
orjson; this module only streams the rows, fixing three things on the way:

* **spelling**: DuckDB writes a few values differently from orjson (doubles of 1e16 and above, the hex digits of
  ``\\u001F``-style escapes): a record holding such a spelling is re-spelt by an orjson round trip;
* **privacy** (:func:`scrub`): unless both are included, a record holding reasoning or persona keys with a value, or
  the persona section of a prompt, is scrubbed in Python (the keys can sit anywhere, raw responses included);
* **fallback**: the rare episodes the SQL leaves NULL (column ``record_fallback`` says why: residuals of ingested
  records, payload conflicts, ``model_extra``, lenient JSON, nested sub-agents) are built by the dump writer,
  ``RECORD_BATCH`` episodes per query set on the export's one connection.

:func:`record_batches` runs the kind's query on DuckDB and hands its rows to :func:`finish`, which does the three
things above over any Arrow reader of the view's rows: ``export --engine spark`` gives it Spark's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import orjson
import pyarrow as pa

from .registry import OWN_COLUMNS, SHADOWED
from .writer import DUP, HASH, KEY, SHARD

RECORD_BATCH = 500
# what the fallback reads through the base views in an export batch (its copy of them): the copied tables but
# `episodes`, whose view fills in r_strict / r_success where the dump writer must see the stored values
LAST_ATTEMPT_VIEWS = frozenset(SHADOWED) - {"episodes"}


def _builders():
    from ..ingest.dump import to_atif
    from ..ingest.dump_v4 import to_v4

    return {"shopsimrl-v4": to_v4, "atif": to_atif}


PERSONA_SECTION = re.compile(r"(\n\n)?用户个人文档：\n[^\n]*")
REASONING_KEYS = frozenset({"reasoning", "reasoning_content", "thinking"})
PERSONA_KEYS = frozenset({"user_persona", "persona"})
# Spellings where DuckDB's JSON writer and orjson differ (checked over doubles of every magnitude and every
# control character): \u001F (orjson: \u001f); 1e16 as 10000000000000000.0 and 1e22 as 1e22 (orjson: 1e+16,
# 1e+22); 5e-6 as 0.000005 (orjson: 5e-6); Infinity / NaN (orjson: null). A value follows ``:``, ``,`` or ``[``;
# a match inside a string only costs a needless round trip.
NUMBER = r"-?(?:[0-9]{17,}\.[0-9]|[0-9.]+e[0-9]|0\.00000|Infinity|NaN)"
RESPELL = r"\\u00[01][A-F]|[:,\[]" + NUMBER
# RESPELL as patterns that each start with one literal byte, checked one after the other: RE2 then jumps from
# one occurrence of that byte to the next (memchr) instead of stepping its automaton over every byte, and the
# four passes scan runner records at ~850 MB/s against ~350 for RESPELL's one
RESPELL_PARTS = (r"\\u00[01][A-F]", ":" + NUMBER, "," + NUMBER, r"\[" + NUMBER)
# A key :func:`scrub` nulls, with a value other than null (compact JSON: no value but null starts with n)
REASONING_RE = r'"(?:reasoning|reasoning_content|thinking)":[^n]'
PERSONA_PARTS = (r'"(?:user_persona|persona)":[^n]', "用户个人文档：")


def scrub(value, reasoning: bool, persona: bool):
    """The record without reasoning (keys reasoning / reasoning_content / thinking set to null) and without the
    persona (user_persona / persona keys null, the persona section of prompts cut), unless included."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if (not reasoning and k in REASONING_KEYS) or (not persona and k in PERSONA_KEYS):
                out[k] = None
            else:
                out[k] = scrub(v, reasoning, persona)
        return out
    if isinstance(value, list):
        return [scrub(v, reasoning, persona) for v in value]
    if isinstance(value, str) and not persona and "用户个人文档：" in value:
        return PERSONA_SECTION.sub("", value)
    return value


def _needs_python(texts: pa.Array, reasoning: bool, persona: bool) -> list[bool]:
    """Per record: does its text need the orjson round trip (re-spelling, privacy)?"""
    import pyarrow.compute as pc

    hit = None
    for part in (*RESPELL_PARTS, *(() if reasoning else (REASONING_RE,)), *(() if persona else PERSONA_PARTS)):
        found = pc.match_substring_regex(texts, part)
        hit = found if hit is None else pc.or_(hit, found)
    return [bool(h) for h in hit.to_pylist()]  # null (no text) is False; no fill_null, whose scalar imports pandas


def record_batches(con, query: str, builder: str, fmt: str, *, reasoning: bool = False, persona: bool = False,
                   order: tuple[str, ...] = ()) -> pa.RecordBatchReader:
    """Run the kind's (one row per episode) ``query``, sort its rows by the columns ``order`` (if any), then
    :func:`finish` them (the fallback episodes read from ``con``'s base views: in an export batch, the batch's own
    copy of the base rows)."""
    from .. import __version__
    from ..engines.db import fetch_arrow, sql_string

    con.execute(f"SET VARIABLE export_tool_version = {sql_string(__version__)}")
    table = fetch_arrow(con, query)  # one batch of the export: ~RECORD_BATCH episodes
    if order:  # sorted here, not by the query: DuckDB's ORDER BY copied every record into its sort and out again
        import pyarrow.compute as pc

        table = table.take(pc.sort_indices(table, [(c, "ascending") for c in order]))
    return finish(table.to_reader(), builder, fmt, con, reasoning=reasoning, persona=persona)


def finish(rows: pa.RecordBatchReader, builder: str, fmt: str, con, *, reasoning: bool = False,
           persona: bool = False, foreign: bool = False) -> pa.RecordBatchReader:
    """The kind's view rows (``rows``, whatever engine computed them) as batches with a ``record`` column (JSON)
    and, for JSONL, the ``__line``; records pass :func:`scrub` (privacy by default). The episodes whose
    ``record`` is NULL are built by the dump writer, which reads them from ``con`` (a DuckDB connection with the
    warehouse's ``stg_`` views, on the snapshot the rows came from). ``foreign``: the rows are another engine's, and
    every record takes the orjson round
    trip, for rows of an engine whose JSON text is not DuckDB's (Spark embeds JSON texts as written, spaces kept,
    where DuckDB's ``json()`` minifies them). Else the rows are DuckDB's of an export batch, ``con`` also has the
    base views (``steps``, ...) and the fallback reads the episodes' last attempts through them
    (``load_episodes(base_views=LAST_ATTEMPT_VIEWS)``): they hold that batch's rows alone, where ``stg_`` is the
    whole warehouse."""
    names = rows.schema.names
    base = [n for n in names if n not in (SHARD, DUP, HASH, *KEY, *OWN_COLUMNS)]
    json_type = pa.json_() if fmt == "parquet" else pa.string()
    schema = pa.schema([*(pa.field(n, pa.string()) for n in ("sample_id", "run_id", "episode_id")),
                        pa.field("task_id", pa.int64()),
                        *(pa.field(n, pa.string()) for n in base if n not in ("sample_id", "run_id", "episode_id", "task_id")),
                        pa.field("record", json_type),
                        *([pa.field("__line", pa.string())] if fmt == "jsonl" else []),
                        *([pa.field(HASH, pa.int64())] if HASH in names else []),
                        *(pa.field(k, pa.uint64()) for k in KEY if k in names),
                        pa.field(SHARD, pa.int32()), pa.field(DUP, pa.int64())])
    def texts_of(chunk: pa.Table) -> pa.Array:
        raw = chunk.column("record").combine_chunks()
        if raw.type != pa.string():
            raw = raw.cast(pa.string())
        redo = range(len(raw)) if foreign else [i for i, r in enumerate(_needs_python(raw, reasoning, persona)) if r]
        missing = [i for i in range(len(raw)) if not raw[i].is_valid] if raw.null_count else []
        if not redo and not missing:
            return raw  # the common case with both privacy flags: the SQL's text as it is, no copy
        texts = raw.to_pylist()
        for i in redo:
            if texts[i] is not None:
                rec = orjson.loads(texts[i])
                if not (reasoning and persona):
                    rec = scrub(rec, reasoning, persona)
                texts[i] = orjson.dumps(rec, option=orjson.OPT_NON_STR_KEYS).decode()
        if missing:
            for i, t in zip(missing, _python_records(con, chunk.take(missing), builder, reasoning, persona,
                                                             not foreign), strict=True):
                texts[i] = t
        return pa.array(texts, pa.string())

    def chunks() -> Iterator[pa.Table]:  # RECORD_BATCH episodes at a time: one fallback query set each
        for part in rows:
            for start in range(0, part.num_rows, RECORD_BATCH):
                yield pa.Table.from_batches([part.slice(start, RECORD_BATCH)])

    def gen() -> Iterator[pa.RecordBatch]:
        for chunk in chunks():
            texts = texts_of(chunk)
            arrays = []
            for f in schema:
                if f.name in ("record", "__line"):
                    arrays.append(texts.cast(json_type) if f.name == "record" and fmt == "parquet" else texts)
                    continue
                values = chunk.column(f.name).to_pylist()
                if f.type == pa.string():
                    values = [v if v is None else str(v) for v in values]
                arrays.append(pa.array(values, f.type))
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    return pa.RecordBatchReader.from_batches(schema, gen())


def _python_records(con, chunk: pa.Table, builder: str, reasoning: bool, persona: bool,
                    base_views: bool = False) -> list[str]:
    """The records of ``chunk``'s episodes built by the dump writer (their last attempts), as orjson text."""
    from ..ingest.dump import load_episodes

    to_record = _builders()[builder]
    keys = list(zip(chunk.column("run_id").to_pylist(), chunk.column("episode_id").to_pylist(), strict=True))
    records: dict[tuple, str] = {}
    for run_id in sorted({r for r, _ in keys}):
        last: dict[str, object] = {}
        for ep in load_episodes(con, run_id, episode_ids=[e for r, e in keys if r == run_id],
                                base_views=LAST_ATTEMPT_VIEWS if base_views else ()):
            last[ep.eid] = ep  # attempts arrive in order: the last one stays, as the episodes view keeps
        for eid, ep in last.items():
            rec = to_record(ep)
            if not (reasoning and persona):  # both included: nothing to scrub
                rec = scrub(rec, reasoning, persona)
            records[(run_id, eid)] = orjson.dumps(rec, option=orjson.OPT_NON_STR_KEYS).decode()
    return [records[k] for k in keys]
