"""Task split manifests: read the three shapes in use, check them, and write `shopsimrl-persona-splits-v1`.

Shapes read by :func:`load_split_manifest` (all keep the task order of the file):

* ``shopsimrl-persona-splits-v1`` (ShopSimRL's ``persona_splits.v1.json``): ``splits.{train,val,test}``, each
  with ``task_ids``, ``task_count`` and ``task_ids_sha256`` (sha256 of the ids as compact ASCII JSON,
  ``[1,5,8]``), plus ``role`` and ``persona``. Counts and checksums are verified; the splits must be disjoint.
* any other ``{"splits": {NAME: {"task_ids": [...]} | {"start": a, "end": b}}}`` file of that runtime (e.g.
  ``task_splits.cleaned.v2.json``): split names are free and may overlap (``all_train``); ``task_count`` /
  ``task_ids_sha256`` are verified where present.
* shopsim-wh's flat ``{"version", "train", "val", "test"}`` lists, and the older ``task_nums`` + range form
  (which cannot express holes in task ids, so it warns). Flat splits must be disjoint.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError

log = logging.getLogger(__name__)

PERSONA_SPLITS_SCHEMA = "shopsimrl-persona-splits-v1"
SPLITS = ("train", "val", "test")
DEFAULT_SPLITS_FILE = "persona_splits.v1.json"


def default_split_manifest_path() -> Path:
    """The embedded simulator's frozen persona-splits-v1 file (``shopsim_wh/sim/data``; ``sim.tasks`` writes it)."""
    return Path(__file__).resolve().parents[1] / "sim" / "data" / DEFAULT_SPLITS_FILE


