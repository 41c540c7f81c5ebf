"""Where a warehouse's files live: a local directory or an S3-compatible bucket, behind one small seam.

:class:`shopsim_wh.store.warehouse.Writer` writes its commit logic once against these methods:

* ``place(staged, rel)``: make a fully written local Parquet file the object ``rel`` (still invisible: only
  a snapshot that lists it makes it part of the warehouse);
* ``publish(version, data)``: create ``_catalog/snapshot-<version>.json`` *only if it does not exist* and make
  it current; ``False`` when another writer took that number first (the caller rebuilds on the new snapshot);
* ``current()`` / ``read_snapshot(n)``, ``list(prefix)``, ``delete(rel)``, ``open_input(rel)``.

:class:`LocalStore` is the warehouse as it always was: ``os.replace`` of fsynced files, a ``CURRENT`` file
replaced atomically, one writer at a time by ``flock`` (so a snapshot number is never contested), every
step a crash point reported to the power-loss recorder. :class:`S3Store` has no rename and no lock: data
objects are uploaded under unique names, a commit is a conditional put (``If-None-Match: *``) of the next
snapshot object, and ``_catalog/CURRENT`` is only a hint (readers list ``snapshot-*`` after it). boto3 and
s3fs are imported only when an ``s3://`` warehouse is opened.
"""

from __future__ import annotations

import logging
import math
import os
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from urllib.parse import urlparse

from ..core import crash
from ..core.crash import fs_event
from ..core.errors import WarehouseError
from ..core.fsio import atomic_write_bytes, fsync_dir, fsync_file, held_flock, make_dirs, replace, unlink

log = logging.getLogger(__name__)
_SNAP = re.compile(r"snapshot-(\d+)\.json$")
KEEP_SNAPSHOTS = 5  # older snapshot objects are pruned (a reader mid-swap needs the last few)


def lock_stamp() -> str:
    """Who holds a lock, as its file records it: ``pid N on HOST since T: COMMAND`` (doctor reads the pid)."""
    cmd = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else "python"
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return f"pid {os.getpid()} on {os.uname().nodename} since {since}: {cmd[:160]}"


def is_url(root: str | os.PathLike) -> bool:
    return isinstance(root, str) and root.startswith("s3://")


def snapshot_name(n: int) -> str:
    return f"snapshot-{n:06d}.json"


def open_store(root: str | os.PathLike) -> LocalStore | S3Store:
    return S3Store(root) if is_url(root) else LocalStore(Path(root))


