"""The integrity checker: acknowledged (the ledger) vs stored (the current snapshot) vs planned (a config).

``check(root, plan_config=None)`` reads the snapshot's files directly (no views) and reports:

* **lost**: an episode attempt a ledger acknowledged that the warehouse does not hold (ingest: a unit
  holding fewer episode attempts than acknowledged). Must be zero.
* **duplicated**: an ``(run_id, episode_id, attempt)`` stored more than once, or an episode stored
  completed (``done``) in more than one attempt (resume ran a finished episode again). Must be zero.
* **unexpected**: a stored runner episode that is not in the plan (with ``plan_config``). Must be zero.
* **partial**: rows of a child table (steps, messages, ...) whose episode attempt is not in ``episodes``,
  or a runner episode whose ``model_steps`` differs from its ``steps`` rows. Must be zero.
* **unreadable**: a file the snapshot lists that is missing, has another size than recorded, is not Parquet,
  has columns other than its table declares, or holds another row count (:func:`inspect_file`, whose codes
  ``shopsim-wh doctor`` reports).
* informational: ``unacknowledged`` (stored, not in any ledger line: a crash between ``CURRENT`` and
  the ledger append; allowed), ``missing`` (planned, no completed attempt stored yet: resume runs them),
  ``stray`` (files no snapshot lists: ``vacuum`` removes them).

``shopsim-wh doctor`` runs this check and reports every failure above as a finding with its fix (and stray
files as ``orphan_*``): the two never disagree on a warehouse. Only ``canonical_diff`` (``--against``, a
comparison with another warehouse) is this command's alone.

``canonical_rows`` / ``compare_canonical``: the rows of a run without the columns that depend on timing (and
``runs.config`` without the execution fields), so a faulted run, or a run on Ray, can be compared with an
uninterrupted single-process one of the same config and seeds.
"""

from __future__ import annotations

import functools
import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from ..core.schema import PARTITION_KEY, TABLES
from ..rollout.committer import SOURCE_FORMAT as RUNNER_FORMAT
from ..store.ledger import read_ledger
from ..store.warehouse import Snapshot, Warehouse, location

# canonical: these columns depend on when and in which invocation a row was written, not on what happened
TIMING_COLUMNS = {"load_id", "duration_s", "latency_ms"}
NON_CANONICAL_TABLES = {"loads"}  # one row per invocation: a resumed run has more
PAYLOAD_TIMING_KEYS = {"idx"}  # observations.payload: the server's lease slot (which slot was free)


@dataclass
class CheckReport:
    root: str
    snapshot: int
    acknowledged: int = 0
    stored: int = 0
    planned: int | None = None
    plan_run: str | None = None  # the run the plan config names
    lost: list = field(default_factory=list)
    duplicated: list = field(default_factory=list)
    unexpected: list = field(default_factory=list)
    partial: list = field(default_factory=list)
    unreadable: list = field(default_factory=list)
    unacknowledged: int = 0
    missing: list = field(default_factory=list)
    torn_ledger_lines: int = 0
    stray: list = field(default_factory=list)  # files no snapshot lists (a killed writer's; the next writer deletes them)
    canonical_diff: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected or self.partial or self.unreadable
                    or self.canonical_diff)

    def as_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}

    @property
    def failures(self) -> int:
        return sum(map(len, (self.lost, self.duplicated, self.unexpected, self.partial, self.unreadable,
                             self.canonical_diff)))

    def summary(self) -> str:
        head = (f"snapshot {self.snapshot}: acknowledged {self.acknowledged}, stored {self.stored}"
                + (f", planned {self.planned}" if self.planned is not None else ""))
        counts = (f"lost {len(self.lost)}, duplicated {len(self.duplicated)}, unexpected {len(self.unexpected)}, "
                  f"partial {len(self.partial)}, unreadable {len(self.unreadable)}"
                  + (f", canonical differences in {sorted(self.canonical_diff)}" if self.canonical_diff else ""))
        info = (f"unacknowledged {self.unacknowledged} (allowed), missing {len(self.missing)} (resume runs them), "
                f"stray files {len(self.stray)} (`shopsim-wh vacuum` removes them)")
        return f"{head}\n{counts}\n{info}"