def task_ids_sha256(task_ids: Iterable[int]) -> str:
    """The split checksum of ShopSimRL: sha256 of the id list as compact, ASCII-only JSON (``[1,5,8]``)."""
    text = json.dumps([int(t) for t in task_ids], separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _content_hash(splits: Mapping[str, list[int]]) -> str:
    text = json.dumps(splits, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class SplitManifest:
    version: str
    splits: dict[str, list[int]]  # task ids in file order
    content_hash: str
    legacy_range: bool = False
    schema: str = "shopsim-wh-flat"
    persona: dict[str, bool | None] = field(default_factory=dict)  # per split: true / false / null (mixed)
    roles: dict[str, str | None] = field(default_factory=dict)

    def task_ids(self, split: str) -> list[int]:
        if split not in self.splits:
            raise ConfigError(f"tasks.split: split {split!r} is not in the split manifest; "
                              f"choose one of: {', '.join(sorted(self.splits))}")
        return list(self.splits[split])


def _ids(value: object, where: str) -> list[int]:
    if not isinstance(value, list) or any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in value):
        raise ConfigError(f"{where}: task ids must be a list of non-negative integers")
    if len(value) != len(set(value)):
        dup = next(t for i, t in enumerate(value) if t in value[:i])
        raise ConfigError(f"{where}: task {dup} is listed twice; each task id may appear once per split")
    return list(value)


def _disjoint(splits: Mapping[str, list[int]], where: str) -> None:
    seen: dict[int, str] = {}
    for name, ids in splits.items():
        for t in ids:
            if t in seen:
                raise ConfigError(f"{where}: task {t} is in both {seen[t]!r} and {name!r}; "
                                  "splits must be disjoint (a task in two splits leaks evaluation data)")
            seen[t] = name


def _parse_splits_form(doc: dict, where: str) -> SplitManifest:
    schema = doc.get("schema_version")
    strict = schema == PERSONA_SPLITS_SCHEMA
    if schema is not None and not strict:
        raise ConfigError(f"{where}: unknown split schema_version {str(schema)[:80]!r}; this build reads "
                          f"{PERSONA_SPLITS_SCHEMA!r}, a bare `splits` mapping and the flat train/val/test form")
    records = doc["splits"]
    if not isinstance(records, dict) or not records:
        raise ConfigError(f"{where}: `splits` must be a non-empty mapping of split name to split")
    if strict:
        missing = [s for s in SPLITS if s not in records]
        if missing:
            raise ConfigError(f"{where}: a {PERSONA_SPLITS_SCHEMA} file needs splits {list(SPLITS)}; missing {missing}")
    splits: dict[str, list[int]] = {}
    persona: dict[str, bool | None] = {}
    roles: dict[str, str | None] = {}
    for name, rec in records.items():
        at = f"{where}: split {name!r}"
        if not isinstance(rec, dict):
            raise ConfigError(f"{at} must be a mapping")
        if "task_ids" in rec:
            ids = _ids(rec["task_ids"], at)
        elif strict:
            raise ConfigError(f"{at} has no task_ids (a {PERSONA_SPLITS_SCHEMA} split lists its ids)")
        else:
            try:
                start, end = int(rec["start"]), int(rec["end"])
            except (KeyError, TypeError, ValueError):
                raise ConfigError(f"{at} needs task_ids, or integer start and end") from None
            if start < 0 or end <= start:
                raise ConfigError(f"{at}: invalid range [{start}, {end})")
            ids = list(range(start, end))
        for key in ("task_count", "task_ids_sha256") if strict else ():
            if key not in rec:
                raise ConfigError(f"{at} has no {key}; a {PERSONA_SPLITS_SCHEMA} split carries its count and checksum")
        if "task_count" in rec and rec["task_count"] != len(ids):
            raise ConfigError(f"{at}: task_count is {rec['task_count']!r} but {len(ids)} task ids are listed; "
                              "the file was edited or truncated: restore it from its source")
        if "task_ids_sha256" in rec:
            got = task_ids_sha256(ids)
            if rec["task_ids_sha256"] != got:
                raise ConfigError(
                    f"{at}: task_ids_sha256 is {str(rec['task_ids_sha256'])[:64]!r} but the listed task ids hash to "
                    f"{got!r} (sha256 of the ids as compact JSON); the file was edited or truncated: restore it "
                    "from its source, or regenerate its checksums if the edit was intended")
        if rec.get("persona") not in (True, False, None):
            raise ConfigError(f"{at}: persona must be true, false or null")
        splits[str(name)] = ids
        persona[str(name)] = rec.get("persona")
        roles[str(name)] = rec.get("role")
    if strict:
        _disjoint(splits, where)
    version = doc.get("version") or schema or "unversioned"
    return SplitManifest(str(version), splits, _content_hash(splits), False, schema or "splits", persona, roles)


def parse_split_manifest(doc: object, where: str) -> SplitManifest:
    """A split manifest from its decoded JSON; ``where`` names it in errors."""
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: a split manifest is a JSON object")
    if "splits" in doc:
        return _parse_splits_form(doc, where)
    if "task_nums" in doc:
        log.warning("split manifest %s uses the legacy task_nums + range form, which cannot express holes in task "
                    "ids; convert it to explicit train/val/test id lists", where)
        splits, start = {}, int(doc.get("start", 0))
        for name in SPLITS:
            n = int(doc["task_nums"].get(name, 0))
            splits[name] = list(range(start, start + n))
            start += n
        legacy = True
    else:
        missing = [s for s in SPLITS if s not in doc]
        if missing:
            raise ConfigError(f"split manifest {where} lacks split(s) {missing}; expected `splits` "
                              f"({PERSONA_SPLITS_SCHEMA}) or flat train/val/test id lists")
        splits = {s: _ids(doc[s], f"{where}: split {s!r}") for s in SPLITS}
        legacy = False
    _disjoint(splits, f"split manifest {where}")
    return SplitManifest(str(doc.get("version", "unversioned")), splits, _content_hash(splits), legacy,
                         "shopsim-wh-task-nums" if legacy else "shopsim-wh-flat",
                         dict.fromkeys(splits), dict(zip(splits, splits, strict=True)))


def load_split_manifest(path: str | None) -> SplitManifest:
    """The manifest at ``path``; None = the embedded simulator's frozen persona-splits-v1 file."""
    if path is None:
        path = str(default_split_manifest_path())
        where = "(embedded)"
    else:
        where = str(path)
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"tasks.split_manifest: {path} not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"tasks.split_manifest: {path} is not valid JSON ({exc})") from None
    return parse_split_manifest(doc, where)


def persona_splits_document(splits: Mapping[str, list[int]], *, persona: bool, policy: dict, source: dict,
                            groups: Mapping[str, list[list[int]]] | None = None) -> dict:
    """A ``shopsimrl-persona-splits-v1`` document for our own task ids (ids sorted, checksums computed)."""
    out: dict[str, dict] = {}
    for name in SPLITS:
        ids = sorted(int(t) for t in splits[name])
        rec: dict = {"persona": persona, "role": name, "task_ids": ids, "task_count": len(ids),
                     "task_ids_sha256": task_ids_sha256(ids)}
        if groups is not None:
            sizes = [len(g) for g in groups[name]]
            rec.update(group_count=len(sizes), multi_task_group_count=sum(s > 1 for s in sizes),
                       max_group_size=max(sizes, default=0))
        out[name] = rec
    every = [t for name in SPLITS for t in out[name]["task_ids"]]
    checks = {"pairwise_task_disjoint": len(every) == len(set(every)), "task_count": len(every)}
    return {"schema_version": PERSONA_SPLITS_SCHEMA, "version": PERSONA_SPLITS_SCHEMA, "policy": policy,
            "source": source, "splits": out, "checks": checks}


def dump_persona_splits(doc: dict) -> str:
    """Stable text form: sorted keys, one id per line, as the persona split files are written."""
    return json.dumps(doc, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
