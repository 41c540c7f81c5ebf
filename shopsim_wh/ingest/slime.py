"""slime's rollout dumps in, joined to the ShopSimRL traces they came from (issue 31; docs/ingest.md, "slime rollout
dumps").

``shopsim-wh ingest PATH [--format slime]``: PATH is a dump (``rollout_data_{rollout_id}.pt``, also
``rollout_data_eval_{id}.pt``: what ``--save-debug-rollout-data`` writes with ``torch.save``), a ShopSimRL slime
training output directory (``runs/slime-training/<round>/group-{g:09d}/rollout-{i}.json``, ``full-skill-retry.json``;
``triage.json`` is a group's failure triage, not an episode), or a directory holding either (found by content:
``.pt`` files with a ``torch.save`` header, trace files by their place in that layout).

**The run id rule** (one rule for both): a trace at ``<round>/group-…/rollout-N.json``, and every sample whose
``metadata.shopsim_trace_path`` ends so, belong to run ``slime-<round>`` (``<source>-<round>`` with ``--source``);
episode id ``train-group-{g:09d}-sample-{N:09d}``, ShopSimRL's own. A sample without a ShopSimRL trace path lands in
run ``slime.<first 12 hex of the dump's sha256>`` under the episode id built from its ``group_index`` and
``rollout_id``.

**The join**: a dump's samples point at their episode through that id; the trace is looked for as recorded, else by
its tail ``<round>/group-…/rollout-N.json`` under each ``--traces DIR`` (default: the dump's directory, and
``slime-training/`` and ``runs/slime-training/`` under it and under each of its ancestors). A trace found and not yet
in the warehouse lands in the dump's commit through the v4 reader (text tables as for any v4 trace). A sample whose
trace is missing still lands under the derived id and the file's message warns (counting them); the trace ingested
later lands in the same run under the same id and joins. Ingesting traces before or after their dump is the same.

**Idempotent**: a dump whose bytes are in ``training_samples.file_sha256`` is skipped (``skipped_same_hash``); the
samples of an episode that already has training samples are not added again; a trace whose episode attempt the run
holds (same ``episode_id``, status, reward, timestamps, seed, steps) adds nothing, and one with other content lands
as the episode's next attempt. One commit per dump and per round of traces; the run's ``runs`` row comes with the
first commit that creates the run.
"""

from __future__ import annotations

import glob
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from .. import __version__
from ..core.errors import IngestError
from ..core.names import check_name
from ..core.schema import TABLES
from ..store.ledger import Ledger
from ._io import expand_paths, sha256_files
from ._json import cap
from ._rows import Sink, jdump
from ._slime_samples import TRACE_TAIL, DumpFacts, Invalid, Key, Parsed, parse, rows
from ._torchsave import DumpRefused, check_size, load, looks_like_dump, max_dump_bytes
from .core import ATTEMPT_KEY, FileResult, UnitContext, attempt_keys
from .registry import Lander, register_lander

FORMAT = "slime"
V4_FORMAT = "shopsimrl-v4"
GROUP_DIR = re.compile(r"group-\d{9,}")
TRACE_NAME = re.compile(r"(rollout-\d+|full-skill-retry|triage)\.json")
TRAINING = ("training_samples", "training_tokens", "training_spans")
DUMP_SUFFIX = ".pt"
# what fails one dump or one round of traces (the rest still lands); a full disk or a lost lock stops the ingest
_FAILURES = (IngestError, OSError, EOFError, ValueError, KeyError, TypeError, AttributeError)


# ---- finding the inputs ---------------------------------------------------------------------------------------------


@dataclass
class Work:
    """What ``claim`` found: dumps, trace files of the slime training layout, and triage files (no episode)."""

    dumps: list[Path] = field(default_factory=list)
    traces: list[Path] = field(default_factory=list)
    triage: list[Path] = field(default_factory=list)

    def add(self, p: Path, strict: bool = False) -> bool:
        kind = _kind(p, strict)
        if kind is None:
            return False
        bucket = {"dump": self.dumps, "trace": self.traces, "triage": self.triage}[kind]
        if p.resolve() not in bucket:
            bucket.append(p.resolve())
        return True

    def __bool__(self) -> bool:
        return bool(self.dumps or self.traces or self.triage)


