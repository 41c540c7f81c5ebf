"""The v4 reader's parallel path: chunks of one file parsed by worker processes, merged in file order; and the
``shopsimrl-v4`` reader itself (:func:`read`: this path for large JSONL, ``v4.read_serial`` for the rest).

Workers run :func:`parse_chunk` on byte ranges (see ``_pipeline.py``); :func:`read_parallel` fixes up
what depends on earlier chunks - attempt numbers (counted per chunk), ``ingest_errors.line`` (relative
to the chunk), fidelity counts, and records whose provenance
differs from the file's first record - and hands the tables to the open commit. What it keeps of earlier
chunks is an :class:`~._episode_index.EpisodeIndex` (12 bytes per episode; the rest on disk), so its memory
does not grow with the file.
"""

from __future__ import annotations

import itertools

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..core.errors import IngestError
from ..store.warehouse import StagedFile
from . import v4
from ._episode_index import EpisodeIndex
from ._io import base_suffix, iter_lines
from ._pipeline import chunk_bounds, map_chunks
from ._rows import canonical
from .core import UnitContext
from .registry import Reader, register
from .v4 import _new_state, _parse, _sidecars, duplicate_completed, finish_indexed, read_serial

WORKERS = 2


def parse_chunk(ctx: UnitContext, start: int, end: int) -> dict:
    """Worker side: rows of the lines in ``[start, end)`` into ``ctx.sink``; returns the chunk's state.

    Line numbers in ``ingest_errors`` are relative to the chunk (the parent adds the lines before it)
    and attempt numbers count from 1 within the chunk (the parent adds earlier attempts)."""
    st = _new_state(ctx)
    st.plain = []
    counted = [0, 0]  # lines, bytes
    with open(ctx.path, "rb") as f:  # streamed, not read whole: a line past max_record_bytes is dropped unread
        f.seek(start)
        for _ in _parse(ctx, st, iter_lines(_Range(f, end - start), None, ctx.max_record_bytes, counted),
                        offset_base=start):
            pass
    lines, nbytes = counted
    return {"attempts": st.attempts, "fid": st.fid, "file_total": st.file_total, "file_dropped": st.file_dropped,
            "run_prov": st.run_prov, "run_fields": dict(ctx.run_fields), "plain": st.plain,
            "goals": st.goals[0], "lines": lines, "records": ctx.records, "done": st.done,
            "rejected": ctx.rejected, "bytes": nbytes, "any_line": st.any_line}


class _Range:
    """The next ``left`` bytes of an open file, as a stream (a chunk's byte range)."""

    def __init__(self, f, left: int):
        self.f, self.left = f, left

    def read(self, n: int) -> bytes:
        b = self.f.read(min(n, self.left)) if self.left > 0 else b""
        self.left -= len(b)
        return b


_ATTEMPT_TABLES = ("episodes", "agents", "steps", "actions", "observations", "messages", "skills_selected", "failures", "tools")


def read_parallel(ctx: UnitContext):
    with EpisodeIndex() as seen:
        yield from _read_parallel(ctx, seen)


def _read_parallel(ctx: UnitContext, seen: EpisodeIndex):
    _sidecars(ctx)
    run_prov = None
    file_total = file_dropped = goals = lines_before = 0
    any_line = False
    chunks = chunk_bounds(ctx.path, ctx.flush_bytes)
    results = map_chunks(ctx, chunks, __name__, "parse_chunk", WORKERS)
    try:
        first = next(results)
    except IngestError as e:  # the workers could not start: nothing is written yet, parse here instead
        ctx.provenance["parallel_fallback"] = str(e)[:300]
        yield from read_serial(ctx)
        return
    for tables, meta in itertools.chain([first], results):
        prior = seen.prior(meta["attempts"])
        drop = _drop_duplicates(ctx, seen, meta, prior, lines_before)
        if run_prov is None and meta["run_prov"] is not None:
            run_prov = meta["run_prov"]
            ctx.run_fields.update(meta["run_fields"])
        out = []
        for name, t in tables:
            if (prior or drop) and name in _ATTEMPT_TABLES:  # rare: an episode retried across a chunk boundary
                if isinstance(t, StagedFile):
                    t = _load_staged(t)
                t = _renumber(t, prior, drop)
            if name == "ingest_errors" and lines_before:
                i = t.schema.get_field_index("line")
                t = t.set_column(i, "line", pc.add(t.column("line"), lines_before))
            out.append((name, t))
        if run_prov is not None and meta["run_prov"] is not None and meta["run_prov"] != run_prov:
            out = [(n, _fix_provenance(t, set(meta["plain"]), prior, meta["run_prov"], run_prov) if n == "episodes" else t)
                   for n, t in out]
        seen.add(meta["attempts"], meta["fid"], prior, meta["done"])
        file_total += meta["file_total"]
        file_dropped += meta["file_dropped"]
        goals += meta["goals"]
        lines_before += meta["lines"]
        any_line = any_line or meta["any_line"]
        ctx.records += meta["records"]
        ctx.rejected += meta["rejected"]
        ctx.attempts += sum(meta["attempts"].values())
        if ctx.on_bytes:
            ctx.on_bytes(meta["bytes"])
        ctx.ready.extend(out)
        yield
    finish_indexed(ctx, seen, any_line, file_total, file_dropped, run_prov, goals)
    yield


