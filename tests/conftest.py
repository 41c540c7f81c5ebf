"""Shared fixtures: real servers on loopback, temporary warehouses, the repo's paths."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve_asgi(app) -> Iterator[str]:
    """Run an ASGI app with uvicorn on a loopback port in a thread; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(5)


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
