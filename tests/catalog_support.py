"""Shared by the catalog, gate_results, doctor and runs tests: one small synthetic warehouse per process, and
copies of it for the tests that change it."""

from __future__ import annotations

import atexit
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CLI = [sys.executable, "-m", "shopsim_wh.cli.main"]
BARE, SKILL, PLACEBO_BARE, PLACEBO = "synth-ckpt-a-bare", "synth-ckpt-a-skill", "synth-ckpt-b-bare", "synth-ckpt-b-placebo"
_CACHE: dict[str, Path] = {}


def small_warehouse() -> Path:
    """4 shop runs of 120 episodes (60 tasks x 2 samples, the default bare / skill / placebo specs) + 2 coding
    sessions: enough pairs for the gate, small enough to build in about a second."""
    if "wh" not in _CACHE:
        from shopsim_wh.demo.shop import WarehouseSpec, generate

        tmp = tempfile.mkdtemp(prefix="shopsim-catalog-")
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
        root = Path(tmp) / "wh"
        generate(root, 480, WarehouseSpec(runs=4, seed=5, repeats=2, coding_episodes=2, compact=False))
        _CACHE["wh"] = root
    return _CACHE["wh"]


def warehouse_copy(dest: Path) -> Path:
    """A private copy of the small warehouse (for tests that change it)."""
    shutil.copytree(small_warehouse(), dest)
    return dest


def cli(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def small_catalog() -> Path:
    """The catalog file of a copy of the small warehouse with one recorded gate decision (built once per
    process; read it only)."""
    if "catalog" not in _CACHE:
        from shopsim_wh.analytics import gate_log
        from shopsim_wh.engines.catalog import build_catalog
        from shopsim_wh.engines.db import connect

        root = warehouse_copy(small_warehouse().parent / "bi-wh")
        con = connect(root)
        args = gate_log.arguments(BARE, SKILL, bootstrap=100)
        gate_log.record(root, con, gate_log.decide(con, args), args)
        _CACHE["catalog"] = build_catalog(root, root.parent / "bi" / "catalog.duckdb").path
    return _CACHE["catalog"]


def cli_in_process(*args: str):
    """The same typer app in this process (for the cheap calls: a subprocess pays the CLI's imports again)."""
    from typer.testing import CliRunner

    from shopsim_wh.cli.main import app

    return CliRunner().invoke(app, list(args), catch_exceptions=False)
