"""The export kinds: one ``sql/exports/<kind>.sql`` file each, described by its comment header.

A kind file opens with ``-- key: value`` lines (see docs/export.md and the contract in the module
:mod:`shopsim_wh.export`)::

    -- export: sft-action
    -- grain: one row per decision (model turn) of any agent, main and subagents
    -- trl: conversational prompt-completion
    -- sample: prompt, completion, tools
    -- filters: status, reward, r_success, success, import_fidelity, source_format, agent_role, est_tokens
    -- default-where: status = 'completed' AND success
    -- description: state -> next action

and creates the view ``export_<kind with - as _>``. Optional keys: ``trl`` ("-" when none), ``default-where``,
``line`` (the column a JSONL line is, for kinds whose row is one record such as ``shopsimrl-v4``),
``params`` (the DuckDB variables the view reads), ``materialize`` (building-block views the kind reads more than once,
computed once into TEMP tables; ``export_messages``, ``export_episodes`` and ``export_step_tools`` always are),
``record`` (a record kind: the view selects episodes and shopsim_wh/export/records.py writes each as one
``shopsimrl-v4`` or ``atif`` record), ``batch`` (``task`` for a kind that compares the rollouts of a task, so a
batch of the bounded-memory evaluation keeps a task's episodes together; ``all`` for a kind computed in one batch
whatever the batch size, whose rows come from tables the batches do not split: the token kinds; default
``episode``; see batches.py),
``batch-episodes`` (episodes per batch for this kind, for a kind whose per-batch planning outweighs its rows;
``SHOPSIM_WH_EXPORT_BATCH_EPISODES`` still wins), ``decisions`` (a view listing the decisions the kind reads from
``export_decisions``: only those get their context computed), ``shape`` (the name of the default shape of a kind
that has others) and one ``shape-<name>: view=<view>; trl=<type>; sample=<columns>`` line per other shape: the same
rows in other columns, from another view of the file (``--prm-shape trl-stepwise``: :meth:`Kind.with_shape`).
Files named ``00_*`` are shared building blocks, not kinds.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..core.errors import ShopsimError

HEADER = re.compile(r"^--\s*([a-z][a-z-]*):\s?(.*)$")
REQUIRED = ("export", "grain", "sample", "filters", "description")
OWN_COLUMNS = ("record", "record_fallback")  # columns of a record kind's view that are not output columns
# The base views the export views read whose rows belong to one episode: shadowed per batch (batches.py).
SHADOWED = ("episodes", "steps", "messages", "actions", "observations", "agents", "tools")


class ExportError(ShopsimError):
    """An export cannot run as asked (unknown kind, bad --where, refused split, unwritable output)."""


@dataclass(frozen=True)
class Shape:
    """Another set of columns for a kind's rows (a ``-- shape-<name>:`` header line): its view, TRL type and
    sample columns."""

    name: str
    view: str
    trl: str
    sample: tuple[str, ...]


@dataclass(frozen=True)
class Kind:
    name: str
    grain: str
    description: str
    sample: tuple[str, ...]
    filters: tuple[str, ...]
    trl: str = "-"
    default_where: str | None = None
    line: str | None = None
    params: tuple[str, ...] = ()
    materialize: tuple[str, ...] = ()
    record: str | None = None
    batch: str = "episode"  # what a batch of the bounded-memory evaluation keeps together: episode, task or all
    batch_episodes: int | None = None  # episodes per batch (None: batches.DEFAULT_BATCH_EPISODES)
    decisions: str | None = None  # a view listing the only decisions export_decisions computes for this kind
    shape: str | None = None  # the shape these columns are (``-- shape:`` names the default of a kind with others)
    default_shape: str | None = None  # the kind's default shape (``-- shape:``)
    shapes: tuple[Shape, ...] = ()  # the kind's other shapes (``-- shape-<name>:``)
    path: Path = field(default=Path(), compare=False)
    sql: str = field(default="", repr=False, compare=False)
    shape_view: str | None = None  # the view of a shape other than the default (:meth:`with_shape`)

    @property
    def view(self) -> str:
        return self.shape_view or "export_" + self.name.replace("-", "_")

    @property
    def shape_names(self) -> tuple[str, ...]:
        """Every shape of the kind, the default first (``()`` for a kind of one shape)."""
        return tuple(n for n in (self.default_shape, *(s.name for s in self.shapes)) if n)

    def with_shape(self, name: str | None) -> Kind:
        """The registry's kind written in shape ``name`` (None or the current shape: itself): another view, TRL
        type and sample columns over the same rows."""
        if name is None or name == self.shape:
            return self
        if self.shape_view is not None:
            raise ExportError(f"kind {self.name} is in shape {self.shape} already; shape the registry's kind")
        for s in self.shapes:
            if s.name == name:
                return replace(self, shape=s.name, shape_view=s.view, trl=s.trl, sample=s.sample)
        have = ", ".join(self.shape_names) or "none"
        raise ExportError(f"kind {self.name} has no shape {name!r}; its shapes: {have}")

    @property
    def sql_sha256(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def _split(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip() and v.strip() != "-")


def parse_kind(path: Path) -> Kind:
    """The kind a ``sql/exports/<kind>.sql`` file declares in its header (leading ``--`` lines)."""
    text = path.read_text()
    meta: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        m = HEADER.match(line)
        if m and m.group(1) not in meta:
            meta[m.group(1)] = m.group(2).strip()
    missing = [k for k in REQUIRED if k not in meta]
    if missing:
        raise ExportError(f"{path}: the header lacks {', '.join(missing)}; add `-- {missing[0]}: ...` lines at the top")
    if meta["export"] != path.stem:
        raise ExportError(f"{path}: header says export {meta['export']!r} but the file is named {path.name}; rename one")
    return Kind(
        name=meta["export"], grain=meta["grain"], description=meta["description"], sample=_split(meta["sample"]),
        filters=_split(meta["filters"]), trl=meta.get("trl", "-") or "-",
        default_where=meta.get("default-where") or None, line=meta.get("line") or None,
        params=_split(meta.get("params", "")), materialize=_split(meta.get("materialize", "")),
        record=meta.get("record") or None, batch=_batch(path, meta.get("batch") or "episode"),
        batch_episodes=_batch_episodes(path, meta.get("batch-episodes") or None),
        decisions=meta.get("decisions") or None, shape=meta.get("shape") or None,
        default_shape=meta.get("shape") or None,
        shapes=tuple(_shape(path, k.removeprefix("shape-"), v) for k, v in meta.items() if k.startswith("shape-")),
        path=path, sql=text)


def _shape(path: Path, name: str, value: str) -> Shape:
    """A ``-- shape-<name>: view=...; trl=...; sample=...`` header line."""
    parts = dict(p.strip().split("=", 1) for p in value.split(";") if "=" in p)
    if "view" not in parts or "sample" not in parts:
        raise ExportError(f"{path}: `-- shape-{name}:` needs `view=<view>; sample=<columns>` (and optionally "
                          "`trl=<type>`)")
    return Shape(name=name, view=parts["view"].strip(), trl=parts.get("trl", "-").strip() or "-",
                 sample=_split(parts["sample"]))


def _batch(path: Path, value: str) -> str:
    if value not in ("episode", "task", "all"):
        raise ExportError(f"{path}: `-- batch: {value}` must be episode, task or all (what a batch keeps together)")
    return value


def _batch_episodes(path: Path, value: str | None) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ExportError(f"{path}: `-- batch-episodes: {value}` must be a positive whole number of episodes")
    return int(value)


@functools.lru_cache(maxsize=4)
def _kinds(root: str) -> dict[str, Kind]:
    files = sorted(p for p in (Path(root) / "exports").glob("*.sql") if not p.name.startswith("00_"))
    return {k.name: k for k in map(parse_kind, files)}


def list_kinds() -> list[Kind]:
    """Every registered kind, by name."""
    from ..engines.db import sql_dir

    return sorted(_kinds(str(sql_dir())).values(), key=lambda k: k.name)


def get_kind(name: str) -> Kind:
    from ..engines.db import sql_dir

    kinds = _kinds(str(sql_dir()))
    if name not in kinds:
        raise ExportError(f"unknown export kind {name!r}; choose one of: {', '.join(sorted(kinds))} "
                          "(`shopsim-wh export --list` describes them)")
    return kinds[name]
