"""``shopsim-wh doctor``: check a warehouse and say, for every problem, the command that fixes it.

Checks, in order (a finding stops nothing: every check runs):

* ``snapshot_unreadable``: ``_catalog/CURRENT`` or the snapshot it names cannot be read;
* ``file_missing`` / ``file_size`` / ``file_unreadable`` / ``file_schema`` / ``file_rows``: a file the snapshot
  lists is absent, has another size than recorded, has no readable Parquet footer, has columns other than its
  table's declaration for its schema version, or another row count;
* ``schema_old``: files written under an older schema version (readable; newer columns read as NULL);
* ``orphan_staging`` / ``orphan_file``: files in ``_staging/`` or in table folders that no snapshot lists
  (left by a crashed commit), unless a writer is at work right now;
* ``stale_lock``: the writer lock is held, but not by the process that took it (it was killed and a child it
  forked still holds the lock file open): every writer would wait for it;
* ``duplicate_episode``: an (episode_id, attempt) stored more than once within a run;
* ``duplicate_completed``: an episode stored completed (``done``) in more than one attempt;
* ``episodes_lost``: episode attempts a ledger acknowledged that the warehouse does not hold;
* ``partial_episode``: rows of an attempt without its ``episodes`` row, or a runner attempt without all its steps;
* ``unexpected_episode``: with a config, a stored episode of its run that the config does not plan;
* ``catalog_stale``: the BI catalog file (``shopsim-wh catalog``) was built from an older snapshot;
* ``server_unreachable``: with a config, the model or environment server it names does not answer.

The file and episode findings are ``shopsim-wh check``'s failures (``check.check``, one code each), so the two
commands agree: ``check`` exits 1 exactly when ``doctor`` reports one of them (``doctor`` also reports what
``check`` lists as allowed: stray files, old schema versions, locks, catalogs, servers). A run with a broken file
gets its file finding only: its lost or partial episodes follow from it, and the fix is the same.
"""

from __future__ import annotations

import fcntl
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.schema import SCHEMA_VERSION, TABLES
from ..store.warehouse import Snapshot, Warehouse
from .check import CheckReport, check


@dataclass
class Finding:
    code: str
    message: str
    fix: str  # the command (or step) that fixes it
    path: str | None = None
    run_id: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def _redo(run_id: str) -> str:
    return (f"shopsim-wh runs rm {run_id}, then land it again (`shopsim-wh run CONFIG` for a runner run, "
            "`shopsim-wh ingest FILE` for an ingested one)")


def check_files(report: CheckReport) -> list[Finding]:
    """``check``'s unreadable files (``check.inspect_file``: missing, size, footer, schema, rows), with the fix."""
    return [Finding(u["code"], u["error"], _redo(u["run_id"]), u["path"], u["run_id"]) for u in report.unreadable]


def check_schema_versions(wh: Warehouse, snap: Snapshot) -> list[Finding]:
    from ..store.maintenance import outdated

    out: list[Finding] = []
    for run_id, n in sorted(outdated(wh, snap).items()):
        out.append(Finding("schema_old", f"run {run_id}: {n} file(s) written under an older schema version than "
                           f"{SCHEMA_VERSION} (readable; columns added since read as NULL)",
                           f"shopsim-wh compact --run {run_id}", None, run_id))
    return out


def writer_pid(wh: Warehouse) -> tuple[bool, int | None]:
    """(is the writer lock held now, the pid recorded by the writer that last took it)."""
    lock = wh.catalog_dir / "LOCK"
    if not lock.exists():
        return False, None
    fd = os.open(lock, os.O_RDONLY)
    try:
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            held = False
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            held = True
    finally:
        os.close(fd)
    pid = int(text.split()[1]) if text.startswith("pid ") and text.split()[1:2] and text.split()[1].isdigit() else None
    return held, pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_lock_and_orphans(wh: Warehouse, snap: Snapshot) -> list[Finding]:
    out: list[Finding] = []
    held, pid = writer_pid(wh)
    lock = (wh.catalog_dir / "LOCK").as_posix()
    if held and (pid is None or not _alive(pid)):
        out.append(Finding("stale_lock", f"the writer lock {lock} is held, but its writer (pid {pid}) is gone: a process "
                           "it started still holds the lock file open, so every run, ingest and gate would wait",
                           f"find the holder with `fuser -v {lock}` (or `lsof {lock}`) and stop that process", lock))
    if held and not out:
        return out  # a writer is at work: its staged files are not orphans
    live = {e.path for es in snap.tables.values() for e in es} | {i["path"] for i in snap.pending_delete}
    now = time.time()
    for f in sorted(wh.staging_dir.glob("*")) if wh.staging_dir.is_dir() else []:
        age = now - f.stat().st_mtime
        out.append(Finding("orphan_staging", f"{f.relative_to(wh.root)} is left in _staging/ by an interrupted write "
                           f"({age:.0f} s old)", "shopsim-wh vacuum --force (no writer is running) or "
                           "shopsim-wh vacuum once it is older than the grace period", f.as_posix()))
    for table in TABLES:
        for f in sorted((wh.root / table).glob("*/*.parquet")):
            rel = f.relative_to(wh.root).as_posix()
            if rel not in live:
                out.append(Finding("orphan_file", f"{rel} is in a table folder but in no snapshot (a crashed commit)",
                                   "shopsim-wh vacuum --force (no writer is running) or shopsim-wh vacuum once it is "
                                   "older than the grace period", rel, f.parent.name.removeprefix("run_id=")))
    return out


