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


# The files that take longest, longest first (seconds of their tests on 2 loaded cores, -n 2: Spark ~230, the rest
# 30-140), run first and the many short files last: with ``--dist loadfile`` a file goes whole to one worker, and
# the worker that finishes its file takes the next, so the two workers end together only if the last files are
# short. (xdist would order the files by their number of tests, sending these few-test long files out last;
# ``--no-loadscope-reorder`` in pyproject keeps this order.) A file not listed keeps its place after these.
LONG_FILES = ("test_spark.py", "test_tutorial.py", "test_journey_skill_loop.py", "test_journey_tools.py",
              "test_journey_judge.py", "test_journey_loop_ingest.py", "test_journey_reverify.py",
              "test_journey_skill_llm.py", "test_export_plan.py", "test_ingest_v4.py", "test_export_rl.py", "test_ingest_memory.py", "test_s3.py",
              "test_export_batches.py", "test_export.py", "test_gate.py", "test_end_to_end.py",
              "test_analytics_ir.py", "test_ray_executor.py", "test_runner.py", "test_warehouse.py", "test_cli.py",
              "test_ingest_kill.py", "test_durability_crash.py", "test_config_import.py",
              "test_analytics_taxonomy.py", "test_demo_gate.py", "test_cli_polish.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the order within a file is kept
