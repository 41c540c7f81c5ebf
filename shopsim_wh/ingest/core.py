"""``ingest()``: paths in, one atomic commit per ingested unit, a summary out.

Per unit (a file plus its companions): sha256 of the raw bytes -> ``run_id =
<source-or-format>.<hash[:12]>``. A hash already in ``runs`` is skipped (idempotent). So are other bytes holding
episode attempts a run of the same experiment and model already holds (a dumped run ingested back: status
``already_present``, see :func:`_same_attempts`). Otherwise the
reader streams rows into column buffers that are flushed to Parquet every few thousand records *inside
one* ``Writer.commit`` (the batches are a generator), so memory stays flat while the whole unit still
becomes visible at once; runs previously ingested from the same path are dropped in that same commit
(``replace_runs``). The ``runs`` row is the last batch written. A killed ingest publishes nothing for the
unit it was in (its staged files are invisible and vacuumed), so a re-run lands it exactly once.

Formats that land by a rule of their own (:class:`~.registry.Lander`: slime's rollout dumps and ShopSimRL's slime
training traces, :mod:`.slime`) claim their inputs before the per-file readers and commit them themselves; ShopSimRL
round directories (:mod:`.loop`) likewise.
"""

from __future__ import annotations

import gc
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .. import __version__
from ..core import crash
from ..core.errors import ShopsimError, WarehouseFullError
from ..core.names import check_name
from ..core.schema import TABLES
from ..store.ledger import Ledger
from ..store.warehouse import Warehouse
from ._io import DEFAULT_MAX_RECORD_BYTES, SIDECAR_NAMES, expand_paths, open_binary, probe_head, sha256_files
from ._io import max_record_bytes as resolve_max_record_bytes
from ._json import DEFAULT_MAX_FIELD_BYTES, cap
from ._rows import Sink, jdump
from .registry import LANDERS, Reader, detect, get_reader, landers

FLUSH_EPISODES = 2000  # readers flush their column buffers after this many records ...
FLUSH_BYTES = 32 * 1024 * 1024  # ... or this many input bytes, whichever comes first (flat memory)
EARLY_HASH_BYTES = 16 * 1024 * 1024  # smaller units are hashed before parsing (cheap skip of known bytes)
INGEST_ZSTD_LEVEL = 1  # bulk loads: zstd-1 (compaction rewrites at the warehouse's default level)


@dataclass
class FileResult:
    path: str
    format: str | None
    run_id: str | None
    # landed | skipped_same_hash | already_present | attached | unrecognised | no_valid_record | corrupt_archive
    # (the records decoded before the damage landed, if any) | failed
    status: str
    episodes: int = 0
    attempts: int = 0
    records: int = 0
    rejected: int = 0
    bytes: int = 0
    message: str = ""


@dataclass
class IngestSummary:
    files: list[FileResult] = field(default_factory=list)
    seconds: float = 0.0
    load_id: str | None = None

    @property
    def units_read(self) -> int:
        """Units that landed (new runs); see :attr:`units_already_present` for those the warehouse held."""
        return sum(1 for f in self.files if _landed(f))

    @property
    def episodes_landed(self) -> int:
        return sum(f.episodes for f in self.files)

    @property
    def records_rejected(self) -> int:
        return sum(f.rejected for f in self.files)

    @property
    def units_already_present(self) -> int:
        """Units whose bytes or episode attempts the warehouse already held (nothing of them was added)."""
        return sum(1 for f in self.files if f.status in ("skipped_same_hash", "already_present"))

    @property
    def bytes_read(self) -> int:
        return sum(f.bytes for f in self.files if _landed(f))

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict:
        return {
            "units_read": self.units_read, "episodes_landed": self.episodes_landed,
            "records_rejected": self.records_rejected, "units_already_present": self.units_already_present,
            "seconds": round(self.seconds, 3),
            "mb_per_s": round(self.mb_per_s, 1), "load_id": self.load_id,
            "files": [f.__dict__ for f in self.files],
        }


