"""One export, planned before a row is written.

:class:`ExportOptions` is what was asked (everything but the kind); :func:`build_plan` turns it, on an open
warehouse, into an :class:`ExportPlan`: the kind, the runs in scope, the filter and how much of it reaches the plan,
the building blocks, and the **strategy** with the reason it was chosen. ``shopsim-wh export --explain`` prints the
plan and writes nothing; :func:`shopsim_wh.export.core.export` builds it once and hands it to the strategy's
executor. The strategies (docs/export.md says which warehouse shape each serves):

``records``
    A record kind (one row per episode, ``sample_id`` known up front) whose shard count is known before its rows:
    batches are ranges of the writer's order, computed two at a time and written once each as they come. With
    more than one batch the base rows are first copied into one folder per batch (``copy_base_rows``).
``file-groups``
    The same kinds on a warehouse whose files fall into groups of whole episodes (as the runner and ingest write
    them): each batch reads its own files, no copy; the batches' sorted runs are merged in the writer's order.
``spill``
    Every other kind (rows per step, per pair, or a filter that leaves the row count unknown): rows computed per
    batch of episodes into hash buckets, counted (which sizes the shards and finds exact duplicates), then sharded
    in ``sample_id`` order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import batches, groups
from .registry import ExportError, Kind, get_kind
from .scope import bind_params, pushdown, select_runs, where_clause

DEFAULT_SHARD_ROWS = 100_000
FORMATS = ("parquet", "jsonl")
STRATEGIES = ("records", "file-groups", "spill")
# Building blocks every kind reads, computed once per batch into TEMP tables that shadow the views (linear in the
# warehouse: one row per message / episode / step; DuckDB spills them to disk past its memory limit).
# export_agent_tools (one merged schema per tool name of an agent) before export_step_tools, which reads it
MATERIALIZED = ("export_episodes", "export_messages", "export_agent_tools", "export_step_tools")


@dataclass(frozen=True)
class ExportOptions:
    """What an export reads and how it writes (the CLI's flags): scope, filter, shards, context and privacy."""

    runs: Sequence[str] | None = None  # run ids (default: every run)
    experiment: str | None = None  # only the runs of this experiment
    where: str | None = None  # boolean SQL over the kind's filter columns (replaces the kind's default)
    format: str = "parquet"  # parquet or jsonl
    shard_rows: int = DEFAULT_SHARD_ROWS  # target rows per shard
    window: int | None = None  # context: the global prefix plus the last K turns
    max_tokens: int | None = None  # context: trim whole turns, oldest first, to this many estimated tokens
    allow_test: bool = False  # allow runs holding test-split episodes
    include_reasoning: bool = False
    include_persona: bool = False
    gamma: float = 1.0  # discount for return-to-go (offline-rl)
    min_margin: float | None = None  # preference: smallest reward margin of a pair
    min_step_margin: float | None = None  # prm: smallest step-value margin
    prm_shape: str | None = None  # prm: `steps` (default) or `trl-stepwise` (TRL <= 1.13's columns)

    def check(self) -> None:
        if self.format not in FORMATS:
            raise ExportError(f"unknown format {self.format!r}; use parquet or jsonl")
        if self.shard_rows < 1:
            raise ExportError(f"--shard-rows must be at least 1, not {self.shard_rows}")
        for name, v in (("--window", self.window), ("--max-tokens", self.max_tokens)):
            if v is not None and v < 0:
                raise ExportError(f"{name} must be >= 0, not {v}")

    @property
    def params(self) -> dict:
        """The kinds' SQL parameters (DuckDB variables ``export_*``), as the manifest records them."""
        return {"export_window": self.window, "export_max_tokens": self.max_tokens,
                "export_include_reasoning": bool(self.include_reasoning),
                "export_include_persona": bool(self.include_persona), "export_gamma": float(self.gamma),
                "export_min_margin": self.min_margin, "export_min_step_margin": self.min_step_margin}


# kind -> the ExportOptions field naming its shape (a kind with several: Kind.shapes, its `-- shape-<name>:` lines)
SHAPE_OPTIONS = {"prm": "prm_shape"}


def kind_for(kind: str | Kind, options: ExportOptions) -> Kind:
    """The kind an export of ``kind`` with ``options`` writes: the registry's, in the shape its option names
    (``--prm-shape trl-stepwise``); a shape option given to another kind is refused."""
    spec = kind if isinstance(kind, Kind) else get_kind(kind)
    for name, option in SHAPE_OPTIONS.items():
        if getattr(options, option) is not None and name != spec.name:
            raise ExportError(f"--{option.replace('_', '-')} applies to the {name} export only, not {spec.name}")
    return spec.with_shape(getattr(options, SHAPE_OPTIONS[spec.name]) if spec.name in SHAPE_OPTIONS else None)


@dataclass
class Source:
    """An open warehouse: the connection (on one snapshot, spilling to ``spill``), that snapshot's version, the
    warehouse's location and its (Warehouse, Snapshot) pair; the last three are None for a connection passed in
    (its files are not known here)."""

    con: object
    spill: Path
    snapshot: int | None = None
    root: str | None = None
    files: tuple | None = None


@dataclass
class ExportPlan:
    """How one export runs, decided before a row is computed (see the module doc)."""

    kind: Kind
    options: ExportOptions
    selected: list[dict]  # the runs in scope (scope.select_runs)
    where: str | None  # the filter applied (the kind's default when none was given)
    where_is_default: bool
    episodes_where: str | None  # the part of the filter applied to the plan's episodes (scope.pushdown)
    columns: list[str]  # the kind's view's columns
    blocks: tuple[str, ...]  # the building blocks materialized per batch
    strategy: str = "spill"
    why: str = ""
    episodes: int = 0  # episodes planned
    n_batches: int = 1
    n_shards: int | None = None  # None: known after the count (spill)
    copy_base_rows: bool = False
    exact: bool = False  # every planned episode gives a row (a record kind's filter applied whole, or none)
    planned: list[list[str]] = field(default_factory=list)  # records: each batch's sample ids, in order
    found: list = field(default_factory=list)  # file-groups: the batches' groups (groups.Group)

    @property
    def params(self) -> dict:
        return self.options.params

    def explain(self) -> dict:
        """The plan as plain values (``export --explain --summary-format json``)."""
        return {"kind": self.kind.name, "grain": self.kind.grain, "record_kind": self.kind.record is not None,
                "runs": [r["run_id"] for r in self.selected], "where": self.where,
                "where_is_kind_default": self.where_is_default, "episodes_where": self.episodes_where,
                "episodes": self.episodes, "strategy": self.strategy, "why": self.why, "batches": self.n_batches,
                "batch_episodes": batches.batch_episodes(self.kind), "workers": batches.workers(),
                "copy_base_rows": self.copy_base_rows, "shards": self.n_shards,
                "shard_rows": self.options.shard_rows, "format": self.options.format,
                "building_blocks": list(self.blocks), "columns": self.columns,
                "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self.options).items()}}

    def explain_text(self) -> str:
        e = self.explain()
        shards = e["shards"] if e["shards"] is not None else "after the count"
        lines = [f"export {e['kind']} ({e['grain']})",
                 f"  runs: {len(e['runs'])} ({', '.join(e['runs'][:5])}{', ...' if len(e['runs']) > 5 else ''})",
                 f"  where: {e['where'] or '(none)'}{' (the kind default)' if e['where_is_kind_default'] else ''}",
                 f"  planned on: {e['episodes_where'] or 'every episode in scope'} -> {e['episodes']} episode(s)",
                 f"  strategy: {e['strategy']}",
                 f"  why: {e['why']}",
                 f"  batches: {e['batches']} of <= {e['batch_episodes']} episodes, {e['workers']} at a time"
                 + (", base rows copied once per batch" if e["copy_base_rows"] else ""),
                 f"  shards: {shards} (target {e['shard_rows']} rows each), format {e['format']}",
                 f"  building blocks: {', '.join(e['building_blocks']) or '(none)'}"]
        return "\n".join(lines)


def blocks_of(spec: Kind) -> tuple[str, ...]:
    """The building blocks an export of ``spec`` materializes (per batch): those of :data:`MATERIALIZED` its
    SQL reads (directly or through other export views), then the kind's own ``materialize`` list."""
    read = reads(spec.sql)
    return tuple(v for v in MATERIALIZED if v in read) + tuple(v for v in spec.materialize if v not in MATERIALIZED)


def reads(sql: str) -> set[str]:
    """The export_* views ``sql`` reads (comments aside), transitively."""
    from ..engines.db import reachable, shipped_refs, words

    return {n for n in reachable(words(sql), shipped_refs()) if n.startswith("export_")}


def view_columns(con, spec: Kind) -> list[str]:
    described = con.execute(f"DESCRIBE SELECT * FROM {spec.view}").fetchall()
    opaque = [f"{r[0]} ({r[1]})" for r in described if r[1] in ("HUGEINT", "UHUGEINT", "UUID")]
    if opaque:
        raise ExportError(f"kind {spec.name} has column(s) {', '.join(opaque)} Arrow cannot carry plainly; "
                          f"cast them (e.g. CAST(sum(x) AS BIGINT)) in {spec.path}")
    columns = [r[0] for r in described]
    missing = {"sample_id", "run_id", "episode_id", "task_id"} - set(columns)
    if missing:
        raise ExportError(f"kind {spec.name} ({spec.path}) lacks the lineage column(s) {sorted(missing)}; add them to its view")
    return columns


def build_plan(src: Source, kind: str | Kind, options: ExportOptions) -> ExportPlan:
    """Bind the parameters, fill the scope, check the filter and plan the batches on ``src``'s connection (the
    TEMP tables export_scope and export_batch_plan the executors read); choose the strategy."""
    spec = kind_for(kind, options)
    con = src.con
    bind_params(con, options.params)
    selected = select_runs(con, options.runs, options.experiment, options.allow_test)
    expr, is_default = where_clause(con, spec, options.where)
    episodes_where, whole = pushdown(con, spec, expr)
    plan = ExportPlan(kind=spec, options=options, selected=selected, where=expr, where_is_default=is_default,
                      episodes_where=episodes_where, columns=view_columns(con, spec), blocks=blocks_of(spec),
                      exact=spec.record is not None and (expr is None or whole))
    per_batch = batches.batch_episodes(spec)
    if spec.record is not None:
        planned = batches.plan_records(con, spec, per_batch, episodes_where, options.shard_rows)
        plan.episodes = sum(len(p) for p in planned)
        if batches.direct(spec, plan.exact, plan.episodes, options.shard_rows):
            return _records(src, plan, planned, per_batch)
        plan.why = (f"record kind {spec.name}, but --where {expr!r} is not applied whole to the plan and "
                    f"{plan.episodes} planned episodes exceed one shard: the rows must be counted before sharding")
    else:
        plan.why = (f"{spec.name} is not a record kind ({spec.grain}): its rows are counted (shards, exact "
                    "duplicates) before they are sharded")
    plan.n_batches = batches.plan(con, spec, per_batch, episodes_where)
    plan.episodes = con.execute("SELECT count(*) FROM export_batch_plan").fetchone()[0]
    plan.copy_base_rows = plan.n_batches > 1
    return plan


def _records(src: Source, plan: ExportPlan, planned: list[list[str]], per_batch: int) -> ExportPlan:
    """A record kind whose shard count is known up front: ``records``, or ``file-groups`` when the warehouse's
    files allow (groups.plan_groups)."""
    opts = plan.options
    plan.n_shards = max(1, math.ceil(plan.episodes / opts.shard_rows)) if plan.exact else 1
    plan.n_batches = len(planned)
    known = ("no filter cut the plan" if plan.where is None else
             "the filter is applied whole to the plan" if plan.exact else "the planned episodes fit one shard")
    plan.why = f"record kind {plan.kind.name}: one row per episode and {known}, so the shards are known up front"
    if plan.n_batches == 1:
        plan.strategy, plan.planned = "records", planned
        plan.why += "; one batch, read in place"
        return plan
    found = groups.plan_groups(src.con, *src.files, per_batch) if src.files is not None else None
    if found:
        plan.strategy, plan.found, plan.n_batches = "file-groups", found, len(found)
        plan.why += f"; the warehouse's files fall into {len(found)} batches of whole file groups, each read alone"
        return plan
    plan.strategy, plan.planned, plan.copy_base_rows = "records", planned, True
    plan.why += ("; an open connection's files are not known" if src.files is None else
                 "; the files hold no usable groups (a compacted warehouse: a group would exceed "
                 f"{groups.GROUP_FACTOR}x a batch), so the base rows are copied once per batch")
    return plan
