"""Shared by the analytics and gate tests: one synthetic warehouse per session and an independent reader.

The reader goes around DuckDB: it lists the current snapshot's files, reads them with pyarrow and keeps the
last attempt of every episode in plain Python, so the SQL views are checked against separately written code.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

from shopsim_wh.demo.shop import TEACHER_RUN, RunSpec, WarehouseSpec, default_runs, generate
from shopsim_wh.engines.db import connect
from shopsim_wh.store.warehouse import Warehouse

EXTRA_RUNS = [
    RunSpec("synth-ckpt-a-hot", checkpoint_id="ckpt-a", skill_bank="effective", temperature=1.0),
    RunSpec("synth-nockpt-bare", checkpoint_id=None),
    RunSpec("synth-nockpt-skill", checkpoint_id=None, skill_bank="effective"),
    RunSpec("synth-ckpt-a-other", checkpoint_id="ckpt-a", job_list="other"),
    TEACHER_RUN,
]
RUNS = default_runs(4) + EXTRA_RUNS
EPISODES = 9000  # 1000 per run
_CACHE: dict[str, tuple[Path, object]] = {}


def synth_warehouse() -> tuple[Path, object]:
    """(root, SynthInfo) of the session's warehouse, generated once per process."""
    if "wh" not in _CACHE:
        tmp = tempfile.mkdtemp(prefix="shopsim-analytics-")
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
        root = Path(tmp) / "wh"
        info = generate(root, EPISODES, WarehouseSpec(runs=RUNS, seed=11, repeats=2, coding_episodes=6))
        _CACHE["wh"] = (root, info)
    return _CACHE["wh"]


def synth_connection():
    root, _ = synth_warehouse()
    if "con" not in _CACHE:
        _CACHE["con"] = (root, connect(root))
    return _CACHE["con"][1]


def read_table(root: Path, table: str) -> list[dict]:
    """Every row of a table in the current snapshot, with run_id, straight from the Parquet files."""
    wh = Warehouse(root)
    rows: list[dict] = []
    for entry in wh.snapshot().files(table):
        for row in pq.read_table(wh.abspath(entry)).to_pylist():
            row["run_id"] = entry.run_id
            rows.append(row)
    return rows


def final_rows(root: Path, table: str) -> list[dict]:
    """Rows of the final attempt of each episode (what the base views keep)."""
    last: dict[tuple[str, str], int] = defaultdict(int)
    for e in read_table(root, "episodes"):
        key = (e["run_id"], e["episode_id"])
        last[key] = max(last[key], e["attempt"])
    return [r for r in read_table(root, table) if r["attempt"] == last[(r["run_id"], r["episode_id"])]]