def inspect_file(wh: Warehouse, table: str, e) -> tuple[str, str] | None:
    """``(code, message)`` when snapshot file ``e`` of ``table`` is not as listed: ``file_missing``,
    ``file_size`` (local warehouses), ``file_unreadable`` (no Parquet footer), ``file_schema`` (columns other
    than the table declares for the file's schema version) or ``file_rows``; None when it is."""
    from ..core.schema import SCHEMA_VERSION

    if not wh.remote:
        p = wh.abspath(e)
        if not p.exists():
            return "file_missing", f"{table}: {e.path} is listed by the snapshot but absent"
        if (size := p.stat().st_size) != e.bytes:
            return "file_size", f"{table}: {e.path} has {size} bytes, the snapshot recorded {e.bytes} (truncated or overwritten)"
    try:
        meta = pq.read_metadata(wh.open_input(e))
    except FileNotFoundError:
        return "file_missing", f"{table}: {e.path} is listed by the snapshot but absent"
    except Exception as exc:  # noqa: BLE001 - any unreadable footer is the same finding
        return "file_unreadable", f"{table}: {e.path} has no readable Parquet footer ({type(exc).__name__}: {exc})"[:400]
    spec = TABLES.get(table)
    names = meta.schema.to_arrow_schema().names
    declared = spec.column_names if spec else []
    if spec is None or (e.schema_version == SCHEMA_VERSION and names != declared) or set(names) - set(declared):
        return "file_schema", (f"{table}: {e.path} has columns {names}, table {table!r} declares {declared} "
                               f"(schema version {e.schema_version})")[:400]
    if meta.num_rows != e.rows:
        return "file_rows", f"{table}: {e.path} holds {meta.num_rows} rows, the snapshot recorded {e.rows}"
    return None


def _readable(wh: Warehouse, snap: Snapshot, report: CheckReport) -> Snapshot:
    """The snapshot minus the files that cannot be read as listed (each reported)."""
    good: dict[str, list] = {}
    for table, entries in snap.tables.items():
        for e in entries:
            if (problem := inspect_file(wh, table, e)) is not None:
                report.unreadable.append({"path": e.path, "run_id": e.run_id, "code": problem[0], "error": problem[1]})
                continue
            good.setdefault(table, []).append(e)
    return Snapshot(snap.version, good, snap.pending_delete, snap.committed_at)


