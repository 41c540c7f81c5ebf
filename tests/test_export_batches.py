"""Bounded-memory exports (shopsim_wh/export/batches.py): a kind computed per batch of episodes and spilled in
many episode-hash buckets gives the same bytes as one batch in one bucket, exact duplicates in different batches
included (issue 10)."""

from __future__ import annotations

import hashlib
import json

import pytest

from shopsim_wh.export import batches, export, list_kinds

from . import export_fixtures as fx

_fixtures = fx.export_wh, fx.export_con, fx.every_kind
_wh, _con, _kinds = _fixtures  # pytest finds fixtures among module attributes

BATCH = 4
# where = true over this warehouse gives no row: no task with rollouts far enough apart; no synthetic reasoning; no
# training namespace (tests/test_export_tokens.py checks the token kinds' batches)
NO_ROWS_HERE = {"preference", "sft-reasoning", "rl-tokens", "slime-samples"}


@pytest.mark.parametrize("kind", [k.name for k in list_kinds()])
def test_many_batches_give_the_bytes_of_one(kind, every_kind, export_con, tmp_path, monkeypatch):
    episodes = export_con.execute("SELECT count(*) FROM episodes").fetchone()[0]
    assert episodes > 3 * BATCH  # so the export below really runs in several batches
    one, one_dir = every_kind[kind]  # computed in one batch (the default batch is larger than this warehouse)
    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", str(BATCH))
    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BUCKET_BYTES", "4096")  # and many spill buckets
    monkeypatch.setattr(batches, "SPILL_OPEN_GROUPS", 1)  # each cut into parts of one row group
    monkeypatch.setattr(batches, "SPILL_PART_GROUPS", 1)
    many = export(kind, export_con, tmp_path / kind, where="true")
    assert many.rows == one.rows and many.duplicates_removed == one.duplicates_removed
    assert one.rows > 0 or kind in NO_ROWS_HERE
    assert many.shards == one.shards
    for s in one.shards:
        assert (tmp_path / kind / s["file"]).read_bytes() == (one_dir / s["file"]).read_bytes()
    if kind == "sft-action":  # the duplicated tau-bench run: its copies land in other batches, still counted
        assert many.duplicates_removed > 0
        m = json.loads((tmp_path / kind / "manifest.json").read_text())
        assert m["rows_selected"] == m["rows"] + m["duplicates_removed"]


def test_jsonl_in_batches_equals_one_batch(export_con, tmp_path, monkeypatch):
    one = export("ntp", export_con, tmp_path / "one", format="jsonl", where="true", shard_rows=5)
    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", str(BATCH))
    many = export("ntp", export_con, tmp_path / "many", format="jsonl", where="true", shard_rows=5)
    assert len(one.shards) > 1 and many.shards == one.shards
    for s in one.shards:
        assert (tmp_path / "many" / s["file"]).read_bytes() == (tmp_path / "one" / s["file"]).read_bytes()


def test_a_bad_batch_size_says_what_to_set(export_con, tmp_path, monkeypatch):
    from shopsim_wh.export import ExportError

    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", "0")
    with pytest.raises(ExportError, match="SHOPSIM_WH_EXPORT_BATCH_EPISODES must be a positive integer"):
        export("sft-action", export_con, tmp_path / "x")