def _kind(p: Path, strict: bool = False) -> str | None:
    """``dump``, ``trace``, ``triage`` or None. A dump: a ``.pt`` file whose ``torch.save`` pickle starts as slime's
    does (``strict``, i.e. ``--format slime`` on the file itself: any ``.pt``, which then fails saying why)."""
    if p.suffix == DUMP_SUFFIX:
        return "dump" if strict or looks_like_dump(p) else None
    if TRACE_NAME.fullmatch(p.name) and GROUP_DIR.fullmatch(p.parent.name):
        return "triage" if p.name == "triage.json" else "trace"
    return None


def dump_files(paths) -> list[Path]:
    """The dumps among ``paths`` (files, directories walked, globs): for the CLI's "nothing to read" check."""
    out = []
    for raw in paths:
        s = str(raw)
        for p in ([Path(m) for m in sorted(glob.glob(s, recursive=True))] if glob.has_magic(s) else [Path(s)]):
            cands = sorted(p.rglob(f"*{DUMP_SUFFIX}")) if p.is_dir() else [p]
            out += [f for f in cands if f.is_file() and _kind(f) == "dump"]
    return out


def claim(paths, fmt: str = "auto") -> tuple[Work | None, list[str]]:
    """``(work, the paths left for the trace readers)``. With ``auto`` the dumps and the slime layout's trace files
    are taken (a directory holding some is split: the rest of its data files are passed on); with ``slime`` every
    path must be one (or a directory holding some), else :class:`IngestError`."""
    if fmt not in ("auto", FORMAT):
        return None, list(paths)
    work, rest = Work(), []
    for raw in paths:
        s = str(raw)
        matches = [Path(m) for m in sorted(glob.glob(s, recursive=True))] if glob.has_magic(s) else [Path(s)]
        for p in matches:
            if p.is_file():
                if work.add(p, strict=fmt == FORMAT):
                    continue
                if fmt == FORMAT:
                    raise IngestError(f"{p}: neither a slime rollout dump (a torch.save .pt file) nor a ShopSimRL "
                                      "slime trace (<round>/group-NNNNNNNNN/rollout-N.json); drop --format slime to "
                                      "detect its format")
                rest.append(str(p) if matches != [Path(s)] else s)
            elif p.is_dir():
                found = [f for f in sorted(p.rglob("*")) if f.is_file() and work.add(f)]
                if not found and fmt == FORMAT:
                    raise IngestError(f"{p}: holds no slime rollout dump (*.pt written by torch.save) and no ShopSimRL "
                                      "slime trace (<round>/group-NNNNNNNNN/rollout-N.json)")
                if not found:
                    rest.append(str(p) if matches != [Path(s)] else s)
                else:
                    taken = {f.resolve() for f in found}
                    rest += [str(f) for f in expand_paths([p]) if f not in taken]
            else:
                rest.append(s)  # the readers' path check says what it is
    return (work if work else None), rest


# ---- what the warehouse holds ---------------------------------------------------------------------------------------


class _State:
    """The warehouse as the slime commits of this invocation go: read once, updated after each commit."""

    def __init__(self, w):
        self.w = w
        self.runs_with_row = {e.run_id for e in w.snap.files("runs")}
        ts = w.wh.read("training_samples", ["episode_id", "file_sha256"], snap=w.snap)
        self.dump_hashes: dict[str, str] = {}
        self.sampled: set[tuple[str, str]] = set()
        for run_id, eid, sha in zip(*(ts.column(c).to_pylist() for c in ("run_id", "episode_id", "file_sha256")),
                                    strict=True):
            self.sampled.add((run_id, eid))
            if sha:
                self.dump_hashes.setdefault(sha, run_id)
        self._episodes: dict[str, dict[str, list[tuple[int, int]]]] = {}

    def episodes(self, run_id: str) -> dict[str, list[tuple[int, int]]]:
        """episode id -> [(attempt, attempt key)] of a run (read when first asked)."""
        if run_id not in self._episodes:
            t = self.w.wh.read("episodes", ["attempt", *ATTEMPT_KEY], run_id, self.w.snap)
            eps: dict[str, list[tuple[int, int]]] = defaultdict(list)
            for eid, att, key in zip(t.column("episode_id").to_pylist(), t.column("attempt").to_pylist(),
                                     attempt_keys(t), strict=True):
                eps[eid].append((att, int(key)))
            self._episodes[run_id] = eps
        return self._episodes[run_id]

    def last_attempt(self, run_id: str, eid: str) -> int | None:
        got = self.episodes(run_id).get(eid)
        return max(a for a, _ in got) if got else None


