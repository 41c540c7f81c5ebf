"""Streaming compaction (DuckDB sorts under a memory cap, pyarrow writes row groups): sorted output split into
files at the size target, in the declared schema with zstd and the dictionary columns, readers kept whole."""

from __future__ import annotations

import pyarrow.parquet as pq

from shopsim_wh.core.schema import DICTIONARY_COLUMNS, TABLES, to_arrow
from shopsim_wh.engines.db import connect
from shopsim_wh.store import compaction
from shopsim_wh.store import warehouse as warehouse_module
from shopsim_wh.store.warehouse import Warehouse


def _steps(run_id: str, i: int, n: int = 5):
    ep = f"task-{i:06d}__sample-000"
    return [("steps", run_id, to_arrow("steps", [{"episode_id": ep, "attempt": 1, "agent_id": "main", "step_idx": s,
                                                  "content": f"step {s} of {ep} " * 5} for s in range(n)]))]


def test_compaction_streams_sorted_files_at_the_size_target(warehouse, monkeypatch):
    wh = Warehouse(warehouse)
    with wh.writer(grace_s=60) as w:
        for i in (7, 2, 9, 4, 1, 8):
            w.commit(_steps("r", i))
    before = connect(warehouse)  # a reader of the pre-compaction snapshot
    monkeypatch.setattr(compaction, "BATCH_ROWS", 4)  # several batches, one row group each
    monkeypatch.setattr(warehouse_module, "COMPACT_FILE_TARGET_BYTES", 1)  # a new file after each row group
    with wh.writer(grace_s=60) as w:
        assert w.compact("r") == 6
    snap = wh.snapshot()
    files = snap.files("steps")
    assert len(files) > 1 and all(e.compacted for e in files) and sum(e.rows for e in files) == 30
    spec = TABLES["steps"]
    keys = []
    for e in sorted(files, key=lambda e: e.path):
        meta = pq.read_metadata(wh.abspath(e))
        assert pq.read_schema(wh.abspath(e)).equals(spec.arrow_schema, check_metadata=False)
        assert meta.num_rows == e.rows
        col = {meta.schema.column(i).name: meta.row_group(0).column(i) for i in range(meta.num_columns)}
        assert col["episode_id"].compression == "ZSTD"
        assert "RLE_DICTIONARY" in col["episode_id"].encodings and "episode_id" in DICTIONARY_COLUMNS
        assert "RLE_DICTIONARY" not in col["content"].encodings and "content" not in DICTIONARY_COLUMNS
        t = pq.read_table(wh.abspath(e), columns=list(spec.sort_key))
        keys += list(zip(*(t.column(k).to_pylist() for k in spec.sort_key), strict=True))
    # file names are time-ordered, so the files in name order continue each other's sort order
    assert keys == sorted(keys)
    assert before.execute("select count(*) from stg_steps").fetchone() == (30,)  # the old files are still there
    assert connect(warehouse).execute("select count(*), count(distinct episode_id) from steps").fetchone() == (30, 6)