@pytest.mark.parametrize("open_groups", [16384, 1], ids=["one-file-a-bucket", "parts"])
def test_spill_buckets_hold_hash_ranges_and_keep_types(tmp_path, monkeypatch, open_groups):
    """Rows routed batch by batch land in the bucket of their episode hash's range (batches.hash_range: bucket i
    of n holds the hashes h with h * n // 2**32 == i), every row once, with DuckDB's JSON[] and BOOLEAN[] types
    intact (phase 3 reads the buckets back with DuckDB); with a tiny row-group budget every bucket is cut into
    several part files (bounded writer metadata) and holds the same rows."""
    import duckdb
    import pyarrow.parquet as pq

    from shopsim_wh.export import batches
    from shopsim_wh.export.batches import Spill

    monkeypatch.setattr(batches, "SPILL_OPEN_GROUPS", open_groups)
    monkeypatch.setattr(batches, "SPILL_PART_GROUPS", 1)
    monkeypatch.setattr(batches, "PENDING_BYTES", 1)  # every routed slice is flushed: one row group each
    con = duckdb.connect()
    con.execute("SET arrow_lossless_conversion = true")
    query = f"""SELECT md5(CAST(i AS VARCHAR)) AS sample_id, 'ep-' || (i // 3) AS episode_id,
                      [CAST('[' || i || ']' AS JSON)] AS messages,
                      CASE WHEN i % 3 = 0 THEN NULL ELSE [i % 2 = 0, true] END AS labels,
                      {batches.hash_sql()} AS __h
               FROM range(LO, HI) AS t(i)"""
    spill = Spill(tmp_path, n_batches=4, bucket_bytes=2000)
    for b in range(4):
        spill.add(con.sql(query.replace("LO", str(b * 100)).replace("HI", str(b * 100 + 100))).to_arrow_table())
    buckets = spill.close()
    n = len(buckets)
    assert n > 3
    parts = [len(p) for p in buckets]
    assert max(parts) > 1 if open_groups == 1 else set(parts) == {1}
    for b in buckets:  # at most the budget's share of row groups in any part
        assert all(pq.ParquetFile(f).metadata.num_row_groups <= max(1, open_groups // n) for f in b)
    for i, b in enumerate(buckets):
        lo, hi = batches.hash_range(i, n)
        rows = pq.read_table(b).to_pylist()
        assert all(lo <= r["__h"] <= hi for r in rows)
        assert all(r["__h"] == int(hashlib.md5(r["episode_id"].encode()).hexdigest()[:8], 16) for r in rows)
    files = [f for b in buckets for f in b]
    assert sum(pq.ParquetFile(f).metadata.num_rows for f in files) == 400
    src = "read_parquet([" + ", ".join(f"'{f}'" for f in files) + "])"
    assert dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM {src})").fetchall()) == {
        "sample_id": "VARCHAR", "episode_id": "VARCHAR", "messages": "JSON[]", "labels": "BOOLEAN[]", "__h": "BIGINT"}
    everything = query.replace("LO", "0").replace("HI", "400")
    assert con.execute(f"SELECT count(*) FROM {src} AS s JOIN ({everything}) AS q "
                       "ON q.sample_id = s.sample_id AND q.messages = s.messages "
                       "AND q.labels IS NOT DISTINCT FROM s.labels").fetchone()[0] == 400


def test_shards_are_ranges_of_the_episode_hash():
    """shard_of (Python) and shard_sql (DuckDB) agree, every shard of n is a contiguous hash range
    (batches.hash_range) and the ranges tile [0, 2**32)."""
    import duckdb

    from shopsim_wh.export import batches

    ids = [f"ep-{i}" for i in range(500)] + ["", "épisode", "0"]
    for n in (1, 2, 3, 7, 139):
        got = duckdb.execute(f"SELECT {batches.shard_sql(n, 'e')} FROM unnest($ids) AS t(e)", {"ids": ids}).fetchall()
        assert [g for (g,) in got] == [batches.shard_of(e, n) for e in ids]
        ranges = [batches.hash_range(i, n) for i in range(n)]
        assert ranges[0][0] == 0 and ranges[-1][1] == 2**32 - 1
        assert all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
        assert all(batches.shard_of(e, n) == i for e in ids for i, (lo, hi) in enumerate(ranges)
                   if lo <= int(hashlib.md5(e.encode()).hexdigest()[:8], 16) <= hi)


