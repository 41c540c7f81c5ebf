"""A loopback S3-compatible server (moto's server mode) for tests and the object-storage benchmark.

``with s3_server() as env:`` starts moto on 127.0.0.1 (a free port), returns the AWS variables that point
boto3, s3fs and the ``shopsim-wh`` CLI at it (dummy credentials: moto checks none), and stops it on exit.
:func:`make_bucket` creates a bucket. Nothing here is imported by the library itself.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def s3_server() -> Iterator[dict[str, str]]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    srv = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    srv.start()
    host, port = srv.get_host_and_port()
    try:
        yield {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "test",
               "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}
    finally:
        srv.stop()


def make_bucket(name: str) -> None:
    import boto3

    from ..storage import s3_settings

    boto3.session.Session().client("s3", **s3_settings()).create_bucket(Bucket=name)