def _drop_duplicates(ctx: UnitContext, seen: EpisodeIndex, meta: dict, prior: dict, lines_before: int) -> dict:
    """The chunk's first completed record of an episode an earlier chunk completed: refused as the serial path
    refuses it (v4.duplicate_completed). Fixes ``meta``; returns ``{episode: chunk-local attempt}`` to drop."""
    drop = {e: meta["done"].pop(e) for e in list(meta["done"]) if e in prior and seen.repeats[e][4]}
    for e, (attempt, line, offset, goals) in drop.items():
        meta["attempts"][e] -= 1
        meta["goals"] -= goals  # counted for stored records only
        meta["fid"][e][0] -= 1  # duplicate_completed counts the record again, as dropped
        meta["fid"][e][1] -= 1
        duplicate_completed(ctx, meta["fid"], e, line + lines_before, offset)
        meta["plain"] = [k for k in (_local(k, e, attempt) for k in meta["plain"]) if k is not None]
    return {e: v[0] for e, v in drop.items()}


def _local(key: str, eid: str, dropped: int) -> str | None:
    """A ``plain`` key (``episode#attempt``, chunk-local) once attempt ``dropped`` of ``eid`` is gone."""
    e, _, a = key.rpartition("#")
    if e != eid or int(a) < dropped:
        return key
    return None if int(a) == dropped else f"{e}#{int(a) - 1}"


def _renumber(t: pa.Table, prior: dict, drop: dict) -> pa.Table:
    """Chunk-local attempts made file-wide (``prior`` earlier attempts added), without the ``drop``ped ones."""
    keep, att = [], []
    for e, a in zip(t.column("episode_id").to_pylist(), t.column("attempt").to_pylist(), strict=True):
        d = drop.get(e)
        keep.append(d is None or a != d)
        att.append((a - 1 if d is not None and a > d else a) + prior.get(e, 0))
    t = t.set_column(t.schema.get_field_index("attempt"), "attempt", pa.array(att, pa.int16()))
    return t.filter(pa.array(keep)) if drop else t


def _load_staged(f: StagedFile) -> pa.Table:
    """A worker's staged file back in memory (to renumber it); the file itself is dropped."""
    t = pq.read_table(f.path)
    f.path.unlink(missing_ok=True)
    return t


def _fix_provenance(t: pa.Table, plain: set[str], prior: dict, chunk_prov, run_prov) -> pa.Table:
    """A chunk whose first record's provenance is not the file's: the records that matched the chunk's
    provenance (``plain``, keyed with chunk-local attempts) get it in ``source_extra``, and records
    whose provenance is the file's drop it (as the serial path would have written them)."""
    eids = t.column("episode_id").to_pylist()
    atts = t.column("attempt").to_pylist()
    extra = t.column("source_extra").to_pylist()
    for i, (e, a, x) in enumerate(zip(eids, atts, extra, strict=True)):
        d = orjson.loads(x) if x else {}
        if f"{e}#{a - prior.get(e, 0)}" in plain:
            d["provenance"] = chunk_prov
        elif d.get("provenance") == run_prov:
            del d["provenance"]
        extra[i] = canonical(d).decode() if d else None
    return t.set_column(t.schema.get_field_index("source_extra"), "source_extra", pa.array(extra, pa.string()))


def read(ctx: UnitContext):
    """Serial for small, compressed or ``.json`` files; large JSONL is parsed by worker processes in chunks."""
    if ctx.parallel and not ctx.path.name.endswith((".gz", ".zst", ".zstd")) and base_suffix(ctx.path) != ".json" \
            and ctx.path.stat().st_size >= v4.PIPELINE_MIN_BYTES:
        yield from read_parallel(ctx)
    else:
        yield from read_serial(ctx)


register(Reader(name="shopsimrl-v4", description="shopsimrl-episode-v4 (runs/<name>/traces.jsonl, slime rollout .json)",
                sniff=v4.sniff, read=read, companions=v4.companions))