def _landed(f: FileResult) -> bool:
    """A unit that landed a run: ``landed``, or a corrupt archive whose records before the damage landed."""
    return f.status == "landed" or (f.status == "corrupt_archive" and f.episodes > 0)


@dataclass
class UnitContext:
    """What a reader gets: where it reads from and where its rows go."""

    path: Path
    companions: list[Path]
    source_file: str
    run_id: str
    load_id: str
    source_format: str
    experiment: str
    sink: Sink
    max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES  # longer lines / documents: one record_too_large row
    flush_every: int = FLUSH_EPISODES
    flush_bytes: int = FLUSH_BYTES
    on_bytes: Callable[[int], None] | None = None
    provenance: dict = field(default_factory=dict)
    run_fields: dict = field(default_factory=dict)
    ready: list = field(default_factory=list)  # finished (table, arrow) batches a reader hands over
    parallel: bool = False
    staging_dir: str | None = None  # the warehouse's _staging/: parsing workers write Parquet there directly
    episodes: int = 0
    attempts: int = 0
    records: int = 0
    rejected: int = 0
    fidelity_rows: int = 0  # import_fidelity rows so far, and the records they converted
    converted: int = 0
    held: list = field(default_factory=list)  # content batches held back until the unit has a valid record
    streaming: bool = False  # content has been handed to the commit (the unit lands, whatever follows)
    streams: list = field(default_factory=list)  # opened inputs (a cut-short .gz / .zst says so)
    truncation_reported: bool = False
    # runs already stored, by experiment: [(run_id, source_format, model_name, checkpoint_id)]; their attempts
    # are compared with this unit's (``_same_attempts``) when one has this unit's experiment
    known_runs: dict = field(default_factory=dict)
    stored_keys: Callable[[str], np.ndarray] | None = None  # run id -> its attempt keys (attempt_keys)
    attempt_keys: list | bool | None = None  # this unit's attempt keys (arrays); False: no known run to compare
    unit: dict = field(default_factory=dict)  # the ingest loop's: sha, replace (runs this unit replaces)

    def watch(self, stream):
        """Remember an opened input: if it was cut short (its decoder found it corrupt), its torn last record (or,
        when the cut fell between records, one extra row at the end) is reported as ``truncated_file``
        (``corrupt_archive``), not ``torn_line``."""
        self.streams.append(stream)
        return stream

    def truncation(self) -> tuple[int, str, str] | None:
        """``(decoded bytes, message, error_class)`` of a watched input cut short or corrupt (:func:`_io.damage`)."""
        from ._io import damage

        for st in self.streams:
            if (d := damage(st)) is not None:
                return st.pos, d[1], d[0]
        return None

    def error(self, line: int | None, offset: int | None, error_class: str, message: str,
              source_file: str | None = None, rejected: bool = True) -> None:
        """One ingest_errors row; ``rejected=False`` for notes on records that still landed (BOM)."""
        if error_class in ("torn_line", "truncated_file", "empty_file") and (cut := self.truncation()) is not None:
            if self.truncation_reported:
                return
            error_class, message, self.truncation_reported = cut[2], cut[1], True
        self.sink.add("ingest_errors", {
            "source_file": source_file or self.source_file, "line": line, "byte_offset": offset,
            "error_class": error_class, "message": cap(message),
        })
        if rejected:
            self.rejected += 1

    def too_large(self, line: int, offset: int, tl, terminated: bool, source_file: str | None = None) -> None:
        """The row of a line past ``max_record_bytes`` (an :class:`~._io.TooLarge`): ``record_too_large``, or
        ``truncated_file`` when it is the unterminated tail of a cut-short archive."""
        cut = not terminated and self.truncation() is not None
        self.error(line, offset, "truncated_file" if cut else "record_too_large", tl.message(self.max_record_bytes),
                   source_file=source_file)

    def fidelity(self, unit: str, total: int, converted: int, kept_raw: int, dropped: int,
                 source_file: str | None = None) -> None:
        assert converted + kept_raw + dropped == total, (unit, total, converted, kept_raw, dropped)
        self.fidelity_rows += 1
        self.converted += converted
        self.sink.add("import_fidelity", {
            "source_file": source_file or self.source_file, "unit": unit, "records_total": total,
            "converted": converted, "kept_raw": kept_raw, "dropped": dropped,
        })

    def episode_common(self) -> dict:
        return {"source_format": self.source_format, "source_file": self.source_file, "experiment": self.experiment}