@pytest.mark.parametrize("shape", [None, "trl-stepwise"])
def test_prm_labels_split_across_shards(shape, export_con, tmp_path):
    """BOOLEANs cut at a shard boundary, in a list of structs (prm's steps[].label) and in a BOOLEAN[] column
    (labels of --prm-shape trl-stepwise): the slice's null mask and offsets convert (pyarrow refuses
    ListArray.from_arrays on them, which failed every multi-shard prm export)."""
    import pyarrow.parquet as pq

    res = export("prm", export_con, tmp_path / "prm", where="true", shard_rows=2, prm_shape=shape)
    assert len(res.shards) > 1
    rows = [r for s in res.shards for r in pq.read_table(tmp_path / "prm" / s["file"]).to_pylist()]
    assert len(rows) == res.rows > 0
    labels = [v for r in rows for v in (r["labels"] if shape else [s["label"] for s in r["steps"]])]
    assert labels and all(isinstance(v, bool) for v in labels)


@pytest.mark.parametrize("open_files", [1000, 3], ids=["one-pass", "two-passes"])
def test_shadow_gives_each_batch_exactly_its_rows_and_types(open_files, export_wh, tmp_path, monkeypatch):
    """The base rows copied once into one folder per batch (batches.shadow): through a batch's TEMP views a cursor
    sees exactly the base rows of that batch's episodes, with the base views' column types, however the copy was
    cut (tiny bounds here: every Arrow batch flushed to files that are closed and reopened as new parts; with more
    batches than files open at once, copied to groups of batches first, then from each group to its batches)."""
    from shopsim_wh.engines.db import connect, ident
    from shopsim_wh.export import batches
    from shopsim_wh.export.registry import get_kind

    monkeypatch.setattr(batches, "SHADOW_ROWS", 3)
    monkeypatch.setattr(batches, "SHADOW_ROUTE_ROWS", 7)  # three Arrow batches of 3 rows routed as one
    monkeypatch.setattr(batches, "SHADOW_PENDING_BYTES", 1)
    monkeypatch.setattr(batches, "SHADOW_OPEN_FILES", open_files)
    con = connect(export_wh["root"])
    con.execute("CREATE OR REPLACE TEMP TABLE export_scope AS SELECT run_id FROM runs")
    n = batches.plan(con, get_kind("sft-action"), 1)  # about one episode a batch (md5 shares)
    assert n > 3 * open_files or open_files > n > 3  # two passes, groups of 4 batches or more; or one pass
    batches.shadow(con, ident(con.execute("SELECT current_database()").fetchall()[0][0]), tmp_path)
    folders = sorted(d.name for d in (tmp_path / "base" / "steps").iterdir() if d.is_dir())
    assert folders and set(folders) <= {str(b) for b in range(n)}  # batches with rows only; the groups are gone
    if open_files < n:  # a group's batches outnumber the files open at once: closed and reopened as new parts
        assert any(len(list(d.glob("part-*.parquet"))) > 1 for d in (tmp_path / "base").glob("*/*") if d.is_dir())
    cur = con.cursor()
    seen = dict.fromkeys(batches.SHADOWED, 0)
    for b in range(n):
        batches.select_batch(cur, tmp_path, b)
        for name in batches.SHADOWED:
            assert cur.execute(f"DESCRIBE {name}").fetchall() == con.execute(f"DESCRIBE {name}").fetchall()
            want = con.execute(f"SELECT t.* FROM {name} AS t JOIN export_batch_plan AS p ON p.run_id = t.run_id "
                               f"AND p.episode_id = t.episode_id WHERE p.batch = {b}").fetchall()
            got = cur.execute(f"SELECT * FROM {name}").fetchall()
            assert sorted(got, key=repr) == sorted(want, key=repr)
            seen[name] += len(got)
    for name, rows in seen.items():  # every scoped row in exactly one batch
        assert rows == con.execute(f"SELECT count(*) FROM {name} WHERE run_id IN (SELECT run_id FROM export_scope)"
                                   ).fetchone()[0], name
    assert seen["steps"] > 0 and seen["observations"] > 0