class LocalStore:
    """A directory on a POSIX file system (the layout of docs/durability.md)."""

    exclusive = True  # one writer at a time (flock): a writer may delete any orphan it finds when it opens

    def __init__(self, root: Path):
        self.root = Path(root)
        self.catalog_dir = self.root / "_catalog"
        self.staging_dir = self.root / "_staging"
        self.url = str(self.root)

    def __repr__(self) -> str:
        return str(self.root)

    # -- reading -------------------------------------------------------------------------------
    def current(self) -> int | None:
        try:
            return int((self.catalog_dir / "CURRENT").read_text().strip())
        except FileNotFoundError:
            return None

    def read_snapshot(self, n: int) -> bytes | None:
        try:
            return (self.catalog_dir / snapshot_name(n)).read_bytes()
        except FileNotFoundError:
            return None

    def path(self, rel: str) -> Path:
        return self.root / rel

    def reader_path(self, rel: str) -> str:
        """What DuckDB's ``read_parquet`` is given for a warehouse file."""
        return str((self.root / rel).resolve())

    def open_input(self, rel: str):
        return self.root / rel

    def exists(self, rel: str) -> bool:
        return (self.root / rel).exists()

    def size(self, rel: str) -> int:
        return (self.root / rel).stat().st_size

    def list(self, prefix: str) -> Iterator[tuple[str, float, int]]:
        """(relative path, modification time, size) of every file under ``prefix`` (a folder)."""
        base = self.root / prefix
        if base.is_dir():
            for f in base.rglob("*"):
                if f.is_file():
                    st = f.stat()
                    yield f.relative_to(self.root).as_posix(), st.st_mtime, st.st_size

    # -- writing -------------------------------------------------------------------------------
    @contextmanager
    def lock(self, timeout_s: float) -> Iterator[None]:
        """The single writer: a lock left by a killed writer is free at once (the kernel drops its flock). A
        writer that has to wait says whom it waits for at once (unless it waits without a bound, as Ray's
        workers do for each other), and on giving up says what to do."""
        make_dirs(self.catalog_dir)
        make_dirs(self.staging_dir)

        def waiting(holder: str) -> None:
            log.warning("warehouse %s is locked by another writer (%s); waiting up to %g s for it to finish "
                        "($SHOPSIM_WH_LOCK_TIMEOUT_S)", self.root, holder, timeout_s)

        def refusal(holder: str) -> str:
            return (f"warehouse {self.root} is locked by another writer ({holder}); gave up after {timeout_s:g} s "
                    "(one writer at a time): run this command again once that one has finished, set "
                    "SHOPSIM_WH_LOCK_TIMEOUT_S to wait longer, or use another --warehouse (a killed writer's lock "
                    "is free at once: never delete _catalog/LOCK)")
        with held_flock(self.catalog_dir / "LOCK", timeout_s, refusal, lock_stamp(),
                        waiting if math.isfinite(timeout_s) else None):
            fs_event("root", self.root)
            yield

    def place(self, staged: Path, rel: str, placed: list) -> int:
        """fsync the staged file, rename it to ``rel``, fsync the directory; returns its size."""
        crash.point("commit.staged")
        fsync_file(staged)
        crash.point("commit.file_synced")
        final = self.root / rel
        make_dirs(final.parent)
        placed.append(rel)
        replace(staged, final)
        crash.point("commit.file_renamed")
        fsync_dir(final.parent)
        crash.point("commit.dir_synced")
        return final.stat().st_size

    def publish(self, version: int, data: bytes) -> bool:
        """Write the snapshot and replace CURRENT (both fsynced). Under the lock the number is never taken."""
        atomic_write_bytes(self.catalog_dir / snapshot_name(version), data)
        crash.point("commit.snapshot_written")
        atomic_write_bytes(self.catalog_dir / "CURRENT", str(version).encode())
        return True

    def prune(self, version: int) -> None:
        for old in self.catalog_dir.glob("snapshot-*.json"):  # keep a short history for readers mid-swap
            if int(old.stem.split("-")[1]) < version - KEEP_SNAPSHOTS:
                unlink(old)

    def delete(self, rel: str) -> bool:
        return unlink(self.root / rel)

    def staged(self) -> list[Path]:
        """Files left in the staging directory (by interrupted writes)."""
        return [f for f in self.staging_dir.glob("*") if f.is_file()]

    def clean_staging(self, old_enough) -> None:
        for f in self.staging_dir.glob("*"):
            if old_enough(f.stat().st_mtime):
                unlink(f)
        for f in self.catalog_dir.glob(".*.tmp"):  # a snapshot or CURRENT being written when a writer died
            if old_enough(f.stat().st_mtime):
                unlink(f)

    def register(self, con, dirs=()) -> None:
        """Nothing to do: DuckDB reads local files itself."""


