"""Parallel parsing: worker processes turn byte ranges of a JSONL file into Parquet files and Arrow tables.

Used by the v4 reader for large uncompressed files (``IngestOptions(parallel=True)``). The file is cut
into chunks of about ``flush_bytes`` at line boundaries; worker *k* (``python -m
shopsim_wh.ingest._pipeline``, independent of how the parent was started) parses chunks k, k+W,
k+2W, ... with the reader's chunk function. The bulky tables (``STAGED``) it encodes to Parquet in the
warehouse's ``_staging/`` itself (the files carry no run id, which lives in the directory a commit moves
them to), so both cores encode; the small tables, which the parent renumbers across chunks, it writes as
one Arrow IPC file each (the parent memory-maps them) next to the chunk's pickled state in its private
temporary directory, and announces the chunk with one line on stdout. The parent reads the announcements
in chunk order, merges the state (attempt numbers, line numbers, fidelity counts) and commits. Payloads
go through files, not the pipe: a pipe is read in 64 KiB pieces, each waiting for the GIL. If the parent
dies, a worker's next announcement fails and it cleans up and exits; staged files it leaves are orphans
that ``vacuum`` removes.
"""

from __future__ import annotations

import gc
import json
import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa

from ..core.errors import IngestError
from ..store.warehouse import StagedFile

_FIELDS = ("source_file", "run_id", "load_id", "source_format", "experiment", "max_field_bytes", "max_record_bytes",
           "flush_every", "flush_bytes", "staging_dir")
STAGED = frozenset({"steps", "actions", "observations", "messages", "tools"})  # encoded by the workers


def chunk_bounds(path: Path, target: int) -> list[tuple[int, int]]:
    """``[(start, end), ...]`` covering the file, each ending just after a newline (or at EOF)."""
    size = path.stat().st_size
    out, start = [], 0
    with open(path, "rb") as f:
        while start < size:
            pos = start + target
            if pos >= size:
                out.append((start, size))
                break
            f.seek(pos)
            while True:
                block = f.read(1 << 20)
                if not block:
                    pos = size
                    break
                nl = block.find(b"\n")
                if nl >= 0:
                    pos += nl + 1
                    break
                pos += len(block)
            out.append((start, pos))
            start = pos
    return out


class _NoPandas:
    """Import hook of the worker processes: ``import pandas`` fails at once (pyarrow then skips its checks)."""

    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError("pandas is not used by ingest workers", name=name)
        return None


def worker_main(argv: list[str]) -> int:
    gc.disable()
    # pyarrow imports pandas (~0.3 s, when installed) on its first pa.array() of a list, only to ask whether
    # the list is a pandas object; this process never has one, so pandas is not importable here.
    sys.meta_path.insert(0, _NoPandas())
    import importlib

    from ..core.schema import conform
    from ..store.warehouse import stage_parquet
    from ._rows import Sink
    from .core import INGEST_ZSTD_LEVEL, UnitContext
    spec = json.loads(argv[0])
    out = sys.stdout
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None  # RAM-backed when available
    tmp = Path(tempfile.mkdtemp(prefix="shopsim-wh-ingest-", dir=shm))
    try:
        fn = getattr(importlib.import_module(spec["module"]), spec["function"])
        for idx, start, end in spec["chunks"]:
            ctx = UnitContext(path=Path(spec["path"]), companions=[], sink=Sink(spec["load_id"]), parallel=False,
                              **{k: spec[k] for k in _FIELDS})
            meta = fn(ctx, start, end)
            names = []
            for name, table in ctx.sink.flush():
                if name in STAGED and spec["staging_dir"]:
                    staged = stage_parquet(Path(spec["staging_dir"]), conform(name, table), INGEST_ZSTD_LEVEL,
                                           prefix=spec["load_id"])
                    names.append((name, str(staged.path), staged.rows))
                    continue
                with pa.OSFile(str(tmp / f"chunk-{idx:06d}-{name}.arrow"), "wb") as sink, \
                        pa.ipc.new_file(sink, table.schema) as w:  # Arrow IPC: the parent maps it, no copy
                    w.write_table(table)
                names.append((name, None, table.num_rows))
            f = tmp / f"chunk-{idx:06d}.pkl"
            f.write_bytes(pickle.dumps((names, meta), protocol=5))
            out.write(f"T {f}\n")
            out.flush()
        return 0
    except (BrokenPipeError, OSError):
        shutil.rmtree(tmp, ignore_errors=True)
        return 1
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it as IngestError
        try:
            out.write("X " + json.dumps(f"{type(e).__name__}: {e}") + "\n")
            out.flush()
        except OSError:
            pass
        shutil.rmtree(tmp, ignore_errors=True)
        return 1


def map_chunks(ctx, chunks: list[tuple[int, int]], module: str, function: str, workers: int = 2):
    """Yield ``(tables, meta)`` for every chunk, in file order, parsed by ``workers`` processes.

    ``tables`` is ``[(name, pa.Table | StagedFile), ...]``: the :data:`STAGED` tables arrive as Parquet
    files the worker wrote under ``ctx.staging_dir`` (when set)."""
    workers = max(1, min(workers, len(chunks)))
    base = {"path": str(ctx.path), "module": module, "function": function, **{k: getattr(ctx, k) for k in _FIELDS}}
    import os

    import shopsim_wh
    pkg_root = str(Path(shopsim_wh.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(x for x in (pkg_root, os.environ.get("PYTHONPATH")) if x)}
    procs = []
    for k in range(workers):
        spec = {**base, "chunks": [(i, s, e) for i, (s, e) in enumerate(chunks) if i % workers == k]}
        procs.append(subprocess.Popen([sys.executable, "-m", "shopsim_wh.ingest._pipeline", json.dumps(spec)],
                                      stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env))
    dirs: set[Path] = set()
    try:
        for i in range(len(chunks)):
            p = procs[i % workers]
            line = p.stdout.readline()
            kind, _, arg = line.rstrip("\n").partition(" ")
            if kind == "X":
                raise IngestError(f"{ctx.path}: {json.loads(arg)}")
            if kind != "T":
                raise IngestError(f"{ctx.path}: a parsing process ended without a result (exit {p.wait()})")
            f = Path(arg)
            dirs.add(f.parent)
            names, meta = pickle.loads(f.read_bytes())
            f.unlink()
            tables = []
            for name, staged_path, rows in names:
                if staged_path is not None:
                    tables.append((name, StagedFile(Path(staged_path), rows)))
                    continue
                t = f.with_name(f"{f.stem}-{name}.arrow")
                with pa.memory_map(str(t)) as src:
                    tables.append((name, pa.ipc.open_file(src).read_all()))
                t.unlink()  # the mapping stays valid until the table is dropped
            payload = (tables, meta)
            yield payload
            payload = None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            p.stdout.close()
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
