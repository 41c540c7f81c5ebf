"""Record kinds: an export whose row is one whole episode in an interchange format (``shopsimrl-v4``, ``atif``).

The kind's SQL picks the episodes (one row each, with lineage and filter columns); this module turns the
selected episodes into their records with the dump writers (shopsim_wh/ingest/dump*.py), loading
``RECORD_BATCH`` episodes of a run per query set on the export's one connection: no connection or view
installation per episode (the old ``dump`` loop paid ~0.27 s per episode for that).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import orjson
import pyarrow as pa

from .writer import DUP, SHARD

RECORD_BATCH = 500


def _builders():
    from ..ingest.dump import to_atif
    from ..ingest.dump_v4 import to_v4

    return {"shopsimrl-v4": to_v4, "atif": to_atif}


PERSONA_SECTION = re.compile(r"(\n\n)?用户个人文档：\n[^\n]*")
REASONING_KEYS = frozenset({"reasoning", "reasoning_content", "thinking"})
PERSONA_KEYS = frozenset({"user_persona", "persona"})


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


def record_batches(con, query: str, builder: str, fmt: str, *, reasoning: bool = False,
                   persona: bool = False) -> pa.RecordBatchReader:
    """Run the kind's (narrow, one row per episode) ``query`` to the end, then yield batches with a ``record``
    column (JSON) and, for JSONL, the ``__line``; records pass :func:`scrub` (privacy by default)."""
    from ..ingest.dump import load_episodes

    to_record = _builders()[builder]
    cur = con.execute(query)
    names = [d[0] for d in cur.description]
    rows = cur.fetchall()  # ids and filter columns only: one small row per episode
    base = [n for n in names if n not in (SHARD, DUP)]
    json_type = pa.json_() if fmt == "parquet" else pa.string()
    schema = pa.schema([*(pa.field(n, pa.string()) for n in ("sample_id", "run_id", "episode_id")),
                        pa.field("task_id", pa.int64()),
                        *(pa.field(n, pa.string()) for n in base if n not in ("sample_id", "run_id", "episode_id", "task_id")),
                        pa.field("record", json_type),
                        *([pa.field("__line", pa.string())] if fmt == "jsonl" else []),
                        pa.field(SHARD, pa.int32()), pa.field(DUP, pa.int64())])

    def gen() -> Iterator[pa.RecordBatch]:
        for start in range(0, len(rows), RECORD_BATCH):
            chunk = [dict(zip(names, r, strict=True)) for r in rows[start:start + RECORD_BATCH]]
            records: dict[tuple, str] = {}
            for run_id in sorted({r["run_id"] for r in chunk}):
                ids = [r["episode_id"] for r in chunk if r["run_id"] == run_id]
                last: dict[str, object] = {}
                for ep in load_episodes(con, run_id, episode_ids=ids):
                    last[ep.eid] = ep  # attempts arrive in order: the last one stays, as the episodes view keeps
                for eid, ep in last.items():
                    rec = to_record(ep)
                    if not (reasoning and persona):  # both included: nothing to scrub
                        rec = scrub(rec, reasoning, persona)
                    records[(run_id, eid)] = orjson.dumps(rec, option=orjson.OPT_NON_STR_KEYS).decode()
            cols = {f.name: [] for f in schema}
            for r in chunk:
                text = records[(r["run_id"], r["episode_id"])]
                for f in schema:
                    if f.name in ("record", "__line"):
                        cols[f.name].append(text)
                    else:
                        v = r.get(f.name)
                        cols[f.name].append(v if v is None or f.type != pa.string() else str(v))
            arrays = [pa.array(cols[f.name], pa.string()) if f.name == "record" and fmt == "parquet"
                      else pa.array(cols[f.name], f.type) for f in schema]
            if fmt == "parquet":
                arrays[schema.get_field_index("record")] = arrays[schema.get_field_index("record")].cast(json_type)
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    return pa.RecordBatchReader.from_batches(schema, gen())