def s3_settings() -> dict:
    """Endpoint and region from the usual AWS variables (credentials and profiles: botocore's own chain)."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    return {k: v for k, v in (("endpoint_url", endpoint), ("region_name", region)) if v}


class S3Store:
    """An ``s3://bucket/prefix`` warehouse. No lock: writers race on the snapshot number and losers retry."""

    exclusive = False  # other writers may be mid-commit: orphans are deleted only past the grace period

    def __init__(self, url: str):
        u = urlparse(url)
        if u.scheme != "s3" or not u.netloc:
            raise WarehouseError(f"{url!r} is not an s3://bucket/prefix URL")
        self.bucket = u.netloc
        self.prefix = u.path.strip("/")
        self.url = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        self._client = None
        self._staging: Path | None = None

    def __repr__(self) -> str:
        return self.url

    @property
    def client(self):
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.session.Session().client(
                "s3", config=Config(retries={"max_attempts": 5, "mode": "standard"}), **s3_settings())
        return self._client

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    @property
    def staging_dir(self) -> Path:
        """A private local directory: Parquet files are written here, then uploaded by :meth:`place`."""
        if self._staging is None:
            self._staging = Path(tempfile.mkdtemp(prefix="shopsim-wh-s3-staging-"))
        return self._staging

    # -- reading -------------------------------------------------------------------------------
    def _get(self, rel: str) -> bytes | None:
        client = self.client  # outside the try: a missing boto3 is reported as the missing extra it is
        try:
            return client.get_object(Bucket=self.bucket, Key=self.key(rel))["Body"].read()
        except client.exceptions.NoSuchKey:
            return None
        except Exception as exc:  # noqa: BLE001 - a missing bucket / no credentials: say what to do
            raise self._explain(exc) from exc

    def _explain(self, exc: Exception) -> Exception:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
        if code in ("NoSuchBucket",):
            return WarehouseError(f"bucket {self.bucket!r} does not exist at {s3_settings().get('endpoint_url', 'AWS')}; "
                                  "create it, or set AWS_ENDPOINT_URL to the S3-compatible server that has it")
        if type(exc).__name__ in ("NoCredentialsError", "PartialCredentialsError") or code in ("InvalidAccessKeyId",
                                                                                                "SignatureDoesNotMatch"):
            return WarehouseError(f"no valid credentials for {self.url} ({exc}); set AWS_ACCESS_KEY_ID and "
                                  "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE")
        return exc

    def current(self) -> int | None:
        """The newest snapshot: the CURRENT hint is a lower bound; the listing after it finds the rest."""
        hint = self._get("_catalog/CURRENT")
        start = int(hint) if hint and hint.strip().isdigit() else 0
        found = self._snapshots(after=start)
        if found:
            return max(found)
        if start and self._get(f"_catalog/{snapshot_name(start)}") is not None:
            return start
        found = self._snapshots(after=0)
        return max(found) if found else None

    def _snapshots(self, after: int) -> list[int]:
        kw = {"Bucket": self.bucket, "Prefix": self.key("_catalog/snapshot-")}
        if after:
            kw["StartAfter"] = self.key(f"_catalog/{snapshot_name(after)}")
        out = []
        for page in self.client.get_paginator("list_objects_v2").paginate(**kw):
            out += [int(m.group(1)) for o in page.get("Contents", []) if (m := _SNAP.search(o["Key"]))]
        return out

    def read_snapshot(self, n: int) -> bytes | None:
        return self._get(f"_catalog/{snapshot_name(n)}")

    def reader_path(self, rel: str) -> str:
        return f"s3://{self.bucket}/{self.key(rel)}"

    def open_input(self, rel: str):
        import pyarrow as pa

        data = self._get(rel)
        if data is None:
            raise FileNotFoundError(f"{self.reader_path(rel)} is missing")
        return pa.BufferReader(data)

    def exists(self, rel: str) -> bool:
        client = self.client
        try:
            client.head_object(Bucket=self.bucket, Key=self.key(rel))
            return True
        except Exception:  # noqa: BLE001 - a 404 (botocore raises ClientError for HEAD)
            return False

    def size(self, rel: str) -> int:
        return self.client.head_object(Bucket=self.bucket, Key=self.key(rel))["ContentLength"]

    def list(self, prefix: str) -> Iterator[tuple[str, float, int]]:
        cut = len(self.key("")) if self.prefix else 0
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                          Prefix=self.key(prefix.rstrip("/") + "/")):
            for o in page.get("Contents", []):
                yield o["Key"][cut:], o["LastModified"].timestamp(), o["Size"]

    # -- writing -------------------------------------------------------------------------------
    def lock(self, timeout_s: float):
        """No lock: concurrent writers are resolved at :meth:`publish`. Checks the bucket is reachable."""
        client = self.client
        try:
            client.head_bucket(Bucket=self.bucket)
        except Exception as exc:  # noqa: BLE001
            raise WarehouseError(f"cannot open the warehouse {self.url}: {self._explain(exc)}; check the bucket "
                                 "exists and AWS_ENDPOINT_URL / credentials point at it") from exc
        return nullcontext()

    def place(self, staged: Path, rel: str, placed: list) -> int:
        """Upload the staged file to its unique key (invisible until a snapshot lists it), then drop the local copy."""
        crash.point("commit.staged")
        crash.point("commit.file_synced")
        placed.append(rel)
        self.client.upload_file(str(staged), self.bucket, self.key(rel))
        crash.point("commit.file_renamed")
        size = staged.stat().st_size
        staged.unlink(missing_ok=True)
        crash.point("commit.dir_synced")
        return size

    def publish(self, version: int, data: bytes) -> bool:
        """Create the snapshot object only if absent (``If-None-Match: *``); False when another writer has it."""
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.key(f"_catalog/{snapshot_name(version)}"), Body=data,
                                   IfNoneMatch="*", ContentType="application/json")
        except Exception as exc:  # noqa: BLE001
            code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
            status = getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                return False
            raise self._explain(exc) from exc
        crash.point("commit.snapshot_written")
        self.client.put_object(Bucket=self.bucket, Key=self.key("_catalog/CURRENT"), Body=str(version).encode())
        return True

    def prune(self, version: int) -> None:
        old = [n for n in self._snapshots(after=0) if n < version - KEEP_SNAPSHOTS]
        for n in old:
            self.delete(f"_catalog/{snapshot_name(n)}")

    def delete(self, rel: str) -> bool:
        self.client.delete_object(Bucket=self.bucket, Key=self.key(rel))
        return True

    def staged(self) -> list[Path]:
        return [f for f in self._staging.glob("*") if f.is_file()] if self._staging is not None else []

    def clean_staging(self, old_enough) -> None:
        if self._staging is not None:
            for f in self._staging.glob("*"):
                if old_enough(f.stat().st_mtime):
                    f.unlink(missing_ok=True)

    def close(self) -> None:
        if self._staging is not None:
            import shutil

            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None

    # -- DuckDB --------------------------------------------------------------------------------
    def filesystem(self):
        """An fsspec file system for DuckDB (``con.register_filesystem``), from the same AWS settings."""
        import s3fs

        s = s3_settings()
        kw = {"client_kwargs": {"region_name": s["region_name"]}} if "region_name" in s else {}
        return s3fs.S3FileSystem(endpoint_url=s.get("endpoint_url"), default_block_size=8 << 20,
                                 default_cache_type="readahead", skip_instance_cache=True, **kw)

    def register(self, con, dirs=()) -> None:
        """Register an s3fs file system with ``con``. ``dirs`` (warehouse-relative folders the connection will
        read) are listed once up front: DuckDB asks for every file's size and modification time each time a
        view over it is bound, and s3fs answers those from its listing instead of one HEAD request each
        (about 7x faster to install the views). The file system is private to the connection, so its
        listings are never older than the connection's snapshot."""
        fs = self.filesystem()
        for d in sorted(set(dirs)):
            fs.ls(f"{self.bucket}/{self.key(d)}", detail=True)
        con.register_filesystem(fs)


def unique_name(prefix: str = "part") -> str:
    return f"{prefix}-{time.time_ns():x}-{uuid.uuid4().hex[:8]}.parquet"
