"""One small warehouse for the RL-kind and synth-reasoning tests, built once per process.

Two runner runs of the embedded simulator over the same 4 tasks, 3 samples each: `rl-strong` (the strong
scripted policy) and `rl-noisy` (the noisy one, with personas and protocol errors), so states are shared
across rollouts and runs, and step-level pairs and Monte-Carlo values exist; plus the real third-party traces
of tests/fixtures/third_party (Claude Code, tau-bench as OpenAI messages, ATIF).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from shopsim_wh.core.config import load_config
from shopsim_wh.ingest import ingest
from shopsim_wh.rollout.runner import run

from .helpers import write_config

DATA = Path(__file__).resolve().parent / "fixtures" / "third_party"
RUNS = ("rl-strong", "rl-noisy")
_CACHE: dict[str, Path] = {}


def rl_warehouse() -> Path:
    """The shared warehouse (read-only for its users: copy it before writing, see copy_warehouse)."""
    if "wh" not in _CACHE:
        tmp = Path(tempfile.mkdtemp(prefix="shopsim-export-rl-"))
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
        root = tmp / "wh"
        for name, model, persona in (("rl-strong", "scripted-strong", False), ("rl-noisy", "scripted-noisy", True)):
            cfg = write_config(tmp / f"{name}.yaml", experiment={"name": name, "seed": 3},
                               tasks={"sample_size": 4, "repeats": 3},
                               model={"name": model, "sampling": {"temperature": 1.0}},
                               environment={"persona": persona}, runtime={"max_steps": 10, "concurrency": 6})
            run(load_config(cfg), warehouse=str(root))
        ingest([DATA], root)
        _CACHE["wh"] = root
    return _CACHE["wh"]


def copy_warehouse(dest: Path) -> Path:
    shutil.copytree(rl_warehouse(), dest)
    return dest