@dataclass
class _Land:
    """One invocation's slime landing: the writer, options, ledger and warehouse state."""

    w: object
    load_id: str
    opts: object
    state: _State
    ledger: Ledger
    now: datetime

    @property
    def prefix(self) -> str:
        return self.opts.source or FORMAT


def run_id_for(prefix: str, round_name: str) -> str:
    """The one run id rule: ``<prefix>-<round>`` (prefix ``slime`` or ``--source``)."""
    return check_name(f"{prefix}-{round_name}", "the slime run id (<source>-<round>)")


def land(w, work: Work, load_id: str, opts) -> list[FileResult]:
    """Land ``work`` with writer ``w``: each round's traces in one commit, then each dump in one commit."""
    ctx = _Land(w, load_id, opts, _State(w), Ledger(w.wh.root, load_id, "-slime"), datetime.now(UTC))
    results = []
    by_run: dict[str, list[Path]] = defaultdict(list)
    for f in work.traces:
        try:
            by_run[run_id_for(ctx.prefix, f.parent.parent.name)].append(f)
        except IngestError as e:
            results.append(FileResult(str(f), FORMAT, None, "failed", message=cap(str(e))))
    for run_id, files in by_run.items():
        results.append(_land_round(ctx, run_id, files))
    for f in work.triage:
        results.append(FileResult(str(f), FORMAT, None, "not_an_episode", message=(
            "a GRPO group's failure triage (shopsimrl-training-failure-triage-v1), not an episode: nothing lands")))
    for f in work.dumps:
        results.append(_land_dump(ctx, f))
    return results


# ---- traces ---------------------------------------------------------------------------------------------------------