def check_episodes(report: CheckReport) -> list[Finding]:
    """``check``'s duplicated, lost, partial and unexpected episodes, one finding per run and kind (runs with a
    broken file are left to that file's finding)."""
    broken = {u["run_id"] for u in report.unreadable}
    kinds: dict[tuple[str, str], list[str]] = {}

    def add(code: str, run_id: str, what: str) -> None:
        if run_id not in broken:
            kinds.setdefault((code, run_id), []).append(what)

    for d in report.duplicated:  # [run, episode, attempt] or [run, episode, "completed in more than one attempt"]
        if isinstance(d[2], int):
            add("duplicate_episode", d[0], f"{d[1]} (attempt {d[2]})")
        else:
            add("duplicate_completed", d[0], d[1])
    for item in report.lost:
        add("episodes_lost", item[0], f"{item[1]} (attempt {item[2]})" if len(item) == 3 else item[1])
    for item in report.partial:  # [table, run, episode, attempt, why]
        add("partial_episode", item[1], f"{item[2]} (attempt {item[3]}: {item[0]} {item[4]})")
    if report.unexpected:
        add("unexpected_episode", report.plan_run, ", ".join(report.unexpected[:3]))
    said = {"duplicate_episode": "episode attempt(s) stored more than once",
            "duplicate_completed": "episode(s) stored completed in more than one attempt",
            "episodes_lost": "acknowledged episode attempt(s) not stored (lost)",
            "partial_episode": "partial episode attempt(s)",
            "unexpected_episode": "stored episode(s) the config does not plan"}
    out = []
    for (code, run_id), items in sorted(kinds.items()):
        n = len(report.unexpected) if code == "unexpected_episode" else len(items)
        shown = ", ".join(items[:3]) + (" ..." if len(items) > 3 else "")
        fix = (f"use a new experiment.name for this config, or {_redo(run_id)}" if code == "unexpected_episode"
               else _redo(run_id))
        out.append(Finding(code, f"run {run_id}: {n} {said[code]}: {shown}", fix, None, run_id))
    return out


def check_catalogs(root: Path, snap: Snapshot, paths: list[Path]) -> list[Finding]:
    from ..engines.catalog import catalog_snapshot, default_catalog_path

    out = []
    default = default_catalog_path(root)
    for p in dict.fromkeys([*([default] if default.exists() else []), *paths]):
        built = catalog_snapshot(p) if p.exists() else None
        if built is None or built != snap.version:
            what = "is missing" if not p.exists() else f"shows snapshot {built}, the warehouse is at {snap.version}"
            out.append(Finding("catalog_stale", f"catalog {p} {what}",
                               f"shopsim-wh catalog -w {root} --out {p}", str(p)))
    return out


def check_servers(cfg) -> list[Finding]:
    import httpx

    from ..core.config import EMBEDDED, public_url

    targets = []
    if cfg.model.base_url != EMBEDDED:
        targets.append(("model", cfg.model.base_url.rstrip("/") + "/models", cfg.model.trust_env))
    if cfg.environment.url != EMBEDDED:
        targets.append(("environment", cfg.environment.url.rstrip("/") + "/healthz", cfg.environment.trust_env))
    out = []
    for kind, url, trust in targets:
        try:  # any HTTP answer (even 401 or 404) means the server is there
            httpx.get(url, timeout=3.0, trust_env=trust)
        except httpx.HTTPError as exc:
            shown = public_url(url)  # httpx quotes the URL, userinfo included, in its message
            out.append(Finding("server_unreachable", f"{kind} server {shown} does not answer "
                               f"({type(exc).__name__}: {str(exc).replace(url, shown)})",
                               f"start the {kind} server or fix {'model.base_url' if kind == 'model' else 'environment.url'}"
                               " in the config", shown))
    return out


def doctor(root: str | os.PathLike, cfg=None) -> list[Finding]:
    """Every finding on the warehouse at ``root`` (and, with a loaded config, on its servers and catalog)."""
    from ..core.errors import WarehouseError
    from ..store.storage import is_url

    if is_url(str(root)):
        raise WarehouseError(f"doctor checks warehouses on local disk; for {root} run `shopsim-wh check -w {root}` "
                             "(snapshot files readable, nothing lost, stray objects)")
    root = Path(root)
    wh = Warehouse(root)
    findings: list[Finding] = []
    if cfg is not None:
        findings += check_servers(cfg)
    if not wh.exists():
        findings.append(Finding("no_warehouse", f"no warehouse at {root} (no _catalog/CURRENT)",
                                "pass --warehouse DIR, or create one with `shopsim-wh run CONFIG` or `shopsim-wh ingest FILE`",
                                str(root)))
        return findings
    try:
        snap = wh.snapshot()
    except (WarehouseError, ValueError, KeyError, TypeError) as exc:
        findings.append(Finding("snapshot_unreadable", f"the current snapshot cannot be read: {exc}",
                                f"restore {wh.catalog_dir} from a backup, or point _catalog/CURRENT at the newest intact "
                                "snapshot-*.json beside it", str(wh.catalog_dir / "CURRENT")))
        return findings
    report = check(root, cfg)
    findings += check_files(report)
    findings += check_schema_versions(wh, snap)
    findings += check_lock_and_orphans(wh, snap)
    findings += check_episodes(report)
    out = getattr(getattr(cfg, "output", None), "catalog", None)
    findings += check_catalogs(root, snap, [Path(out)] if out else [])
    return findings
