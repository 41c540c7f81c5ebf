"""A loopback S3-compatible server (moto's server mode) for tests and the object-storage benchmark.

``with s3_server() as env:`` starts ``python -m moto.server`` on 127.0.0.1 (a free port) in its own process
(in-process, the server would share the GIL with the DuckDB and boto3 clients it serves and slow both),
returns the AWS variables that point boto3, s3fs, DuckDB's httpfs and the ``shopsim-wh`` CLI at it (dummy
credentials: moto checks none), and stops it on exit. :func:`make_bucket` creates a bucket. Nothing here is
imported by the library itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from .servers import free_port


@contextmanager
def s3_server() -> Iterator[dict[str, str]]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=2).read()  # noqa: S310 - loopback only
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto's server did not start on {url} (exit {proc.poll()})") from None
                time.sleep(0.1)
        yield {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
               "AWS_REGION": "us-east-1"}
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def make_bucket(name: str) -> None:
    import boto3

    from ..store.storage import s3_settings

    boto3.session.Session().client("s3", **s3_settings()).create_bucket(Bucket=name)