@dataclass
class _Traces:
    """Rows of trace files read for one commit, by run: what the commit writes and what it tells."""

    tables: dict[str, dict[str, list]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    landed: dict[tuple[str, str], int] = field(default_factory=dict)  # (run, episode) -> attempt landed
    keys: dict[str, list[tuple[str, int, int]]] = field(default_factory=lambda: defaultdict(list))
    fields: dict[str, dict] = field(default_factory=dict)  # run -> runs columns from the first trace's provenance
    prov: dict[str, object] = field(default_factory=dict)
    present: int = 0
    rejected: int = 0


def _read_trace(ctx: _Land, f: Path, run_id: str, out: _Traces) -> None:
    """One trace file through the v4 reader into ``out`` (nothing when the run holds the same attempt)."""
    from .v4 import read_serial

    sink = Sink(ctx.load_id)
    uc = UnitContext(path=f, companions=[], source_file=str(f), run_id=run_id, load_id=ctx.load_id,
                     source_format=V4_FORMAT, experiment=run_id, sink=sink,
                     max_field_bytes=ctx.opts.max_field_bytes, max_record_bytes=ctx.opts.max_record_bytes)
    for _ in read_serial(uc):
        pass
    tables = dict(sink.flush())
    eps = tables.get("episodes")
    shift = 0
    if eps is not None and eps.num_rows:
        stored = ctx.state.episodes(run_id)
        keys = attempt_keys(eps)
        eid = eps.column("episode_id")[0].as_py()
        have = stored.get(eid, []) + [(a, k) for e, a, k in out.keys[run_id] if e == eid]
        if any(int(k) in {x for _, x in have} for k in keys):
            out.present += 1
            return
        shift = max((a for a, _ in have), default=0)
        for a, k in zip(eps.column("attempt").to_pylist(), keys, strict=True):
            out.keys[run_id].append((eid, a + shift, int(k)))
            out.landed[(run_id, eid)] = max(a + shift, out.landed.get((run_id, eid), 0))
    out.rejected += uc.rejected
    for table, t in tables.items():
        if shift and "attempt" in t.column_names:
            i = t.column_names.index("attempt")
            t = t.set_column(i, t.field(i), pc.add(t.column(i), pa.scalar(shift, pa.int16())))
        out.tables[run_id][table].append(t)
    if run_id not in out.fields and uc.run_fields.get("primary_reward"):
        out.fields[run_id] = dict(uc.run_fields)
        out.prov[run_id] = uc.provenance.get("v4", {}).get("record_provenance")


def _commit(ctx: _Land, out: _Traces, extra: dict[str, dict[str, list]], source: str, new_runs: bool = True) -> None:
    """One atomic commit of the traces' rows and ``extra`` rows (run -> table -> arrow tables), with a ``runs`` row
    for every run the warehouse does not have yet (``new_runs``; not for error rows alone); then the ledger line of
    each run."""
    now = ctx.now
    runs = sorted(set(out.tables) | set(extra))
    for run_id in runs:  # the stored attempts, read before this commit adds to them
        ctx.state.episodes(run_id)
    batches = []
    for run_id in runs:
        merged: dict[str, list] = defaultdict(list)
        for src in (out.tables.get(run_id, {}), extra.get(run_id, {})):
            for table, parts in src.items():
                merged[table] += parts
        if new_runs and run_id not in ctx.state.runs_with_row:
            sink = Sink(ctx.load_id)
            sink.add("runs", _runs_row(run_id, source, out.fields.get(run_id), out.prov.get(run_id), now))
            merged["runs"] += [t for _, t in sink.flush()]
        for table, parts in merged.items():
            batches.append((table, run_id, pa.concat_tables(parts) if len(parts) > 1 else parts[0]))
    ctx.w.commit(batches)
    for run_id in runs:
        if new_runs:
            ctx.state.runs_with_row.add(run_id)
        eps = ctx.state.episodes(run_id)
        for eid, att, key in out.keys.get(run_id, []):
            eps[eid].append((att, key))
        ctx.ledger.append({"writer": "ingest", "run_id": run_id, "snapshot": ctx.w.snap.version,
                           "source_hash": None, "source_file": source, "replaces": [],
                           "episode_attempts": sum(len(v) for v in eps.values())})


def _runs_row(run_id: str, source: str, fields: dict | None, record_prov, now: datetime) -> dict:
    row = {"experiment": run_id, "created_at": now, "source_format": FORMAT, "source_file": source,
           "source_hash": None, "tool_version": __version__, "primary_reward": "r_strict",
           "provenance": jdump({"slime": {"run_id_rule": "<source or slime>-<round>: the round directory of the "
                                          "ShopSimRL trace path (docs/ingest.md, slime rollout dumps)"},
                                "v4": {"record_provenance": record_prov}})}
    for k, v in (fields or {}).items():  # no fingerprint: a training round is no evaluation run to pair in a gate,
        # and its records' provenance differs per GRPO group (the skill assignment)
        if k in TABLES["runs"].column_names and v is not None and k not in _NOT_FROM_TRACE:
            row[k] = v
    return row


_NOT_FROM_TRACE = ("provenance", "source_format", "fingerprint", "fingerprint_fields")


def _land_round(ctx: _Land, run_id: str, files: list[Path]) -> FileResult:
    root = files[0].parent.parent
    res = FileResult(str(root), FORMAT, run_id, "landed", bytes=sum(f.stat().st_size for f in files))
    out = _Traces()
    try:
        for f in sorted(files):
            _read_trace(ctx, f, run_id, out)
        n = len(out.keys.get(run_id, []))
        if not out.tables:
            res.status = "already_present"
            res.message = f"run {run_id}: all {out.present} trace(s) are in the warehouse already; nothing added"
            return res
        _commit(ctx, out, {}, str(root))
    except _FAILURES as e:
        res.status, res.message = "failed", cap(f"{type(e).__name__}: {e}")
        return res
    res.episodes = len({e for e, _, _ in out.keys.get(run_id, [])})
    res.attempts, res.records, res.rejected = n, len(files) - out.present, out.rejected
    res.message = (f"run {run_id}: {n} trace(s) landed as episodes" +
                   (f", {out.present} already in the warehouse" if out.present else ""))
    return res


# ---- dumps ----------------------------------------------------------------------------------------------------------


def trace_roots(dump: Path, given: tuple[str, ...] = ()) -> list[Path]:
    """Where a dump's traces are looked for by their tail ``<round>/group-…/rollout-N.json``: each ``--traces``
    directory (itself, its ``slime-training/`` and ``runs/slime-training/``); by default the dump's directory, and
    ``slime-training/`` and ``runs/slime-training/`` under it and under each of its ancestors."""
    if given:
        return [r for g in given for r in (Path(g), Path(g) / "slime-training", Path(g) / "runs" / "slime-training")]
    here = dump.resolve().parent
    return [here] + [r for a in (here, *here.parents) for r in (a / "slime-training", a / "runs" / "slime-training")]


def _resolve(p: Parsed, roots: list[Path]) -> Path | None:
    if p.trace_path and Path(p.trace_path).is_file():
        return Path(p.trace_path)
    for r in roots if p.tail else ():
        if (c := r / p.tail).is_file():
            return c
    return None


def _tokenizer(spec: str | None) -> tuple[str | None, str | None]:
    """``(tokenizer_id, tokenizer_hash)`` for ``--tokenizer``: the built-in one's hash, a tokenizer directory's when
    the tokenizer seam can load it, else no hash."""
    if not spec:
        return None, None
    from ..core import tokenizer as tok

    if spec == tok.BUILTIN_ID:
        return spec, tok.builtin().sha256
    loader = getattr(tok, "load", None)
    if loader is not None and Path(spec).is_dir():
        t = loader(spec)
        return getattr(t, "id", spec), t.sha256
    return spec, None


def _land_dump(ctx: _Land, path: Path) -> FileResult:
    res = FileResult(str(path), FORMAT, None, "landed", bytes=path.stat().st_size)
    limit = max_dump_bytes()
    try:
        check_size(path, limit)  # before hashing: a 20 GB checkpoint is refused at once
    except DumpRefused as e:
        res.status, res.message = "failed", str(e)
        return res
    sha = sha256_files([path])
    if sha in ctx.state.dump_hashes:
        res.status, res.run_id = "skipped_same_hash", ctx.state.dump_hashes[sha]
        res.message = f"already ingested (its samples are in run {res.run_id})"
        return res
    try:
        doc, _reader = load(path, limit)
        rollout_step, samples = _dump_shape(path, doc)
        tid, thash = _tokenizer(ctx.opts.tokenizer)
        facts = DumpFacts(rollout_step, str(path.resolve()), sha, tid, thash)
        _dump_rows(ctx, path, samples, facts, res)
    except _FAILURES as e:
        res.status, res.message = "failed", cap(str(e) if isinstance(e, IngestError) else f"{type(e).__name__}: {e}",
                                                1000)
        return res
    ctx.state.dump_hashes[sha] = res.run_id or ""
    return res


def _dump_shape(path: Path, doc) -> tuple[int | None, list]:
    if not isinstance(doc, dict) or not isinstance(doc.get("samples"), list):
        raise DumpRefused(f"{path.name} is a torch.save file but not a slime rollout dump (a dict with a 'samples' "
                          "list of Sample.to_dict(), as --save-debug-rollout-data writes)")
    step = doc.get("rollout_id")
    return (step if type(step) is int else None), doc["samples"]


def _dump_rows(ctx: _Land, path: Path, samples: list, facts: DumpFacts, res: FileResult) -> None:
    """Check every sample, find the traces, build the rows and commit them (with the traces not yet landed)."""
    fallback = f"{ctx.prefix}.{facts.file_sha256[:12]}"
    errors: list[tuple[str, dict]] = []
    # an episode's samples in dump order; an invalid one keeps its place (sample_idx, steps) when it names its episode
    by_episode: dict[tuple[str, str], list[Parsed | Invalid]] = defaultdict(list)
    for i, s in enumerate(samples):
        try:
            p = parse(i, s)
            p.run_id = run_id_for(ctx.prefix, p.round) if p.round else fallback
            by_episode[(p.run_id, p.episode_id)].append(p)
        except (Invalid, IngestError) as e:
            run_id = _run_of(ctx, s, fallback)
            if isinstance(e, Invalid) and e.episode is not None:
                by_episode[(run_id, e.episode[1])].append(e)
            errors.append((run_id, {"source_file": facts.source_file, "line": i, "byte_offset": None,
                                    "error_class": "invalid_sample", "message": cap(f"sample {i}: {e}")}))
    out, roots = _Traces(), trace_roots(path, tuple(ctx.opts.traces or ()))
    missing, missing_samples, first_missing, skipped = 0, 0, None, 0
    for (run_id, eid), group in by_episode.items():
        valid = [p for p in group if isinstance(p, Parsed)]
        if (run_id, eid) in ctx.state.sampled or not valid or not valid[0].trace_path:
            continue
        if ctx.state.last_attempt(run_id, eid) is None and (run_id, eid) not in out.landed:
            f = _resolve(valid[0], roots)
            if f is not None:
                _read_trace(ctx, f, run_id, out)
            if ctx.state.last_attempt(run_id, eid) is None and (run_id, eid) not in out.landed:
                missing, missing_samples = missing + 1, missing_samples + len(valid)
                first_missing = first_missing or valid[0].trace_path
    extra: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # run -> [samples landed, dropped]
    for (run_id, eid), group in by_episode.items():
        valid = [p for p in group if isinstance(p, Parsed)]
        if (run_id, eid) in ctx.state.sampled:
            skipped += len(valid)
            counts[run_id][1] += len(valid)
            continue
        attempt = out.landed.get((run_id, eid)) or ctx.state.last_attempt(run_id, eid) or 1
        sinks, steps = Sink(ctx.load_id), 0
        for idx, p in enumerate(group):
            if isinstance(p, Invalid):  # its error row is written below; the later samples keep their steps
                steps = None if steps is None or p.model_turns is None else steps + p.model_turns
                continue
            try:
                sample, tokens, spans, n = rows(p, Key(run_id, eid, attempt, idx), facts, steps)
            except Invalid as e:
                errors.append((run_id, {"source_file": facts.source_file, "line": p.pos, "byte_offset": None,
                                        "error_class": "invalid_sample", "message": cap(f"sample {p.pos}: {e}")}))
                continue
            steps = None if steps is None else steps + n
            sinks.add("training_samples", sample)
            sinks.add("training_tokens", tokens)
            for s in spans:
                sinks.add("training_spans", s)
            counts[run_id][0] += 1
        for table, t in sinks.flush():
            extra[run_id][table].append(t)
    for run_id, row in errors:
        counts[run_id][1] += 1
        s = Sink(ctx.load_id)
        s.add("ingest_errors", row)
        extra[run_id]["ingest_errors"] += [t for _, t in s.flush()]
    for run_id, (landed, dropped) in counts.items():
        s = Sink(ctx.load_id)
        s.add("import_fidelity", {"source_file": facts.source_file, "unit": f"rollout {facts.rollout_step}",
                                  "records_total": landed + dropped, "converted": landed, "kept_raw": 0,
                                  "dropped": dropped})
        extra[run_id]["import_fidelity"] += [t for _, t in s.flush()]
    landed = sum(c[0] for c in counts.values())
    res.run_id = ",".join(sorted(r for r, c in counts.items() if c[0])) or None
    res.records, res.rejected = landed, len(errors) + out.rejected
    episodes = sum(1 for g in by_episode.values() if any(isinstance(p, Parsed) for p in g))
    res.episodes = res.attempts = sum(len(v) for v in out.keys.values())
    if not landed and not out.tables:
        res.status = "already_present" if skipped else "no_valid_record"
        res.message = (f"its {skipped} sample(s) are in the warehouse already (from another dump); nothing added"
                       if skipped else f"no valid sample among {len(samples)}: {len(errors)} error row(s) landed")
        if not skipped and errors:
            _commit(ctx, out, extra, facts.source_file, new_runs=False)
        return
    _commit(ctx, out, extra, facts.source_file)
    for key in by_episode:
        ctx.state.sampled.add(key)
    res.message = _dump_message(landed, episodes, res.run_id, out, errors, skipped,
                                (missing, missing_samples, first_missing))
    if res.rejected and errors:
        res.message += f"; {len(errors)} invalid sample(s) in ingest_errors"


def _run_of(ctx: _Land, s, fallback: str) -> str:
    """The run an invalid sample's error row goes to: its trace's run when the path says, else the fallback."""
    md = s.get("metadata") if isinstance(s, dict) else None
    path = md.get("shopsim_trace_path") if isinstance(md, dict) else None
    m = TRACE_TAIL.search(path) if isinstance(path, str) else None
    try:
        return run_id_for(ctx.prefix, m["round"]) if m else fallback
    except IngestError:
        return fallback


def _dump_message(landed: int, episodes: int, runs: str | None, out: _Traces, errors: list, skipped: int,
                  missing: tuple[int, int, str | None]) -> str:
    traces = len([k for v in out.keys.values() for k in v])
    parts = [f"{landed} sample(s) of {episodes} episode(s) landed in run {runs}"]
    if traces:
        parts.append(f"{traces} trace(s) landed with them")
    if skipped:
        parts.append(f"{skipped} sample(s) already in the warehouse from another dump, not added again")
    n_ep, n_s, first = missing
    if n_ep:
        parts.append(f"warning: {n_s} sample(s) of {n_ep} episode(s) have no trace here (first: {first}); they "
                     "landed under their derived episode ids and join once the traces are ingested "
                     "(shopsim-wh ingest runs/slime-training), or pass --traces DIR")
    return "; ".join(parts)


DESCRIPTION = ("slime --save-debug-rollout-data dumps (rollout_data_*.pt) joined to their ShopSimRL traces "
               "(runs/slime-training/<round>/group-*/rollout-*.json)")
register_lander(Lander(name=FORMAT, description=DESCRIPTION, claim=claim, land=land))
