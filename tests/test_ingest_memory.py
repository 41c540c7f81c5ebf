"""Issue 13: the ingest process's memory does not grow with the episodes of a large file (parallel v4 path).

What it keeps of earlier chunks is an ``EpisodeIndex``: 12 bytes per distinct episode, the rest on disk. The
tests assert sizes and counts (never seconds): the index's bytes, its exactness under forced hash collisions,
and the Python heap of the ingest process from chunk to chunk.
"""

from __future__ import annotations

import tracemalloc
from collections import Counter

import pytest

from shopsim_wh.demo import shopsimrl_v4 as synth_v4
from shopsim_wh.engines.db import connect
from shopsim_wh.ingest import IngestOptions, _episode_index, ingest
from shopsim_wh.ingest._episode_index import EpisodeIndex
from shopsim_wh.store.warehouse import Warehouse


def rec(task_id, **kw):
    return synth_v4.record(task_id, spec=synth_v4.RecordSpec(steps=kw.pop("steps", 1), obs_words=4, think_words=4, **kw))


def chunks_of(lines_per_chunk: list[list[str]]):
    """Per chunk, the worker's state for these episode ids: attempts and [total, converted, dropped]."""
    out = []
    for ids in lines_per_chunk:
        att = Counter(ids)
        out.append((dict(att), {e: [n, n - (1 if e.endswith("x") else 0), 1 if e.endswith("x") else 0]
                                for e, n in att.items()}))
    return out


def reference(chunks):
    """What the dicts of the old parent computed: prior attempts per chunk, and the fidelity rows."""
    counts, fid, priors = {}, {}, []
    for att, f in chunks:
        priors.append({e: counts[e] for e in att if e in counts})
        for e, n in att.items():
            counts[e] = counts.get(e, 0) + n
            g = fid.setdefault(e, [0, 0, 0])
            for i in range(3):
                g[i] += f[e][i]
    return priors, [(e, *v) for e, v in fid.items()]


@pytest.mark.parametrize("collide", [False, True])
def test_index_matches_the_dicts_it_replaced(monkeypatch, collide):
    if collide:  # every id of the same length shares a hash: each lookup must check the chunk's file
        monkeypatch.setattr(_episode_index, "_hash", len)
    ids = [[f"ep-{i:03d}" for i in range(c * 10, c * 10 + 10)] for c in range(6)]
    ids[2] += ["ep-005", "ep-005", "ep-013x"]  # retries of chunk 0's and 1's episodes ...
    ids[4] += ["ep-005", "ep-049", "ep-7"]  # ... again, and one of chunk 4 itself, and a shorter id
    ids[5] += ["ep-13x"]
    ids[1] += ["ep-013x"]
    chunks = chunks_of(ids)
    priors, rows = reference(chunks)
    with EpisodeIndex() as seen:
        for (att, f), want in zip(chunks, priors, strict=True):
            got = seen.prior(att)
            assert got == want
            seen.add(att, f, got)
        assert len(seen) == len(rows)
        assert seen.hashes.nbytes + seen.chunk_of.nbytes == 12 * len(rows)  # the whole in-memory cost
        assert set(seen.repeats) == {"ep-005", "ep-013x"}  # only episodes in more than one chunk are kept whole
        got_rows = [r for units, *cols in seen.fidelity_tables() for r in zip(units, *cols, strict=True)]
        assert got_rows == rows  # same rows, same (first-appearance) order
        d = seen.dir
        assert d.is_dir()
    assert not d.exists()


def test_parent_heap_is_flat_across_chunks(tmp_path, monkeypatch):
    """The ingest process's traced Python heap, read at each chunk (the progress callback), may not grow with the
    episodes merged. The dicts it replaced grew by ~320 bytes per episode here; what grows now is 12 bytes per
    episode (the index) and ~500 bytes per committed file (the snapshot's entries: ~10 files a chunk, one chunk
    per 32 MB of input at the default ``flush_bytes``; here a chunk is ~125 episodes, so ~80 bytes per episode)."""
    from shopsim_wh.ingest import v4

    monkeypatch.setattr(v4, "PIPELINE_MIN_BYTES", 0)
    n = 4000
    f = tmp_path / "traces.jsonl"
    with open(f, "wb") as out:
        for i in range(n):
            out.write(synth_v4.line(rec(i + 1)))
    size = f.stat().st_size
    heap = []
    tracemalloc.start()
    try:
        s = ingest([f], tmp_path / "wh", IngestOptions(flush_bytes=size // 32), progress=lambda done, total: heap.append(
            tracemalloc.get_traced_memory()[0]))
    finally:
        tracemalloc.stop()
    assert s.files[0].status == "landed" and s.files[0].episodes == n
    assert len(heap) >= 30  # one reading per chunk
    early, late = sorted(heap[5:15])[5], sorted(heap[-10:])[5]  # medians: one chunk's transient objects vary
    episodes_between = n * (len(heap) - 10 - 10) / len(heap)
    assert late - early < 100 * episodes_between, (early, late, episodes_between)
    con = connect(tmp_path / "wh")
    assert con.execute("select count(*), sum(records_total), sum(converted) from import_fidelity "
                       "where unit <> 'file'").fetchone() == (n, n, n)
    files = Warehouse(tmp_path / "wh").snapshot().files("import_fidelity")
    assert [e.rows for e in files] == [n]  # one file, written a row group at a time


def test_serial_path_heap_is_flat_across_chunks(tmp_path, monkeypatch):
    """The serial path (here a ``.gz`` file: never parsed by workers) past its first chunk keeps its episodes in
    the same index: the heap read at each chunk's end may not grow with the episodes read (the dicts it kept
    before: ~320 bytes per episode of the file)."""
    import gzip

    from shopsim_wh.ingest import v4

    n, per = 4000, 125  # 32 chunks (tracemalloc slows every allocation: 8,000 episodes took a minute)
    f = tmp_path / "traces.jsonl.gz"
    with gzip.open(f, "wb", compresslevel=1) as out:
        for i in range(n):
            out.write(synth_v4.line(rec(i + 1)))
    heap, dirs = [], set()
    end_chunk = v4._end_chunk

    def measured(st):
        end_chunk(st)
        dirs.add(st.seen.dir)
        # the tool-list cache is bounded (cleared past 4,096 lists) but its sawtooth is MBs here: without this the
        # old whole-file dicts (343 B per episode, checked with _end_chunk a no-op) read as -22 B per episode
        st.tool_hash_cache.clear()
        heap.append(tracemalloc.get_traced_memory()[0])

    monkeypatch.setattr(v4, "_end_chunk", measured)
    tracemalloc.start()
    try:
        s = ingest([f], tmp_path / "wh", IngestOptions(flush_every=per))
    finally:
        tracemalloc.stop()
    assert s.files[0].status == "landed" and s.files[0].episodes == n
    assert len(heap) == n // per + 1  # one reading per chunk, the last one's at the end of the file
    early, late = sorted(heap[5:15])[5], sorted(heap[-11:-1])[5]
    episodes_between = per * (len(heap) - 1 - 10 - 10)
    assert late - early < 100 * episodes_between, (early, late, episodes_between)
    assert len(dirs) == 1 and not next(iter(dirs)).exists()  # the index's files are gone
    con = connect(tmp_path / "wh")
    assert con.execute("select count(*), count(distinct unit), sum(records_total), sum(converted) "
                       "from import_fidelity where unit <> 'file'").fetchone() == (n, n, n, n)
    assert [e.rows for e in Warehouse(tmp_path / "wh").snapshot().files("import_fidelity")] == [n]