def _watch_direct(monkeypatch) -> list[bool]:
    """What batches.direct answered for each export from here on (the record kinds' path taken)."""
    from shopsim_wh.export import batches

    seen: list[bool] = []
    real = batches.direct

    def watched(*args):
        seen.append(real(*args))
        return seen[-1]

    monkeypatch.setattr(batches, "direct", watched)
    return seen


@pytest.mark.parametrize("kind,fmt", [("shopsimrl-v4", "jsonl"), ("atif", "parquet")])
def test_record_kinds_written_directly_give_the_spill_paths_bytes(kind, fmt, export_con, tmp_path, monkeypatch):
    """A record kind planned as sample_id ranges and written straight to its shards in batch order (no spill:
    batches.plan_records) gives the bytes of the spill path, which a --where over more episodes than one shard
    holds still takes: several batches, several shards, privacy scrubbing and dump-writer fallbacks included."""
    seen = _watch_direct(monkeypatch)
    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", str(BATCH))
    n = export_con.execute("SELECT count(*) FROM episodes").fetchone()[0]
    shard_rows = n // 3
    direct = export(kind, export_con, tmp_path / "direct", format=fmt, shard_rows=shard_rows)
    spilled = export(kind, export_con, tmp_path / "spill", format=fmt, shard_rows=shard_rows, where="true")
    assert seen == [True, False]
    assert len(direct.shards) > 2 and direct.shards == spilled.shards and direct.rows == spilled.rows == n
    for s in direct.shards:
        assert (tmp_path / "direct" / s["file"]).read_bytes() == (tmp_path / "spill" / s["file"]).read_bytes()
    m_direct, m_spill = (json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("direct", "spill"))
    assert m_direct["rows_selected"] == m_spill["rows_selected"] == n
    assert m_direct["columns"] == m_spill["columns"]


@pytest.mark.parametrize("where", ["status = 'completed' AND reward > 0", "false"])
def test_record_kind_with_a_where_in_one_shard_is_written_directly(where, export_con, tmp_path, monkeypatch):
    """With a --where, a record kind whose episodes fit one shard is still written directly (a subset of each
    batch's planned episodes), with the bytes of the spill path; no row at all gives the same empty shard."""
    from shopsim_wh.export import batches

    seen = _watch_direct(monkeypatch)
    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", str(BATCH))
    direct = export("shopsimrl-v4", export_con, tmp_path / "direct", format="parquet", where=where)
    monkeypatch.setattr(batches, "direct", lambda *a: False)
    spilled = export("shopsimrl-v4", export_con, tmp_path / "spill", format="parquet", where=where)
    assert seen == [True]
    assert direct.shards == spilled.shards and direct.rows == spilled.rows
    assert (direct.rows > 0) == (where != "false")
    assert (tmp_path / "direct" / direct.shards[0]["file"]).read_bytes() == (
        tmp_path / "spill" / spilled.shards[0]["file"]).read_bytes()


def test_a_record_view_with_other_sample_ids_is_refused():
    """A record kind's batches are ranges of the sample_id batches.record_sample_id spells: a batch whose rows
    carry other ids, or come out of order, would be written out of order; it is refused, saying what to fix."""
    import pyarrow as pa

    from shopsim_wh.export import ExportError, batches
    from shopsim_wh.export.registry import get_kind

    spec = get_kind("atif")
    planned = ["a", "b", "c"]
    batches.check_planned(spec, pa.table({"sample_id": planned}), planned, every=True)
    batches.check_planned(spec, pa.table({"sample_id": ["a", "c"]}), planned, every=False)
    for got, every in ((["a", "c"], True), (["c", "a"], False), (["a", "x"], False), (["a", "a"], False)):
        with pytest.raises(ExportError, match=r"sample_id must be md5\(run_id \|\| '/' \|\| episode_id \|\| ':atif'\)"):
            batches.check_planned(spec, pa.table({"sample_id": got}), planned, every=every)


