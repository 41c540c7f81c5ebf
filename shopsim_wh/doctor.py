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
* ``catalog_stale``: the BI catalog file (``shopsim-wh catalog``) was built from an older snapshot;
* ``server_unreachable``: with a config, the model or environment server it names does not answer.
"""

from __future__ import annotations

import fcntl
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .schema import SCHEMA_VERSION, TABLES
from .warehouse import Snapshot, Warehouse


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


def check_files(wh: Warehouse, snap: Snapshot) -> list[Finding]:
    import pyarrow.parquet as pq

    from .maintenance import outdated

    out: list[Finding] = []
    for table, entries in snap.tables.items():
        spec = TABLES.get(table)
        for e in entries:
            p = wh.abspath(e)
            if not p.exists():
                out.append(Finding("file_missing", f"{table}: {e.path} is listed by snapshot {snap.version} but absent",
                                   _redo(e.run_id), e.path, e.run_id))
                continue
            size = p.stat().st_size
            if size != e.bytes:
                out.append(Finding("file_size", f"{table}: {e.path} has {size} bytes, the snapshot recorded {e.bytes} "
                                   "(truncated or overwritten)", _redo(e.run_id), e.path, e.run_id))
                continue
            try:
                meta = pq.read_metadata(p)
            except Exception as exc:  # noqa: BLE001 - any unreadable footer is the same finding
                out.append(Finding("file_unreadable", f"{table}: {e.path} has no readable Parquet footer ({exc})",
                                   _redo(e.run_id), e.path, e.run_id))
                continue
            names = meta.schema.to_arrow_schema().names
            declared = spec.column_names if spec else []
            if spec is None or (e.schema_version == SCHEMA_VERSION and names != declared) or set(names) - set(declared):
                out.append(Finding("file_schema", f"{table}: {e.path} has columns {names}, table {table!r} declares "
                                   f"{declared} (schema version {e.schema_version})", _redo(e.run_id), e.path, e.run_id))
            elif meta.num_rows != e.rows:
                out.append(Finding("file_rows", f"{table}: {e.path} holds {meta.num_rows} rows, the snapshot recorded "
                                   f"{e.rows}", _redo(e.run_id), e.path, e.run_id))
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


def check_duplicates(wh: Warehouse, snap: Snapshot, skip: set[str]) -> list[Finding]:
    """(episode_id, attempt) stored twice within a run, from the episodes files' two key columns (files in
    ``skip``, already found broken, are left out)."""
    import pyarrow.parquet as pq

    out = []
    by_run: dict[str, list] = {}
    for e in snap.files("episodes"):
        if e.path not in skip:
            t = pq.read_table(wh.abspath(e), columns=["episode_id", "attempt"])
            by_run.setdefault(e.run_id, []).extend(zip(t["episode_id"].to_pylist(), t["attempt"].to_pylist(), strict=True))
    for run_id, keys in sorted(by_run.items()):
        seen: set = set()
        dups = sorted({k for k in keys if k in seen or seen.add(k)})
        if dups:
            shown = ", ".join(f"{ep} (attempt {a})" for ep, a in dups[:3])
            out.append(Finding("duplicate_episode", f"run {run_id}: {len(dups)} episode attempt(s) stored more than "
                               f"once: {shown}{' ...' if len(dups) > 3 else ''}", _redo(run_id), None, run_id))
    return out


def check_catalogs(root: Path, snap: Snapshot, paths: list[Path]) -> list[Finding]:
    from .catalog import catalog_snapshot, default_catalog_path

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

    from .config import EMBEDDED

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
            out.append(Finding("server_unreachable", f"{kind} server {url} does not answer ({type(exc).__name__}: {exc})",
                               f"start the {kind} server or fix {'model.base_url' if kind == 'model' else 'environment.url'}"
                               " in the config", url))
    return out


def doctor(root: str | os.PathLike, cfg=None) -> list[Finding]:
    """Every finding on the warehouse at ``root`` (and, with a loaded config, on its servers and catalog)."""
    from .errors import WarehouseError
    from .storage import is_url

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
    findings += check_files(wh, snap)
    findings += check_lock_and_orphans(wh, snap)
    broken = {f.path for f in findings if f.code in ("file_missing", "file_size", "file_unreadable", "file_schema")}
    findings += check_duplicates(wh, snap, broken)
    out = getattr(getattr(cfg, "output", None), "catalog", None)
    findings += check_catalogs(root, snap, [Path(out)] if out else [])
    return findings
