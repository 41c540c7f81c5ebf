"""SkillProvider protocol (seed 000 §5.4): ``NoSkills`` and a minimal JSON ``SkillBank``.

Bank file::

    {"version": "bank-1", "skills": [
        {"id": "options-first", "version": "1", "scope": "global", "content": "..."},
        {"id": "t-123", "version": "1", "scope": "task", "task_ids": [123], "content": "..."}]}

``select`` sees only public context (task id, instruction, persona, first observation state), never
the private goal. Two ways to mask skills for the paired gate (the selection is recorded per episode):

* ``mask_rate`` > 0 drops each selected skill with a seeded probability per episode (shopsim-wh's own mode);
* ``mask_seed`` assigns masks the way ShopSimRL does, from the job alone (docs/gate.md):
  - rule ``gate-a`` (cold-start Gate A): skill ``c`` is present iff the first 8 bytes of
    ``sha256(f"{mask_seed}:{split}:{task_id}:{sample_id}:{c}")``, big-endian, are below ``0.5 * 2**64``;
  - rule ``online`` (the round gates): every logical slot (a skill, together with the skills that declare
    ``"rewrites": "<its id>"``, versions = [the skill, rewrites sorted by id]) takes
    ``int.from_bytes(sha256(f"{mask_seed}:{split}:{task_id}:{sample_id}:{slot id}").digest()[:8], "big")
    % (len(versions) + 1)``: 0 = absent, i = versions[i - 1]. A slot of one skill is present iff that
    number is odd.
  Then ``select`` needs ``split``, ``task_id`` and ``sample_id`` in its context.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..core.errors import ConfigError
from .jobs import stable_hash


@dataclass(frozen=True)
class Skill:
    id: str
    version: str
    content: str
    scope: str = "global"
    metadata: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(self.content.encode()).hexdigest()


class SkillProvider(Protocol):
    def identity(self) -> str | None: ...

    def select(self, context: dict, seed: int) -> list[Skill]: ...


class NoSkills:
    def identity(self) -> str | None:
        return None

    def select(self, context: dict, seed: int) -> list[Skill]:
        return []


MASK_RULES = ("gate-a", "online")


def _draw(mask_seed: int, split: str, task_id: int, sample_id: int, chunk_id: str) -> int:
    text = f"{mask_seed}:{split}:{task_id}:{sample_id}:{chunk_id}"
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def mask_bit(mask_seed: int, split: str, task_id: int, sample_id: int, chunk_id: str, probability: float = 0.5) -> bool:
    """ShopSimRL's cold-start (Gate A) rule: is ``chunk_id`` (the skill id) present for this job?"""
    return _draw(mask_seed, split, task_id, sample_id, chunk_id) < int(probability * (1 << 64))


def slot_choice(mask_seed: int, split: str, task_id: int, sample_id: int, slot_id: str, versions: int) -> int:
    """ShopSimRL's online-gate rule: 0 = the slot is absent, i = its i-th version (1-based)."""
    return _draw(mask_seed, split, task_id, sample_id, slot_id) % (versions + 1)


def online_slots(skill_ids: list[str], rewrites: dict[str, str]) -> list[tuple[str, list[str]]]:
    """(slot id, versions) in bank order: a skill that rewrites another joins that skill's slot (after it,
    rewrites sorted by id); every other skill is a slot of its own."""
    known = set(skill_ids)
    for sid, target in rewrites.items():
        if target not in known or target in rewrites:
            raise ConfigError(f"skill {sid!r} rewrites {target!r}, which is not a plain skill of the bank; "
                              "point 'rewrites' at the id of a skill that rewrites nothing")
    family: dict[str, list[str]] = {}
    for sid, target in rewrites.items():
        family.setdefault(target, []).append(sid)
    return [(sid, [sid, *sorted(family.get(sid, []))]) for sid in skill_ids if sid not in rewrites]


def assign_mask(skill_ids: list[str], job: dict, mask_seed: int, rule: str = "gate-a",
                rewrites: dict[str, str] | None = None) -> list[str]:
    """The skill ids present for ``job`` (``split``, ``task_id``, ``sample_id``), in bank order."""
    missing = [k for k in ("split", "task_id", "sample_id") if job.get(k) is None]
    if missing:
        raise ConfigError(f"skills.mask_seed needs the job's {', '.join(missing)} to assign a mask; "
                          "pass them in the selection context")
    split, task_id, sample_id = str(job["split"]), int(job["task_id"]), int(job["sample_id"])
    if rule == "gate-a":
        return [c for c in skill_ids if mask_bit(mask_seed, split, task_id, sample_id, c)]
    if rule != "online":
        raise ConfigError(f"skills.mask_rule must be one of {', '.join(MASK_RULES)}, not {rule!r}")
    chosen = set()
    for slot_id, versions in online_slots(skill_ids, rewrites or {}):
        pick = slot_choice(mask_seed, split, task_id, sample_id, slot_id, len(versions))
        if pick:
            chosen.add(versions[pick - 1])
    return [c for c in skill_ids if c in chosen]