@pytest.mark.parametrize("kind,fmt", [("shopsimrl-v4", "jsonl"), ("sft-action", "parquet")])
def test_batches_on_parallel_cursors_give_the_bytes_and_leave_the_threads(kind, fmt, export_con, tmp_path,
                                                                          monkeypatch):
    """Batches computed on two cursors at once (DuckDB's pool shrunk to the cores they leave: core._pool) give the
    bytes of one cursor, and the connection's own thread setting is back afterwards."""
    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", str(BATCH))
    before = export_con.execute("SELECT current_setting('threads')").fetchone()[0]
    export_con.execute("SET threads = 3")
    try:
        monkeypatch.setenv("SHOPSIM_WH_EXPORT_THREADS", "1")
        one = export(kind, export_con, tmp_path / "one", format=fmt, shard_rows=7)
        monkeypatch.setenv("SHOPSIM_WH_EXPORT_THREADS", "2")
        two = export(kind, export_con, tmp_path / "two", format=fmt, shard_rows=7)
        assert export_con.execute("SELECT current_setting('threads')").fetchone()[0] == 3
    finally:
        export_con.execute(f"SET threads = {int(before)}")
    assert len(one.shards) > 1 and two.shards == one.shards and two.rows == one.rows > 0
    for s in one.shards:
        assert (tmp_path / "two" / s["file"]).read_bytes() == (tmp_path / "one" / s["file"]).read_bytes()


def test_batches_copy_only_the_columns_a_kind_reads(export_con):
    """batches.shadow_columns: every SQL kind's batches copy a strict subset of the base columns (those its SQL
    names), which bind to the same columns and types (test_many_batches_give_the_bytes_of_one: the same bytes);
    record kinds copy everything (their fallback records are built in Python from the batch's views)."""
    from shopsim_wh.engines.db import ident
    from shopsim_wh.export.core import blocks_of
    from shopsim_wh.export.registry import get_kind

    db = ident(export_con.execute("SELECT current_database()").fetchall()[0][0])
    for k in list_kinds():
        spec = get_kind(k.name)
        keep = batches.shadow_columns(export_con, db, spec, blocks_of(spec))
        if spec.record:
            assert keep is None, k.name
            continue
        assert keep is not None, k.name
        full = {n: [r[0] for r in export_con.execute(f"DESCRIBE {db}.main.{n}").fetchall()] for n in batches.SHADOWED}
        assert all(set(keep[n]) <= set(full[n]) for n in full)
        assert sum(map(len, keep.values())) < sum(map(len, full.values())), k.name
    assert "payload" not in batches.shadow_columns(export_con, db, get_kind("sft-action"),
                                                   blocks_of(get_kind("sft-action")))["observations"]


