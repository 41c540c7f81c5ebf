"""SkillProvider protocol (seed 000 §5.4): ``NoSkills`` and a minimal JSON ``SkillBank``.

Bank file::

    {"version": "bank-1", "skills": [
        {"id": "options-first", "version": "1", "scope": "global", "content": "..."},
        {"id": "t-123", "version": "1", "scope": "task", "task_ids": [123], "content": "..."}]}

``select`` sees only public context (task id, instruction, persona, first observation state), never
the private goal. ``mask_rate`` > 0 drops each selected skill with a seeded probability per episode
(masked rollouts for the paired gate); the selection is recorded per episode.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from .errors import ConfigError
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


class SkillBank:
    def __init__(self, path: str, mask_rate: float = 0.0):
        try:
            raw = Path(path).read_bytes()
            doc = json.loads(raw)
        except FileNotFoundError:
            raise ConfigError(f"skills.path: {path} not found") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"skills.path: {path} is not valid JSON ({exc})") from None
        self.version = str(doc.get("version", "unversioned"))
        self.mask_rate = mask_rate
        self._hash = hashlib.sha256(raw).hexdigest()[:16]
        self.global_skills: list[Skill] = []
        self.task_skills: dict[int, list[Skill]] = {}
        for i, s in enumerate(doc.get("skills", [])):
            if not isinstance(s, dict) or not s.get("id") or not s.get("content"):
                raise ConfigError(f"skills.path: skill #{i} needs at least 'id' and 'content'")
            skill = Skill(str(s["id"]), str(s.get("version", "1")), s["content"], s.get("scope", "global"),
                          {k: v for k, v in s.items() if k not in {"id", "version", "content", "scope", "task_ids"}})
            if skill.scope == "task":
                for t in s.get("task_ids", []):
                    self.task_skills.setdefault(int(t), []).append(skill)
            else:
                self.global_skills.append(skill)
        if not self.global_skills and not self.task_skills:
            raise ConfigError(f"skills.path: {path} holds no skills")

    @property
    def size(self) -> int:
        return len(self.global_skills) + sum(len(v) for v in self.task_skills.values())

    def identity(self) -> str:
        return self._hash

    def select(self, context: dict, seed: int) -> list[Skill]:
        candidates = self.global_skills + self.task_skills.get(int(context["task_id"]), [])
        if self.mask_rate <= 0:
            return candidates
        rng = random.Random(stable_hash(seed, "skill-mask"))
        return [s for s in candidates if rng.random() >= self.mask_rate]


def load_skills(path: str | None, mask_rate: float = 0.0) -> SkillProvider:
    return NoSkills() if path is None else SkillBank(path, mask_rate)