_RUN_PREFIX_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def run_id_for(prefix: str, sha: str) -> str:
    p = _RUN_PREFIX_BAD.sub("-", prefix).lstrip("._-")[:100] or "ingest"
    return f"{p}.{sha[:12]}"


def _existing_runs(wh: Warehouse) -> tuple[dict[str, str], dict[str, list[str]], dict[str, list[tuple]]]:
    """(source_hash -> run_id, source_file -> [run_id], experiment -> [(run_id, source_format, model_name,
    checkpoint_id)]) from the current snapshot's runs files."""
    by_hash: dict[str, str] = {}
    by_file: dict[str, list[str]] = {}
    by_experiment: dict[str, list[tuple]] = {}
    cols = ["source_hash", "source_file", "experiment", "source_format", "model_name", "checkpoint_id"]
    for e in wh.snapshot().files("runs"):
        t = pq.read_table(wh.open_input(e), columns=cols, schema=TABLES["runs"].arrow_schema)
        for h, f, x, fmt, model, ckpt in zip(*(t.column(c).to_pylist() for c in cols), strict=True):
            if h:
                by_hash[h] = e.run_id
            if f:
                by_file.setdefault(f, []).append(e.run_id)
            if x:
                by_experiment.setdefault(x, []).append((e.run_id, fmt, model, ckpt))
    return by_hash, by_file, by_experiment


# What identifies an episode attempt across a dump and its ingest: every one of these survives the round trip
# (dump_v4 writes them, the v4 reader reads them back to the same value), and together with the timestamps they
# tell two runs of one experiment apart. Attempt numbers are not in it (a dump renumbers nothing, but a file
# holding the attempts in another order would).
ATTEMPT_KEY = ("episode_id", "status", "reward", "started_at", "finished_at", "seed", "model_steps")


_KEY_SCHEMA = pa.schema([TABLES["episodes"].arrow_schema.field(c) for c in ATTEMPT_KEY])


def attempt_keys(table: pa.Table) -> np.ndarray:
    """One 64-bit key per ``episodes`` row (``ATTEMPT_KEY``; this process's ``hash``, compared in it only)."""
    t = table.select(list(ATTEMPT_KEY)).cast(_KEY_SCHEMA)
    cols = [t.column(c).to_pylist() for c in ATTEMPT_KEY]
    return np.fromiter((hash(k) for k in zip(*cols, strict=True)), np.int64, t.num_rows)


