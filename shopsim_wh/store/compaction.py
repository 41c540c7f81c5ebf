"""Merging a partition's files into a few large sorted ones with bounded memory (``Writer.compact``).

DuckDB reads the files (local or ``s3://``), sorts by the table's sort key under a memory limit (spilling
to a private temporary directory) and hands the sorted rows over as a stream
of Arrow record batches; pyarrow writes them in the table's declared schema (same zstd level, dictionary
columns and statistics as every other warehouse file), a row group at a time, starting a new file every
:data:`shopsim_wh.store.warehouse.COMPACT_FILE_TARGET_BYTES` of uncompressed data. Peak memory is DuckDB's
limit plus one row group, whatever the partition's size.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..core.crash import fs_event
from ..core.schema import DICTIONARY_COLUMNS, TABLES, conform
from .storage import unique_name

MEMORY_LIMIT = os.environ.get("SHOPSIM_WH_COMPACT_MEMORY") or "512MB"  # DuckDB's cap while sorting
BATCH_ROWS = 64 * 1024


@dataclass(frozen=True)
class FileLayout:
    """How the merged files are cut and written: uncompressed bytes per file and per row group, zstd level."""

    file_target_bytes: int
    row_group_bytes: int
    compression_level: int


def merge_sorted(wh, snap, select: str, table: str, staging_dir: Path, placed: list,
                 layout: FileLayout) -> Iterator[tuple[Path, int]]:
    """Yield ``(staged_path, rows)`` for the merged, sorted rows of ``select``: the caller's
    :func:`shopsim_wh.store.warehouse.staging_sql` over ``snap``, the files of one run and table (``wh.register`` makes
    them readable on the sorting connection), written as ``layout`` says.

    Each path is appended to ``placed`` as soon as it exists (the caller's all-or-nothing cleanup)."""
    import duckdb

    spec = TABLES[table]
    spill = Path(tempfile.gettempdir()) / f"shopsim-wh-compact-{uuid.uuid4().hex}"
    con = duckdb.connect()
    try:
        con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
        con.execute(f"SET temp_directory = '{str(spill).replace(chr(39), chr(39) * 2)}'")
        con.execute("SET threads = 2")
        con.execute("SET enable_progress_bar = false")  # a long sort would draw one on stdout
        wh.register(con, snap)
        order = ", ".join(f'"{k}"' for k in spec.sort_key)
        query = f"SELECT * EXCLUDE (run_id) FROM ({select}){' ORDER BY ' + order if order else ''}"
        rel = con.sql(query)
        reader = rel.to_arrow_reader(BATCH_ROWS) if hasattr(rel, "to_arrow_reader") else rel.fetch_record_batch(BATCH_ROWS)
        writer, path, rows, file_bytes = None, None, 0, 0
        buf: list[pa.RecordBatch] = []
        buf_bytes = 0

        def flush() -> None:
            nonlocal buf, buf_bytes, file_bytes, rows
            if not buf:
                return
            data = conform(table, pa.Table.from_batches(buf))
            writer.write_table(data, row_group_size=data.num_rows)
            rows += data.num_rows
            file_bytes += buf_bytes
            buf, buf_bytes = [], 0

        for batch in reader:
            if batch.num_rows == 0:
                continue
            if writer is None:
                path = Path(staging_dir) / unique_name()
                placed.append(path)
                fs_event("create", path)
                writer = pq.ParquetWriter(
                    path, spec.arrow_schema, compression="zstd", compression_level=layout.compression_level,
                    write_statistics=True, use_dictionary=[c for c in spec.column_names if c in DICTIONARY_COLUMNS])
            buf.append(batch)
            buf_bytes += batch.nbytes
            if buf_bytes >= layout.row_group_bytes or file_bytes + buf_bytes >= layout.file_target_bytes:
                flush()
            if file_bytes >= layout.file_target_bytes:
                writer.close()
                yield path, rows
                writer, rows, file_bytes = None, 0, 0
        if writer is not None:
            flush()
            writer.close()
            yield path, rows
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)
