"""Shared by the journey tests (tests/test_journey_*.py): the installed CLI in a subprocess.

A journey drives ``shopsim-wh`` as a user does, on input the code under test did not write (third-party files in
tests/fixtures, ShopSimRL run directories written as raw JSON lines), through every command the flow crosses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

_EXE = shutil.which("shopsim-wh", path=str(Path(sys.executable).parent)) or shutil.which("shopsim-wh")
CLI = [_EXE] if _EXE else [sys.executable, "-m", "shopsim_wh.cli.main"]


def shopsim(*args: str | Path, cwd: Path | None = None, env: dict | None = None,
            timeout: float = 180) -> subprocess.CompletedProcess:
    """Run the installed ``shopsim-wh`` with ``args``; never raises on a non-zero exit (tests assert the code)."""
    full_env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **(env or {})}
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=full_env)


def ok(res: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """``res`` when it exited 0, else an assertion error that shows what it printed."""
    assert res.returncode == 0, f"exit {res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    return res


def facts(wh: Path, query: str, **params) -> list[dict]:
    """Rows of ``query`` read in-process as dicts: the facts a check is computed from (the commands under test are
    driven through :func:`shopsim`; this is not the seam)."""
    from shopsim_wh.engines.db import connect

    con = connect(wh)
    try:
        cur = con.execute(query, params)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()


# The noisy demo run several journeys start from (judge, skills by an LLM, taxonomy): experiment `noisy`, seed 3,
# 8 val tasks x 2 rollouts of the scripted-noisy policy with the persona on, at most 15 model turns.
NOISY = {"experiment": {"name": "noisy", "seed": 3}, "tasks": {"sample_size": 8, "repeats": 2},
         "model": {"name": "scripted-noisy"}, "environment": {"persona": True},
         "runtime": {"max_steps": 15, "concurrency": 4}}


def noisy_run(tmp_path_factory, dest: Path) -> Path:
    """A copy at ``dest`` of the warehouse of ``shopsim-wh run`` of :data:`NOISY`, run once per test session
    through the installed CLI: the journeys that start from it prove what comes after the run, and each gets a
    copy of its own to write into."""
    from .export_fixtures import shared
    from .helpers import write_config

    def make(d: Path) -> Path:
        ok(shopsim("run", write_config(d / "noisy.yaml", **NOISY), "--warehouse", d / "wh", "--quiet"))
        return d / "wh"

    shutil.copytree(shared(tmp_path_factory, "noisy_run", make), dest)
    return dest