def _within(a: np.ndarray, b: np.ndarray) -> bool:
    """Multiset ``a`` contained in multiset ``b``."""
    ua, ca = np.unique(a, return_counts=True)
    ub, cb = np.unique(b, return_counts=True)
    pos = np.minimum(np.searchsorted(ub, ua), max(len(ub) - 1, 0))
    return bool(len(ub) and (ub[pos] == ua).all() and (cb[pos] >= ca).all()) or not len(ua)


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class IngestOptions:
    """How :func:`ingest` reads its inputs: the trace format, the run-id source, memory limits, parallelism.

    ``format`` is a reader name or ``"auto"`` (detected per file); ``source`` names the runs (run ids and
    ``runs.experiment``; default the reader's name). ``max_field_bytes`` caps one string field (larger records
    are rejected as ``oversized_field``); ``max_record_bytes`` (bytes, or ``"64MB"``; ``None``:
    ``$SHOPSIM_WH_MAX_RECORD_BYTES`` or 64 MiB) is the longest line, or input read as one JSON document, held in
    memory: a longer one is one ``record_too_large`` row, skipped while streaming. ``flush_every`` records or
    ``flush_bytes`` input bytes are buffered before their rows are encoded to Parquet (memory stays flat).
    ``parallel`` lets the v4 reader parse and encode files >= 64 MiB in two worker processes while this one
    commits (``flush_bytes`` is also the chunk size). slime dumps only (docs/ingest.md, "slime rollout dumps"):
    ``tokenizer`` names the tokenizer their token ids belong to (``training_samples.tokenizer_id``); ``traces`` are
    the directories their ShopSimRL traces are looked for in when the recorded paths do not exist here.
    """

    format: str = "auto"
    source: str | None = None
    max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES
    max_record_bytes: int | str | None = None
    flush_every: int = FLUSH_EPISODES
    flush_bytes: int = FLUSH_BYTES
    parallel: bool = True
    tokenizer: str | None = None
    traces: tuple[str, ...] = ()


