"""Shared fixtures: real servers on loopback, temporary warehouses, the repo's paths."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from shopsim_wh.testing.servers import free_port, serve_asgi  # noqa: F401  (re-exported for the tests)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return tmp_path / "wh"


def run_in_app(coro_fn, app=None):
    """Run ``coro_fn(client)`` against ``app`` (a fresh embedded simulator if None) through httpx.ASGITransport."""
    from shopsim_wh.sim.server import create_app

    app = app or create_app()

    async def main():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
            return await coro_fn(client)

    return asyncio.run(main())


async def read_body(receive) -> bytes:
    """The whole request body of an ASGI http scope."""
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            return body


# Files that hold one long session fixture (the Spark JVM and its warehouse: ~3-5 minutes) run first: with
# ``--dist loadfile`` a file goes whole to one worker, and collected in name order test_spark.py started after most
# other files, so it ran alone at the end while the other worker idled (~10 min wall instead of ~6 on 2 cores).
LONG_FILES = ("test_spark.py",)


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: item.path.name not in LONG_FILES)  # stable: the order within each group is kept