class SkillBank:
    def __init__(self, path: str, mask_rate: float = 0.0, mask_seed: int | None = None, mask_rule: str = "gate-a",
                 max_skills: int | None = None):
        try:
            raw = Path(path).read_bytes()
            doc = json.loads(raw)
        except FileNotFoundError:
            raise ConfigError(f"skills.path: {path} not found") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"skills.path: {path} is not valid JSON ({exc})") from None
        self.version = str(doc.get("version", "unversioned"))
        self.max_skills = max_skills
        if mask_seed is not None and mask_rate > 0:
            raise ConfigError("skills.mask_rate and skills.mask_seed are two masking modes; set only one")
        if mask_rule not in MASK_RULES:
            raise ConfigError(f"skills.mask_rule must be one of {', '.join(MASK_RULES)}, not {mask_rule!r}")
        self.mask_rate = mask_rate
        self.mask_seed = mask_seed
        self.mask_rule = mask_rule
        self._hash = hashlib.sha256(raw).hexdigest()[:16]
        self.rewrites: dict[str, str] = {}
        self.global_skills: list[Skill] = []
        self.task_skills: dict[int, list[Skill]] = {}
        for i, s in enumerate(doc.get("skills", [])):
            if not isinstance(s, dict) or not s.get("id") or not s.get("content"):
                raise ConfigError(f"skills.path: skill #{i} needs at least 'id' and 'content'")
            skill = Skill(str(s["id"]), str(s.get("version", "1")), s["content"], s.get("scope", "global"),
                          {k: v for k, v in s.items() if k not in {"id", "version", "content", "scope", "task_ids"}})
            if s.get("rewrites") is not None:
                self.rewrites[skill.id] = str(s["rewrites"])
            if skill.scope == "task":
                for t in s.get("task_ids", []):
                    self.task_skills.setdefault(int(t), []).append(skill)
            else:
                self.global_skills.append(skill)
        if not self.global_skills and not self.task_skills:
            raise ConfigError(f"skills.path: {path} holds no skills")
        ids = [sk.id for sk in self.global_skills] + [sk.id for v in self.task_skills.values() for sk in v]
        if mask_seed is not None and len(set(ids)) != len(ids):
            raise ConfigError(f"skills.path: {path} repeats a skill id; mask_seed assigns masks by id, so ids must be unique")
        if self.rewrites:
            online_slots([sk.id for sk in self.global_skills], self.rewrites)  # fails early on a bad 'rewrites'

    @property
    def size(self) -> int:
        return len(self.global_skills) + sum(len(v) for v in self.task_skills.values())

    def identity(self) -> str:
        return self._hash

    def select(self, context: dict, seed: int) -> list[Skill]:
        candidates = self.global_skills + self.task_skills.get(int(context["task_id"]), [])
        if self.max_skills is not None:  # ShopSimRL's max_skills: the first N in scope, before any mask
            candidates = candidates[: self.max_skills]
        if self.mask_seed is not None:
            ids = [c.id for c in candidates]
            rewrites = {k: v for k, v in self.rewrites.items() if k in ids and v in ids} if self.mask_rule == "online" else {}
            present = set(assign_mask(ids, context, self.mask_seed, self.mask_rule, rewrites))
            return [c for c in candidates if c.id in present]
        if self.rewrites:  # without the online mask a rewrite never goes in (it would stand beside its original)
            candidates = [c for c in candidates if c.id not in self.rewrites]
        if self.mask_rate <= 0:
            return candidates
        rng = random.Random(stable_hash(seed, "skill-mask"))
        return [s for s in candidates if rng.random() >= self.mask_rate]


def load_skills(path: str | None, mask_rate: float = 0.0, mask_seed: int | None = None,
                mask_rule: str = "gate-a", max_skills: int | None = None) -> SkillProvider:
    return NoSkills() if path is None else SkillBank(path, mask_rate, mask_seed, mask_rule, max_skills)
