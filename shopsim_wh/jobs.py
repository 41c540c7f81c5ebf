"""Frozen task splits → a deterministic job list (seed 000 §5.1).

A job is (task_id, sample_id, seed, split); ``episode_id = task-{task_id}__sample-{sample_id}``;
the episode seed is a stable hash of the experiment seed, task id and sample id, and every model
call gets a step seed derived from the episode seed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import ConfigError

log = logging.getLogger(__name__)
SPLITS = ("train", "val", "test")


def stable_hash(*parts: object, bits: int = 63) -> int:
    h = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(h[:8], "big") & ((1 << bits) - 1)


def sha256_json(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()


@dataclass(frozen=True)
class EpisodeJob:
    task_id: int
    sample_id: int
    seed: int
    split: str

    @property
    def episode_id(self) -> str:
        return f"task-{self.task_id}__sample-{self.sample_id}"

    def step_seed(self, step_idx: int) -> int:
        return stable_hash(self.seed, "step", step_idx, bits=31)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SplitManifest:
    version: str
    splits: dict[str, list[int]]
    content_hash: str
    legacy_range: bool = False


def load_split_manifest(path: str | None) -> SplitManifest:
    """Explicit task-id lists (normal) or the legacy ``task_nums`` + range form (warns: no holes)."""
    if path is None:
        from .sim.tasks import load_default_split_manifest

        doc = load_default_split_manifest()
    else:
        try:
            doc = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"tasks.split_manifest: {path} not found") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"tasks.split_manifest: {path} is not valid JSON ({exc})") from None
    legacy = "task_nums" in doc
    if legacy:
        log.warning(
            "split manifest %s uses the legacy task_nums + range form, which cannot express holes in task ids; "
            "convert it to explicit train/val/test id lists", path)
        splits, start = {}, int(doc.get("start", 0))
        for name in SPLITS:
            n = int(doc["task_nums"].get(name, 0))
            splits[name] = list(range(start, start + n))
            start += n
    else:
        missing = [s for s in SPLITS if s not in doc]
        if missing:
            raise ConfigError(f"split manifest {path or '(embedded)'} lacks split(s) {missing}")
        splits = {s: [int(t) for t in doc[s]] for s in SPLITS}
    seen: dict[int, str] = {}
    for name, ids in splits.items():
        for t in ids:
            if t in seen:
                raise ConfigError(f"split manifest: task {t} is in both {seen[t]!r} and {name!r}")
            seen[t] = name
    return SplitManifest(str(doc.get("version", "unversioned")), splits, sha256_json(splits), legacy)


def build_jobs(manifest: SplitManifest, split: str, sample_size: int | None, repeats: int, experiment_seed: int) -> list[EpisodeJob]:
    ids = sorted(manifest.splits[split])
    if not ids:
        raise ConfigError(f"split {split!r} of the manifest is empty")
    if sample_size is not None:
        if sample_size > len(ids):
            raise ConfigError(f"tasks.sample_size={sample_size} exceeds the {len(ids)} tasks of split {split!r}")
        ids = sorted(random.Random(stable_hash(experiment_seed, "sample", split)).sample(ids, sample_size))
    return [
        EpisodeJob(t, s, stable_hash(experiment_seed, t, s), split)
        for t in ids
        for s in range(repeats)
    ]