def planned_episodes(plan_config) -> tuple[str, list[str]]:
    """(run_id, planned episode ids) of a runner config (a path, or a loaded ``Config``), decided without a
    server."""
    if not isinstance(plan_config, (str, os.PathLike)):
        from ..rollout.runner import plan

        p = plan(plan_config)
        return p.run_id, [j.episode_id for j in p.jobs]
    return _planned(str(plan_config), os.stat(plan_config).st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _planned(path: str, _mtime: int) -> tuple[str, list[str]]:
    from ..core.config import load_config
    from ..rollout.runner import plan

    p = plan(load_config(path))
    return p.run_id, [j.episode_id for j in p.jobs]


def check(root: str | os.PathLike, plan_config=None, against: str | os.PathLike | None = None) -> CheckReport:
    """See the module docstring; ``plan_config`` is a config path or a loaded ``Config``, ``against`` an
    uninterrupted warehouse to compare canonical rows with."""
    wh = Warehouse(root)
    raw = wh.snapshot()
    report = CheckReport(str(root), raw.version)
    snap = _readable(wh, raw, report)
    eps = wh.read("episodes", ["episode_id", "attempt", "status", "done", "model_steps", "source_format"],
                  snap=snap).to_pylist()
    keys = Counter((e[PARTITION_KEY], e["episode_id"], e["attempt"]) for e in eps)
    report.stored = len(keys)
    report.duplicated = [list(k) for k, n in keys.items() if n > 1]
    # per distinct attempt: an attempt stored twice is one finding (above), not also two completed attempts
    done = Counter(k[:2] for k in {(e[PARTITION_KEY], e["episode_id"], e["attempt"]) for e in eps
                                   if e["status"] == "completed" and e["done"]})
    report.duplicated += [[*k, "completed in more than one attempt"] for k, n in done.items() if n > 1]

    entries, report.torn_ledger_lines = read_ledger(root)
    acked_eps: set[tuple] = set()
    acked_units: dict[str, int] = {}
    for entry in sorted(entries, key=lambda x: x.get("snapshot", 0)):
        if entry.get("writer") == "run":
            acked_eps |= {(entry["run_id"], eid, att) for eid, att, _ in entry["episodes"]}
        elif entry.get("writer") == "ingest":
            for gone in entry.get("replaces", []):
                acked_units.pop(gone, None)
            acked_units[entry["run_id"]] = entry["episode_attempts"]
    report.acknowledged = len(acked_eps) + sum(acked_units.values())
    report.lost = [list(k) for k in sorted(acked_eps - set(keys))]
    per_run = Counter(k[0] for k in keys)
    report.lost += [[run_id, f"{n - per_run[run_id]} of {n} acknowledged episode attempts"]
                    for run_id, n in sorted(acked_units.items()) if per_run[run_id] < n]
    runner_keys = {(e[PARTITION_KEY], e["episode_id"], e["attempt"]) for e in eps if e["source_format"] == RUNNER_FORMAT}
    runner_runs = {k[0] for k in runner_keys}
    report.unacknowledged = len(runner_keys - acked_eps) + sum(
        n for run_id, n in per_run.items() if run_id not in acked_units and run_id not in runner_runs)

    _check_partial(wh, snap, eps, set(keys), report)
    report.stray = stray_files(wh, raw)
    if plan_config is not None:
        run_id, planned = planned_episodes(plan_config)
        report.planned, report.plan_run = len(planned), run_id
        stored_ids = {k[1] for k in keys if k[0] == run_id}
        report.unexpected = sorted(stored_ids - set(planned))
        report.missing = sorted(set(planned) - {k[1] for k in done if k[0] == run_id})
        if against is not None and not report.unreadable:  # unreadable already fails; rows cannot be compared
            report.canonical_diff = compare_canonical(root, against, run_id)
    return report


def stray_files(wh: Warehouse, snap: Snapshot) -> list[str]:
    """Files under the warehouse that neither the snapshot nor its pending deletions list: staged or placed
    files of a commit that never became current, temporary catalog files."""
    live = {e.path for es in snap.tables.values() for e in es} | {i["path"] for i in snap.pending_delete}
    if wh.remote:  # no staging or temporary files in the bucket: uploaded objects no snapshot lists
        return sorted(rel for table in TABLES for rel, _, _ in wh.store.list(table)
                      if rel.endswith(".parquet") and rel not in live)
    out = [f.relative_to(wh.root).as_posix() for f in wh.staging_dir.glob("*")] if wh.staging_dir.is_dir() else []
    out += [f.relative_to(wh.root).as_posix() for f in wh.catalog_dir.glob(".*.tmp")]
    for table in TABLES:
        out += [rel for f in (wh.root / table).glob("*/*.parquet")
                if (rel := f.relative_to(wh.root).as_posix()) not in live]
    return sorted(out)


def _check_partial(wh: Warehouse, snap: Snapshot, eps: list[dict], keys: set, report: CheckReport) -> None:
    steps = Counter()
    for table, spec in TABLES.items():
        if table == "episodes" or not {"episode_id", "attempt"} <= set(spec.column_names):
            continue
        t = wh.read(table, ["episode_id", "attempt"], snap=snap)
        seen = Counter(zip(t.column(PARTITION_KEY).to_pylist(), t.column("episode_id").to_pylist(),
                           t.column("attempt").to_pylist(), strict=True))
        report.partial += [[table, *k, "no episodes row"] for k in sorted(set(seen) - keys)]
        if table == "steps":
            steps = seen
    for e in eps:
        k = (e[PARTITION_KEY], e["episode_id"], e["attempt"])
        if e["source_format"] == RUNNER_FORMAT and (e["model_steps"] or 0) != steps.get(k, 0):
            report.partial.append(["steps", *k, f"model_steps {e['model_steps']}, {steps.get(k, 0)} steps rows"])


def canonical_rows(root: str | os.PathLike, run_id: str) -> dict[str, list[str]]:
    """Per table, the run's rows as sorted JSON strings without :data:`TIMING_COLUMNS`, timestamps and the
    timing keys of ``observations.payload``: equal for two runs of one config and seeds however they were
    interrupted, resumed or scheduled."""
    wh = Warehouse(root)
    snap = wh.snapshot()
    key = (location(root), run_id, snap.version, snap.committed_at)
    if key not in _CANONICAL_CACHE:  # a reference warehouse is compared with many faulted ones
        while len(_CANONICAL_CACHE) >= 4:
            _CANONICAL_CACHE.pop(next(iter(_CANONICAL_CACHE)))
        _CANONICAL_CACHE[key] = _canonical(wh, snap, run_id)
    return _CANONICAL_CACHE[key]


_CANONICAL_CACHE: dict[tuple, dict[str, list[str]]] = {}


def _canonical(wh: Warehouse, snap: Snapshot, run_id: str) -> dict[str, list[str]]:
    out = {}
    for table, spec in TABLES.items():
        if table in NON_CANONICAL_TABLES:
            continue
        cols = [f.name for f in spec.arrow_schema if f.name not in TIMING_COLUMNS
                and not pa.types.is_timestamp(f.type) and f.name != PARTITION_KEY]
        rows = wh.read(table, cols, run_id, snap).drop_columns([PARTITION_KEY]).to_pylist()
        if table == "runs":  # how and where it ran (executor, concurrency, ...) is not what happened
            for r in rows:
                r["config"] = _without_execution_fields(r["config"])
        if table == "observations":
            for r in rows:
                if r.get("payload"):
                    doc = json.loads(r["payload"])
                    r["payload"] = {k: v for k, v in doc.items() if k not in PAYLOAD_TIMING_KEYS} \
                        if isinstance(doc, dict) else doc
        out[table] = sorted(json.dumps(r, sort_keys=True, default=str, ensure_ascii=False) for r in rows)
    return out


def _without_execution_fields(config: str | None) -> str | None:
    """``runs.config`` without the runner's EXECUTION_FIELDS (a run on Ray equals the same config run locally)."""
    from ..rollout.runner import EXECUTION_FIELDS

    if not config:
        return config
    doc = json.loads(config)
    for key in EXECUTION_FIELDS:
        section, _, leaf = key.partition(".")
        if isinstance(doc.get(section), dict):
            doc[section].pop(leaf, None)
    return json.dumps(doc, sort_keys=True)


def compare_canonical(a: str | os.PathLike, b: str | os.PathLike, run_id: str) -> dict[str, dict]:
    """{table: {"only_a": n, "only_b": n, "example": row}} for each table whose canonical rows differ."""
    ra, rb = canonical_rows(a, run_id), canonical_rows(b, run_id)
    diff = {}
    for table in ra:
        ca, cb = Counter(ra[table]), Counter(rb[table])
        if ca != cb:
            only_a, only_b = ca - cb, cb - ca
            example = next(iter(only_a or only_b))
            diff[table] = {"only_a": sum(only_a.values()), "only_b": sum(only_b.values()), "example": example[:500]}
    return diff

