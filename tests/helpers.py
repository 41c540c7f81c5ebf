"""Small helpers shared by the runner tests: configs on disk and decoded Parquet scans."""

from __future__ import annotations

import copy
from pathlib import Path

import pyarrow.parquet as pq
import yaml

BASE = {
    "experiment": {"name": "t", "seed": 3},
    "tasks": {"split": "val", "sample_size": 6, "repeats": 1},
    "model": {"name": "scripted-strong", "base_url": "embedded", "checkpoint_id": "ck1",
              "sampling": {"temperature": 0.6, "top_p": 1.0, "max_tokens": 4096}, "send_seed": True},
    "environment": {"url": "embedded", "dialect": "shop_env"},
    "skills": {"path": None},
    "runtime": {"max_steps": 30, "concurrency": 4},
}


def write_config(path: Path, **sections) -> Path:
    """BASE with sections deep-merged, e.g. write_config(p, model={"name": "scripted-noisy"})."""
    cfg = copy.deepcopy(BASE)
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = _merge(cfg[key], value)
        else:
            cfg[key] = value
    path.write_text(yaml.safe_dump(cfg))
    return path


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(a[k], v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
    return out


def decoded_strings(root: Path):
    """Every string value in every Parquet file under root, decoded (zstd hides strings from grep)."""
    for f in sorted(root.rglob("*.parquet")):
        table = pq.read_table(f)
        for col in table.columns:
            for v in col.to_pylist():
                if isinstance(v, str):
                    yield f, v