def ingest(
    paths: Iterable[str | os.PathLike] | str | os.PathLike,
    warehouse: str | os.PathLike,
    options: IngestOptions | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> IngestSummary:
    """Ingest files / directories (recursive) / globs into the warehouse; see module docstring.

    ``options`` (:class:`IngestOptions`; default ``IngestOptions()``) say how to read them.
    ``progress(done_bytes, total_bytes)`` is called as input is consumed. Record-level problems
    become ``ingest_errors`` rows; a unit whose reader fails outright is reported in the summary
    (status ``failed``) and nothing of it is committed.
    """
    opts = options or IngestOptions()
    opts = replace(opts, max_record_bytes=resolve_max_record_bytes(opts.max_record_bytes))
    # The cyclic GC rescans the (large, acyclic) row buffers on every generation-2 pass: parsing with it
    # on is several times slower. Nothing here builds reference cycles; it is re-enabled on return.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _ingest(paths, warehouse, opts, progress)
    finally:
        if gc_was_enabled:
            gc.enable()


def _ingest(paths, warehouse, opts: IngestOptions, progress) -> IngestSummary:
    """``ingest`` with the garbage collector off and ``opts.max_record_bytes`` resolved to bytes."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    source = opts.source
    if source is not None:  # it becomes part of the run ids, so of partition paths: the one naming rule
        check_name(source, "ingest source name (--source)")
    t0 = time.perf_counter()
    started = _now()
    from .loop import FORMAT as LOOP_FORMAT
    from .loop import split_paths

    rounds, paths = split_paths(paths, opts.format)  # ShopSimRL round directories (loop.py); the rest: trace readers
    claimed = []  # formats that land by a rule of their own (slime dumps and their traces: slime.py)
    for lander in landers():
        work, paths = lander.claim(paths, opts.format)
        if work is not None:
            claimed.append((lander, work))
    forced = None if opts.format in ("auto", LOOP_FORMAT, *LANDERS) else get_reader(opts.format)
    files = expand_paths(paths)
    summary = IngestSummary()
    load_id = f"ingest-{started.strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"
    summary.load_id = load_id

    # Plan units: the reader of each file, its companions; companion files are not units.
    plan: list[tuple[Path, object, list[Path]]] = []
    attached: dict[Path, Path] = {}
    sidecars: list[Path] = []
    for f in files:
        if f.name in SIDECAR_NAMES and forced is None:  # a v4 run's manifest / summary: it comes with its traces
            sidecars.append(f)
            continue
        reader = forced
        if reader is None:
            try:
                head, broken = probe_head(f)
                name = detect(head, f)
            except (OSError, EOFError, ValueError) as e:
                summary.files.append(FileResult(str(f), None, None, "failed", message=cap(f"cannot read: {e}")))
                continue
            if name is None and (broken or not head[:4096].strip()):  # nothing to detect: say why (empty, corrupt)
                plan.append((f, _EMPTY, []))
                continue
            if name is None:
                summary.files.append(FileResult(
                    str(f), None, None, "unrecognised",
                    message="content matches no trace format (formats: "
                    "shopsimrl-v4, agent-multi-turn, claude-code, openai-messages, atif); pass --format to force one"))
                continue
            reader = get_reader(name)
        comps = [c.resolve() for c in reader.companions(f)]
        for c in comps:
            attached[c] = f
        plan.append((f, reader, comps))
    plan = [(f, r, c) for f, r, c in plan if f not in attached]
    for c, main in attached.items():
        if c in files:
            summary.files.append(FileResult(str(c), None, None, "attached", message=f"part of {main}"))
    for c in sidecars:
        if c not in attached:
            summary.files.append(FileResult(str(c), None, None, "unrecognised", message=(
                f"{c.name} describes a run, it holds no records: ingest the traces.jsonl beside it (or the run "
                "directory) and it comes along")))

    total_bytes = sum(f.stat().st_size + sum(c.stat().st_size for c in comps) for f, _, comps in plan)
    done_bytes = 0
    wh = Warehouse(warehouse)
    committed_any = False
    ledger = Ledger(wh.root, load_id)
    with wh.writer() as w:
        if rounds:
            committed_any = _land_rounds(w, rounds, load_id, source, summary)
        for lander, work in claimed:
            results = lander.land(w, work, load_id, opts)
            summary.files += results
            committed_any = committed_any or any(_landed(r) for r in results)
        by_hash, by_file, by_experiment = _existing_runs(wh)
        for f, reader, comps in plan:
            size = f.stat().st_size + sum(c.stat().st_size for c in comps)
            res = FileResult(str(f), reader.name, None, "landed", bytes=size)
            summary.files.append(res)
            # The hash runs in a thread (hashlib releases the GIL) while the reader parses its first batch;
            # it decides run_id / skip before anything is written.
            hasher = _Hasher([f, *comps])
            source_file = str(f)
            unit = {}

            def decide(sha: str, res=res, reader=reader, source_file=source_file, unit=unit) -> str | None:
                if sha in by_hash:
                    res.status, res.run_id = "skipped_same_hash", by_hash[sha]
                    res.message = f"already ingested as run {by_hash[sha]}"
                    return None
                run_id = run_id_for(source or reader.name, sha)
                res.run_id = run_id
                unit.update(sha=sha, replace=sorted(set(by_file.get(source_file, [])) | ({run_id} & w.snap.run_ids())))
                return run_id

            on_bytes = _byte_counter(progress, done_bytes, size, total_bytes)
            ctx = UnitContext(
                path=f, companions=comps, source_file=source_file, run_id="", load_id=load_id,
                source_format=reader.name, experiment=source or reader.name, sink=Sink(load_id),
                max_field_bytes=opts.max_field_bytes, max_record_bytes=opts.max_record_bytes,
                flush_every=opts.flush_every, parallel=opts.parallel, flush_bytes=opts.flush_bytes,
                on_bytes=on_bytes if f.suffix not in (".gz", ".zst", ".zstd") else None, staging_dir=str(wh.staging_dir),
                known_runs=by_experiment, unit=unit,
                stored_keys=lambda run_id: attempt_keys(wh.read("episodes", list(ATTEMPT_KEY), run_id, w.snap)),
            )
            try:
                w.commit(_unit_batches(ctx, reader, hasher, decide, started, wait_first=size < EARLY_HASH_BYTES),
                         replace_runs=_Lazy(unit, "replace"), compression_level=INGEST_ZSTD_LEVEL)
            except WarehouseFullError as exc:
                _drop_staged(wh, load_id)
                landed = [r for r in summary.files if r.status == "landed" and r is not res]
                raise WarehouseFullError(
                    f"ingest stopped at {f}: {len(landed)} unit(s) landed before the disk filled "
                    f"({sum(r.episodes for r in landed)} episodes). {exc}") from exc
            except _AlreadyPresent as present:
                _drop_staged(wh, load_id)
                res.status, res.run_id = "already_present", present.run_id
                res.message = (f"already present as run {present.run_id}: it holds every one of these {present.attempts} "
                               "episode attempt(s) (same experiment, model and attempts); nothing added")
                done_bytes += size
                if progress:
                    progress(done_bytes, total_bytes)
                continue
            except _AlreadyIngested:
                _drop_staged(wh, load_id)
                done_bytes += size
                if progress:
                    progress(done_bytes, total_bytes)
                continue
            except (ShopsimError, OSError, EOFError, ValueError, KeyError, TypeError, AttributeError) as e:
                _drop_staged(wh, load_id)
                res.status = "failed"
                res.message = cap(f"{type(e).__name__}: {e}")
                done_bytes += size
                continue
            finally:
                hasher.join()
            sha = unit["sha"]
            run_id = res.run_id
            committed_any = True
            res.episodes, res.attempts, res.records, res.rejected = ctx.episodes, ctx.attempts, ctx.records, ctx.rejected
            crash.point("ingest.unit_committed")
            ledger.append({"writer": "ingest", "run_id": run_id, "snapshot": w.snap.version, "source_hash": sha,
                           "source_file": source_file, "episode_attempts": ctx.attempts,
                           "replaces": [r for r in unit.get("replace", []) if r != run_id]})
            if ctx.provenance.get("replaces_subset"):
                res.message = "replaces run(s) " + ", ".join(ctx.provenance["replaces_subset"]) + \
                    ": every episode attempt they held is in this one (a resumed run ingested again)"
            elif ctx.provenance.get("overlaps"):
                res.message = "holds every episode attempt of run(s) " + ", ".join(ctx.provenance["overlaps"]) + \
                    " (runner runs, kept) and more: those attempts are counted in both runs"
            if not ctx.episodes:
                res.status = "no_valid_record"
                res.message = (f"no valid {reader.name} record: {ctx.rejected} error row(s) landed, nothing else; "
                               f"see ingest_errors where run_id = '{run_id}'")
            if (broken := ctx.truncation()) is not None and broken[2] == "corrupt_archive":
                res.status = "corrupt_archive"
                res.message = cap((f"{ctx.episodes} episode(s) from before the damage landed; " if ctx.episodes
                                   else "") + broken[1])
            by_hash[sha] = run_id
            by_file[source_file] = [run_id]
            for r in unit.get("replace", []):
                for runs in by_experiment.values():
                    runs[:] = [x for x in runs if x[0] != r]
            if ctx.episodes:
                by_experiment.setdefault(ctx.experiment, []).append(
                    (run_id, reader.name, ctx.run_fields.get("model_name"), ctx.run_fields.get("checkpoint_id")))
            done_bytes += size
            if progress:
                progress(done_bytes, total_bytes)
        summary.seconds = time.perf_counter() - t0
        if committed_any:
            sink = Sink(load_id)
            sink.add("loads", {
                "command": "ingest", "started_at": started, "finished_at": _now(),
                "episodes_written": sum(f.attempts for f in summary.files), "status": "complete",
                "tool_version": __version__,
            })
            w.commit([(t, load_id, tab) for t, tab in sink.flush()])
            crash.point("ingest.load_recorded")
    summary.seconds = time.perf_counter() - t0
    return summary


def _land_rounds(w, rounds, load_id: str, source: str | None, summary: IngestSummary) -> bool:
    """ShopSimRL round directories (:mod:`.loop`), one atomic commit each; True when one landed."""
    from .loop import FORMAT as LOOP_FORMAT
    from .loop import ingest_rounds

    results = ingest_rounds(w, rounds, load_id, source, __version__)
    for r in results:
        summary.files.append(FileResult(r.path, LOOP_FORMAT, r.round_id, r.status, records=r.rows,
                                        message=cap(r.message)))
    return any(r.status == "landed" for r in results)


def _drop_staged(wh: Warehouse, load_id: str) -> None:
    """Parquet files parsing workers staged for a unit that is not committed (vacuum would get them later)."""
    for f in wh.staging_dir.glob(f"{load_id}-*.parquet"):
        f.unlink(missing_ok=True)


def _byte_counter(progress, base: int, size: int, total: int):
    cell = [base]

    def on_bytes(n: int) -> None:
        cell[0] += n
        if progress:
            progress(min(cell[0], base + size), total)

    return on_bytes


def _read_empty(ctx: UnitContext):
    with ctx.watch(open_binary(ctx.path)) as f:  # a corrupt / cut-short archive: its row says so instead
        f.read(65536)
    ctx.error(None, 0, "empty_file", "the file holds no records (format could not be detected)")
    ctx.fidelity("file", 0, 0, 0, 0)
    yield


_EMPTY = Reader(name="empty", description="an empty input file", sniff=lambda head, path: 0, read=_read_empty)


class _AlreadyIngested(Exception):
    pass


class _AlreadyPresent(Exception):
    def __init__(self, run_id: str, attempts: int):
        super().__init__(run_id)
        self.run_id, self.attempts = run_id, attempts


class _Hasher(threading.Thread):
    def __init__(self, paths: list[Path]):
        super().__init__(daemon=True)
        self.paths, self.sha, self.error = paths, None, None
        self.start()

    def run(self) -> None:
        try:
            self.sha = sha256_files(self.paths)
        except BaseException as e:  # noqa: BLE001 - re-raised in the ingesting thread
            self.error = e

    def result(self) -> str:
        self.join()
        if self.error is not None:
            raise self.error
        return self.sha


class _Lazy:
    """``replace_runs`` known only once the hash is: ``Writer.commit`` iterates it after the batches."""

    def __init__(self, d: dict, key: str):
        self.d, self.key = d, key

    def __iter__(self):
        return iter(self.d.get(self.key, ()))


def _unit_batches(ctx: UnitContext, reader, hasher: _Hasher, decide, started: datetime, wait_first: bool):
    sha = None
    if wait_first:  # small files: no parsing for nothing when the bytes are already ingested
        sha = hasher.result()
        if (run_id := decide(sha)) is None:
            raise _AlreadyIngested
        ctx.run_id = run_id
    it = reader.read(ctx)
    try:
        for _ in it:
            if sha is None:
                sha = hasher.result()
                if (run_id := decide(sha)) is None:
                    raise _AlreadyIngested
                ctx.run_id = run_id
            yield from _drain(ctx)
    finally:
        it.close()
    if sha is None:
        sha = hasher.result()
        if (run_id := decide(sha)) is None:
            raise _AlreadyIngested
        ctx.run_id = run_id
    if not ctx.truncation_reported and (cut := ctx.truncation()) is not None:  # the cut fell between records
        ctx.error(None, cut[0], "truncated_file", cut[1])
    yield from _finish_unit(ctx, reader, sha, started)


DIAGNOSTIC_TABLES = ("ingest_errors", "import_fidelity")  # what a unit without a valid record still lands


def _has_valid_record(ctx: UnitContext) -> bool:
    """So far: some record was not rejected and, where the reader accounted for records, one was converted
    (a Claude Code file whose every line is kept raw or dropped holds no session)."""
    return ctx.records > ctx.rejected and not (ctx.fidelity_rows and not ctx.converted)


def _drain(ctx: UnitContext):
    crash.point("ingest.unit_parsed")
    """Hand finished batches to the commit. Content (episodes, steps, ...) waits in ``ctx.held`` until the
    unit has a valid record, so a file of garbage forced to a format lands its error rows and nothing else."""
    batches = [ctx.ready.pop(0) for _ in range(len(ctx.ready))] + list(ctx.sink.flush())
    for table, tab in batches:
        _note(ctx, table, tab)
        if ctx.streaming or table in DIAGNOSTIC_TABLES:
            yield table, ctx.run_id, tab
        else:
            ctx.held.append((table, tab))
    if ctx.held and _has_valid_record(ctx):
        ctx.streaming = True
        for table, tab in ctx.held:
            yield table, ctx.run_id, tab
        ctx.held.clear()


def _note(ctx: UnitContext, table: str, tab) -> None:
    """Keep the attempt keys of the unit's ``episodes`` rows while a stored run of its experiment may hold them."""
    if table != "episodes" or ctx.attempt_keys is False:
        return
    if ctx.attempt_keys is None:
        ctx.attempt_keys = [] if ctx.known_runs.get(ctx.experiment) else False
        if ctx.attempt_keys is False:
            return
    ctx.attempt_keys.append(attempt_keys(tab if isinstance(tab, pa.Table) else pq.read_table(tab.path)))


def _same_attempts(ctx: UnitContext) -> None:
    """Compare the unit's episode attempts with the stored runs of its experiment and model (not the runs it
    replaces as a new version of the same path): all of them in one run -> :class:`_AlreadyPresent` (nothing is
    added); every attempt of an ingested run in the unit, and more (a resumed run dumped again) -> that run is
    replaced in this commit; of a runner run -> both are kept (the runner's run is never dropped by an ingest)
    and the summary says so."""
    if not ctx.attempt_keys or ctx.stored_keys is None:
        return
    replace = set(ctx.unit.get("replace", ()))
    model = (ctx.run_fields.get("model_name"), ctx.run_fields.get("checkpoint_id"))
    mine = np.concatenate(ctx.attempt_keys)
    from ..rollout.committer import SOURCE_FORMAT as RUNNER_FORMAT
    for run_id, fmt, *run_model in ctx.known_runs.get(ctx.experiment, ()):
        if run_id in replace or tuple(run_model) != model:
            continue
        theirs = ctx.stored_keys(run_id)
        if _within(mine, theirs):
            raise _AlreadyPresent(run_id, len(mine))
        if len(theirs) and _within(theirs, mine):
            key = "overlaps" if fmt == RUNNER_FORMAT else "replaces_subset"
            ctx.provenance.setdefault(key, []).append(run_id)
    if ctx.provenance.get("replaces_subset"):
        ctx.unit["replace"] = sorted(replace | set(ctx.provenance["replaces_subset"]))


def _finish_unit(ctx: UnitContext, reader, sha: str, started: datetime):
    if not ctx.streaming and (ctx.episodes == 0 or not _has_valid_record(ctx)):  # land why, nothing else
        ctx.held.clear()
        ctx.episodes = ctx.attempts = 0
        if not ctx.rejected:
            ctx.error(None, None, "no_records", f"no {reader.name} record in this file ({ctx.records} record(s) "
                      f"read, none converted); check --format or the file")
        for table, tab in ctx.sink.flush():
            if table in DIAGNOSTIC_TABLES:
                yield table, ctx.run_id, tab
        return
    for table, tab in ctx.held:
        yield table, ctx.run_id, tab
    ctx.held.clear()
    rest = list(ctx.sink.flush())
    for table, tab in rest:
        _note(ctx, table, tab)
    _same_attempts(ctx)
    prov = {"ingest": {"reader": reader.name, "load_id": ctx.load_id,
                       "companions": [str(c) for c in ctx.companions]}}
    prov.update(ctx.provenance)
    row = {
        "experiment": ctx.experiment, "created_at": started, "source_format": reader.name,
        "source_file": ctx.source_file, "source_hash": sha, "tool_version": __version__,
        "provenance": jdump(prov), "planned_episodes": ctx.episodes,
    }
    for k, v in ctx.run_fields.items():
        if k in TABLES["runs"].column_names and v is not None:
            row[k] = v
    ctx.sink.add("runs", row)
    # runs last: every other table first, then the runs row
    batches = rest + list(ctx.sink.flush())
    for table, tab in sorted(batches, key=lambda b: b[0] == "runs"):
        yield table, ctx.run_id, tab
