"""A task split → the deterministic job list, by ShopSimRL's rules (`shopsimrl/evaluation.py`).

* Tasks: the split's ids in file order; with ``sample_size``, ``random.Random(seed).sample(ids, sample_size)``
  in the order drawn (neither the ids nor the draw are sorted).
* Jobs: for each task in that order, ``sample_id in range(repeats)``; ``split`` is the split's name.
* ``episode_id = task-{task_id:06d}__sample-{sample_id:03d}``.
* Episode seed: the first 4 bytes, big-endian, of ``sha256(f"{seed}:{task_id}:{sample_id}")``; the model
  seed of a turn is the episode seed plus the turn's 0-based index (``step_index - 1`` of a 1-based step).

Split manifests are read by :mod:`shopsim_wh.core.splits` (re-exported here).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass

from ..core.errors import ConfigError
from ..core.splits import SPLITS, SplitManifest, load_split_manifest, task_ids_sha256

__all__ = ["SPLITS", "EpisodeJob", "SplitManifest", "build_jobs", "episode_seed", "load_split_manifest",
           "select_tasks", "sha256_json", "stable_hash", "task_ids_sha256"]


def stable_hash(*parts: object, bits: int = 63) -> int:
    h = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(h[:8], "big") & ((1 << bits) - 1)


def sha256_json(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()


def episode_seed(seed: int, task_id: int, sample_id: int) -> int:
    digest = hashlib.sha256(f"{seed}:{task_id}:{sample_id}".encode("ascii")).digest()
    return int.from_bytes(digest[:4], "big")


@dataclass(frozen=True)
class EpisodeJob:
    task_id: int
    sample_id: int
    seed: int
    split: str

    @property
    def episode_id(self) -> str:
        return f"task-{self.task_id:06d}__sample-{self.sample_id:03d}"

    def step_seed(self, step_idx: int) -> int:
        """Model seed of the turn with 0-based index ``step_idx`` (1-based step ``step_idx + 1``)."""
        return self.seed + step_idx

    def as_dict(self) -> dict:
        return asdict(self)


def select_tasks(task_ids: list[int], sample_size: int | None, seed: int) -> list[int]:
    """The split's tasks, or a seeded draw of ``sample_size`` of them in the order drawn."""
    if sample_size is None:
        return list(task_ids)
    if not 0 < sample_size <= len(task_ids):
        raise ConfigError(f"tasks.sample_size={sample_size} must be in [1, {len(task_ids)}] (the split's task count)")
    return random.Random(seed).sample(list(task_ids), sample_size)


def build_jobs(manifest: SplitManifest, split: str, sample_size: int | None, repeats: int,
               experiment_seed: int) -> list[EpisodeJob]:
    ids = manifest.task_ids(split)
    if not ids:
        raise ConfigError(f"split {split!r} of the manifest is empty; choose a split with tasks")
    if repeats < 1:
        raise ConfigError(f"tasks.repeats={repeats} must be at least 1")
    return [
        EpisodeJob(t, s, episode_seed(experiment_seed, t, s), split)
        for t in select_tasks(ids, sample_size, experiment_seed)
        for s in range(repeats)
    ]
