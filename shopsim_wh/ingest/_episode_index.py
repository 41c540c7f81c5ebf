"""The episodes of a file's earlier chunks, for the v4 reader (both paths), in 12 bytes per episode.

``read_parallel`` needs two things that depend on every earlier chunk: the attempts an episode already had (an
episode retried across a chunk boundary is renumbered), and at the end one ``import_fidelity`` row per episode,
in the order episodes first appear, with its counts summed over the whole file. Held as Python dicts of episode
id -> counts, that state cost ~330 bytes per episode in the ingest process (115 -> 212 MB from 10k to 300k
episodes; ~600 MB at 1M with the fidelity rows built at the end).

Here the ingest process keeps, per distinct episode, the 64-bit ``hash()`` of its id (a sorted ``int64`` array)
and the chunk that first held it (``int32``): 12 bytes. Each chunk's first appearances (id, attempts, records
total / converted / dropped) go to an Arrow IPC file in a private temporary directory. A hash found in the
array is checked against that chunk's file, so a hash collision never renumbers an episode; episodes seen in
more than one chunk (retries across a boundary: few) are kept exactly in :attr:`EpisodeIndex.repeats`.
:meth:`EpisodeIndex.fidelity_tables` then streams the rows back from the files, one chunk at a time.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

_SCHEMA = pa.schema([("unit", pa.string()), ("attempts", pa.int64()), ("total", pa.int64()),
                     ("converted", pa.int64()), ("dropped", pa.int64()), ("completed", pa.int64())])
COUNTS = ("attempts", "total", "converted", "dropped", "completed")  # completed: records of the store's rule (0 or 1)
_hash = hash  # str's own 64-bit hash: per process, which is all the index needs (tests replace it to collide)


class EpisodeIndex:
    """Distinct episode ids of the chunks added so far; see the module docstring. Use as a context manager
    (the temporary files are removed on exit)."""

    def __init__(self):
        self.hashes = np.empty(0, np.int64)  # sorted
        self.chunk_of = np.empty(0, np.int32)  # parallel to hashes: the chunk holding the episode's first row
        self.repeats: dict[str, list[int]] = {}  # episode in > 1 chunk -> its counts so far (COUNTS order)
        self.repeat_chunks: dict[int, set[str]] = {}  # chunk -> the repeated episodes whose first row it holds
        self.chunks = 0
        self.dir = Path(tempfile.mkdtemp(prefix="shopsim-wh-episodes-"))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Remove the temporary files (the index is of no use after)."""
        shutil.rmtree(self.dir, ignore_errors=True)

    def __len__(self) -> int:
        return len(self.hashes)

    def _file(self, chunk: int) -> Path:
        return self.dir / f"chunk-{chunk:07d}.arrow"

    def _read(self, chunk: int) -> pa.Table:
        with pa.memory_map(str(self._file(chunk))) as src:
            return pa.ipc.open_file(src).read_all()

    def prior(self, eids) -> dict[str, int]:
        """``{episode id: attempts in earlier chunks}`` for the ids of ``eids`` that earlier chunks held."""
        eids = list(eids)
        if not eids or not len(self.hashes):
            return {}
        h = np.fromiter(map(_hash, eids), np.int64, len(eids))
        pos = np.searchsorted(self.hashes, h)
        hit = pos < len(self.hashes)
        hit[hit] = self.hashes[pos[hit]] == h[hit]
        out: dict[str, int] = {}
        for i in np.flatnonzero(hit):
            e = eids[i]
            if e in self.repeats:
                out[e] = self.repeats[e][0]
                continue
            p = int(pos[i])
            while p < len(self.hashes) and self.hashes[p] == h[i]:  # every chunk whose episode has this hash
                chunk = int(self.chunk_of[p])
                t = self._read(chunk)
                found = np.flatnonzero(t.column("unit").to_numpy(zero_copy_only=False) == e)
                if len(found):  # a true repeat (not a collision): its counts so far
                    row = [t.column(c)[int(found[0])].as_py() for c in COUNTS]
                    self.repeats[e] = row
                    self.repeat_chunks.setdefault(chunk, set()).add(e)
                    out[e] = row[0]
                    break
                p += 1
        return out

    def add(self, attempts: dict[str, int], fid: dict[str, list[int]], prior: dict[str, int],
            done=()) -> None:
        """Record one chunk: ``attempts`` / ``fid`` are its per-episode counts in first-appearance order (the
        worker's), ``prior`` what :meth:`prior` returned for it, ``done`` its episodes with a completed record."""
        for e in prior:
            acc, (t, c, d) = self.repeats[e], fid[e]
            acc[0] += attempts[e]
            acc[1] += t
            acc[2] += c
            acc[3] += d
            acc[4] += e in done
        new = [e for e in attempts if e not in prior]
        chunk = self.chunks
        self.chunks += 1
        table = pa.table([pa.array(new, pa.string()), pa.array([attempts[e] for e in new], pa.int64()),
                          pa.array([fid[e][0] for e in new], pa.int64()), pa.array([fid[e][1] for e in new], pa.int64()),
                          pa.array([fid[e][2] for e in new], pa.int64()),
                          pa.array([int(e in done) for e in new], pa.int64())], schema=_SCHEMA)
        with pa.OSFile(str(self._file(chunk)), "wb") as sink, pa.ipc.new_file(sink, _SCHEMA) as w:
            w.write_table(table)
        if not new:
            return
        h = np.fromiter(map(_hash, new), np.int64, len(new))
        order = np.argsort(h, kind="stable")
        at = np.searchsorted(self.hashes, h[order])
        self.hashes = np.insert(self.hashes, at, h[order])
        self.chunk_of = np.insert(self.chunk_of, at, np.full(len(new), chunk, np.int32))

    def fidelity_tables(self) -> Iterator[tuple[list[str], list[int], list[int], list[int]]]:
        """Per chunk: (episode ids, records total, converted, dropped) of the episodes it first held, counted
        over the whole file, in first-appearance order."""
        for chunk in range(self.chunks):
            t = self._read(chunk)
            units = t.column("unit").to_pylist()
            cols = [t.column(c).to_pylist() for c in ("total", "converted", "dropped")]
            if repeated := self.repeat_chunks.get(chunk):
                for i, e in enumerate(units):
                    if e in repeated:
                        for col, v in zip(cols, self.repeats[e][1:4], strict=True):
                            col[i] = v
            yield units, *cols