def test_the_shard_writer_holds_one_shard_and_refuses_rows_out_of_shard_order(tmp_path):
    """write_shards finishes a shard when the next starts (its memory is one shard's pending rows, however many
    shards), gives shards with no row their empty file, and refuses a row of a shard it has already finished."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shopsim_wh.export.writer import DUP, SHARD, write_shards

    def batch(shards):
        n = len(shards)
        return pa.record_batch({"sample_id": [f"s{i}" for i in range(n)], "run_id": ["r"] * n, "task_id": [1] * n,
                                SHARD: pa.array(shards, pa.int32()), DUP: [1] * n})

    b = batch([0, 0, 2, 2, 2])
    stats = write_shards(pa.RecordBatchReader.from_batches(b.schema, [b, batch([2, 4])]), tmp_path, 5, "parquet", None)
    assert [s.rows for s in stats.shards] == [2, 0, 4, 0, 1]
    assert [pq.read_metadata(tmp_path / (".tmp-" + s.file)).num_rows for s in stats.shards] == [2, 0, 4, 0, 1]
    out = tmp_path / "bad"
    out.mkdir()
    with pytest.raises(RuntimeError, match="rows of shard 0 after shard 1"):
        write_shards(pa.RecordBatchReader.from_batches(b.schema, [batch([1]), batch([0])]), out, 2, "parquet", None)


def test_the_jsonl_writer_writes_each_line_in_place_with_its_hash_and_size(tmp_path):
    """JSONL shards are written line by line from the Arrow buffers (writev, IOV_MAX buffers a call): batches cut
    at shard changes (sliced arrays, non-zero offsets), more lines than one call takes, and a column with a null
    all give the joined lines' bytes, and the sha256 and size the writer reports are those of the file."""
    import hashlib

    import pyarrow as pa

    from shopsim_wh.export.writer import DUP, IOV_MAX, SHARD, publish, write_shards

    def batch(shards, lines):
        n = len(shards)
        return pa.record_batch({"sample_id": [f"s{i}" for i in range(n)], "run_id": ["r"] * n, "task_id": [1] * n,
                                "__line": pa.array(lines, pa.string()), SHARD: pa.array(shards, pa.int32()),
                                DUP: [1] * n})

    many = [f'{{"i":{i},"text":"{"é" * (i % 7)}"}}' for i in range(IOV_MAX + 37)]
    first = batch([0] * 3 + [1] * (len(many) - 3), many)
    last = batch([1, 1], ['{"last":1}', '{"last":2}'])
    stats = write_shards(pa.RecordBatchReader.from_batches(first.schema, [first, last]), tmp_path, 2, "jsonl", "__line")
    publish(tmp_path, stats)
    want = ["\n".join(many[:3]) + "\n", "\n".join(many[3:] + ['{"last":1}', '{"last":2}']) + "\n"]
    for shard, text in zip(stats.shards, want, strict=True):
        data = (tmp_path / shard.file).read_bytes()
        assert data == text.encode()
        assert (shard.sha256, shard.bytes) == (hashlib.sha256(data).hexdigest(), len(data))


def test_the_spill_is_read_without_the_metadata_cache_and_the_setting_comes_back(export_con, tmp_path, monkeypatch):
    """Phases 2-3 read the spill with DuckDB's Parquet metadata cache off (at 1M episodes it cached 13 GB of spill
    footers), and a caller's connection gets its own setting back."""
    seen = []
    count = batches.count

    def spy(con, buckets):
        seen.append(con.execute("SELECT current_setting('parquet_metadata_cache')").fetchone()[0])
        return count(con, buckets)

    monkeypatch.setattr(batches, "count", spy)
    export_con.execute("SET parquet_metadata_cache = true")
    res = export("sft-action", export_con, tmp_path / "a", where="true", shard_rows=3)
    assert res.rows > 0 and seen == [False]
    assert export_con.execute("SELECT current_setting('parquet_metadata_cache')").fetchone()[0] is True


def test_the_base_rows_copied_on_two_cursors_equal_the_copy_on_one(export_con, tmp_path, monkeypatch):
    """core._shadow copies the base views on two cursors at once: the same files (rows and Arrow types: a cursor
    with lossless Arrow conversion once wrote BOOLEAN as arrow.bool8, read back as TINYINT) as one after the
    other on the export's connection."""
    import pyarrow.parquet as pq

    shadow = batches.shadow
    copies: dict[str, dict] = {}

    def spy(con, db, spill, columns=None, each=None, *, mode):
        shadow(con, db, spill, columns, None if mode == "one" else each)
        assert (each is not None) == (batches.workers() > 1)
        copies[mode] = {str(f.relative_to(spill)): (pq.read_table(f).to_pylist(), pq.read_schema(f).types)
                        for f in sorted((spill / "base").glob("*/*/*.parquet"))}

    monkeypatch.setenv("SHOPSIM_WH_EXPORT_BATCH_EPISODES", str(BATCH))
    for mode in ("one", "two"):
        monkeypatch.setattr(batches, "shadow", lambda *a, mode=mode, **k: spy(*a, **k, mode=mode))
        export("shopsimrl-v4", export_con, tmp_path / mode, where="true")
    assert len(copies["one"]) > len(batches.SHADOWED) and copies["one"] == copies["two"]
