"""Synthetic warehouses in the real schema and file layout, for tests and the benchmark.

``generate(root, n_episodes, WarehouseSpec(...))`` writes shop episodes the way the runner fills the tables
(docs/conventions.md) plus a few coding-agent sessions with sub-agents (see :mod:`.synth_coding`),
through ``Writer.commit`` in chunks and ``Writer.compact`` per run, so files are few, large and
sorted by ``episode_id`` (row-group statistics prune single-episode lookups).

What the data looks like:

* Shop runs share one job list (tasks x ``repeats``, explicit non-contiguous task ids) unless a
  :class:`RunSpec` names another ``job_list``. The default layout alternates bare and treatment runs
  per checkpoint: ``synth-ckpt-a-bare``, ``synth-ckpt-a-skill`` (a skill bank with a planted effect),
  ``synth-ckpt-b-bare``, ``synth-ckpt-b-placebo`` (a same-size bank with no effect), ...
* Treatment runs include each skill of the bank in an episode's prompt with probability
  ``mask_rate`` (recorded in ``skills_selected``, ``episodes.skill_ids`` and the system message);
  a skill's effect raises the attribute/option match probability ``p`` of the purchase (see ``SKILL_BANKS``);
  the expected reward of a purchase is linear in ``p`` (0.92 (n_att + n_opt) p + 0.81) / (n_att + n_opt + 1),
  so the gate's additive model fits it up to clipping of ``p`` to [0.02, 0.98].
* Each episode is a walk over the shop pages (search -> results -> item -> ...) with invalid actions
  (server feedback codes ``unknown_clickable``, ``search_unavailable``), protocol errors of the four
  kinds, search churn and repeated-action loops; it ends by purchase, action limit,
  ``generation_length`` or ``protocol_budget``; a few fail (infrastructure) and a few are retried.
* ``messages`` hold exactly what the model saw (system, task, then per step the assistant message and
  its tool/feedback messages) with ``steps.prompt_msg_count`` consistent with them.

Everything is vectorised (numpy + pyarrow); 1,000,000 episodes of 15 steps take a few minutes and a
bounded amount of memory (one chunk of ``chunk_episodes`` at a time, then one run during compaction).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.schema import SCHEMA_VERSION, TABLES
from ..store.warehouse import Warehouse

# ---------------------------------------------------------------------------------------------- specs

SKILL_BANKS: dict[str, tuple[tuple[str, float], ...]] = {
    # (skill id, planted effect on the per-attribute / per-option match probability)
    "effective": (
        ("skill-read-options", 0.20),
        ("skill-check-budget", 0.08),
        ("skill-precise-query", 0.0),
        ("skill-compare-items", 0.0),
    ),
    "placebo": (
        ("placebo-tone", 0.0),
        ("placebo-format", 0.0),
        ("placebo-greeting", 0.0),
        ("placebo-summary", 0.0),
    ),
}


@dataclass(frozen=True)
class RunSpec:
    """One synthetic run. Runs with equal fingerprint fields but the skills form bare/treatment pairs."""

    run_id: str
    checkpoint_id: str | None = "ckpt-a"
    skill_bank: str | None = None  # None (bare), or a key of SKILL_BANKS
    mask_rate: float = 0.5
    model_name: str = "synth-qwen-4b"
    temperature: float = 0.6
    experiment_seed: int = 7
    split: str = "val"
    quality_shift: float = 0.0  # added to the match probability (a better checkpoint)
    prompt_version: str = "persona-v1"
    job_list: str = "default"  # runs with the same name share tasks x repeats


def default_runs(n: int = 4) -> list[RunSpec]:
    """``n`` runs: per checkpoint a bare run and a treatment run (effective / placebo bank alternating)."""
    out = []
    for r in range(n):
        c = r // 2
        ckpt = f"ckpt-{chr(ord('a') + c % 26)}{'' if c < 26 else c // 26}"
        if r % 2 == 0:
            out.append(RunSpec(f"synth-{ckpt}-bare", checkpoint_id=ckpt, quality_shift=0.06 * c))
        else:
            bank = "effective" if c % 2 == 0 else "placebo"
            name = "skill" if bank == "effective" else "placebo"
            out.append(RunSpec(f"synth-{ckpt}-{name}", checkpoint_id=ckpt, skill_bank=bank, quality_shift=0.06 * c))
    return out


# the train-split teacher run the cookbook's distillation queries read (2 samples per task, a stronger model)
TEACHER_RUN = RunSpec("synth-teacher-train", checkpoint_id="teacher-1", model_name="synth-teacher-72b", temperature=1.0,
                      split="train", job_list="train", quality_shift=0.25)


def demo_runs() -> list[RunSpec]:
    """The runs docs/sql_cookbook.md names (`shopsim-wh demo-data` writes them, plus ``synth-coding``)."""
    return [*default_runs(4), TEACHER_RUN]


@dataclass(frozen=True)
class WarehouseSpec:
    """The shape of a synthetic warehouse (:func:`generate`): its runs, their jobs, episode length and seed."""

    runs: int | Sequence[RunSpec] = 4  # a number of :func:`default_runs`, or the runs themselves
    steps: int = 15  # typical episode length (the action limit is 10 more)
    seed: int = 0
    repeats: int = 2  # samples per task
    coding_episodes: int = 6  # coding-agent sessions in run ``synth-coding`` (0: none)
    chunk_episodes: int = 25_000  # episodes per commit (memory is bounded by one chunk)
    compact: bool = True  # compact each run after writing it

    @property
    def action_limit(self) -> int:
        return self.steps + 10


@dataclass
class SynthInfo:
    root: str
    runs: list[RunSpec]
    coding_run: str | None
    tasks: int
    repeats: int
    episodes_per_run: int
    skill_effects: dict[str, float] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------- vocab

_NOUNS = ("rain jacket", "running shoes", "t-shirt", "yoga pants", "backpack", "coffee mug", "desk lamp",
          "water bottle", "phone case", "wool socks", "throw pillow", "bath towel", "face cream", "dog leash")
_ATTRS = ("waterproof", "lightweight", "organic cotton", "non slip", "high waist", "usb charging",
          "dishwasher safe", "bpa free", "machine washable", "vegan leather", "fragrance free", "padded")
_OPTIONS = ("small", "medium", "large", "x-large", "black", "navy", "red", "olive green", "beige",
            "2 count", "6 count", "12 fl oz", "us 8", "us 9.5", "20 liter")
_PERSONAS = ("a budget-minded student", "a busy parent of two", "a retired teacher who hikes",
             "a nurse working night shifts", "a small-business owner", "a marathon beginner")
FEEDBACK = {
    "unknown_clickable": "is not a clickable value on this page",
    "search_unavailable": "search is not available on this page",
}
PROTOCOL = ("no_tool_call", "multiple_tool_calls", "invalid_arguments", "unknown_tool")
PROTOCOL_FEEDBACK = {
    "no_tool_call": "Protocol error: call exactly one tool (search or click); plain text is not an action.",
    "multiple_tool_calls": "Protocol error: call exactly one tool per turn; several calls were made.",
    "invalid_arguments": "Protocol error: the arguments are not valid for this tool's schema.",
    "unknown_tool": "Protocol error: that tool does not exist on this page; use search or click.",
}
SYSTEM_PROMPT = (
    "You are a shopping assistant acting for a customer in a web shop. Use the tools to search and click; "
    "call exactly one tool per turn. Buy the product that best matches the instruction, with the requested "
    "options and within the budget."
)

# kinds of model turn
SEARCH, PRODUCT, NEXT, BACK_SEARCH, OPTION, DETAIL, BACK, BUY, INVALID, P_NOCALL, P_MULTI, P_ARGS, P_UNKNOWN, TERMINATE = range(14)
NK = 14
PAGES = ("search", "results", "item", "description", "done")
PG_SEARCH, PG_RESULTS, PG_ITEM, PG_DETAIL, PG_DONE = range(5)
_PROB = np.zeros((4, NK))
_PROB[PG_SEARCH, [SEARCH, INVALID, P_NOCALL, P_MULTI, P_ARGS, P_UNKNOWN]] = [0.93, 0.02, 0.015, 0.01, 0.015, 0.01]
_PROB[PG_RESULTS, [PRODUCT, NEXT, BACK_SEARCH, INVALID, P_NOCALL, P_MULTI, P_ARGS, P_UNKNOWN]] = [
    0.72, 0.08, 0.06, 0.09, 0.015, 0.01, 0.015, 0.01]
_PROB[PG_ITEM, [OPTION, DETAIL, BACK, BACK_SEARCH, INVALID, P_NOCALL, P_MULTI, P_ARGS, P_UNKNOWN]] = [
    0.56, 0.10, 0.10, 0.03, 0.16, 0.015, 0.01, 0.015, 0.01]
_PROB[PG_DETAIL, [BACK, INVALID, P_NOCALL, P_MULTI, P_ARGS, P_UNKNOWN]] = [0.86, 0.09, 0.015, 0.01, 0.015, 0.01]
_CUM = np.cumsum(_PROB, axis=1)
_CUM[:, -1] = 1.0
# next page for valid (page, kind); -1 = the action is invalid there
_NEXT = np.full((5, NK), -1, dtype=np.int8)
_NEXT[PG_SEARCH, SEARCH] = PG_RESULTS
_NEXT[PG_RESULTS, [PRODUCT, NEXT, BACK_SEARCH]] = [PG_ITEM, PG_RESULTS, PG_SEARCH]
_NEXT[PG_ITEM, [OPTION, DETAIL, BACK, BACK_SEARCH, BUY]] = [PG_ITEM, PG_DETAIL, PG_RESULTS, PG_SEARCH, PG_DONE]
_NEXT[PG_DETAIL, [BACK, BACK_SEARCH]] = [PG_ITEM, PG_SEARCH]
_DIST = np.array([2, 1, 0, 1, 9])  # steps from page to an item page
_GREEDY = np.array([SEARCH, PRODUCT, OPTION, BACK, SEARCH])

TERM_PURCHASE, TERM_LIMIT, TERM_GENLEN, TERM_BUDGET, TERM_FAILED = range(5)
TERM_NAMES = ("purchase", "action_limit", "generation_length", "protocol_budget", None)
N_QUERY, N_ASIN, N_VARIANT = 400, 2000, 16


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _canon(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def _tool_schema(name: str) -> dict:
    if name == "search":
        return {"name": "search", "description": "Search the shop. Only on the search page.",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}
    return {"name": "click", "description": "Click one of the clickable values of the current page.",
            "parameters": {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}}


TOOL_HASH = {n: _sha(_canon(_tool_schema(n))) for n in ("search", "click")}
TOOLS_HASH_SEARCH = _sha(",".join(sorted(TOOL_HASH.values())))
TOOLS_HASH_CLICK = _sha(TOOL_HASH["click"])


class _Pools:
    """Every finite string the generator emits, as Arrow arrays indexed by integer codes."""

    def __init__(self) -> None:
        words = [f"{a} {n}" for n in _NOUNS for a in _ATTRS]
        self.queries = [words[(i * 7) % len(words)] + ("" if i < len(words) else f" {_OPTIONS[i % len(_OPTIONS)]}")
                        for i in range(N_QUERY)]
        self.asins = [f"B0{(i * 7919) % 10**8:08X}" for i in range(N_ASIN)]
        # action pool: canonical action, tool name, arguments JSON, escaped tool-call fragment
        acts: list[tuple[str | None, str | None, str]] = []
        self.a_query = len(acts)
        acts += [(f"search[{q}]", "search", _canon_args({"query": q})) for q in self.queries]
        self.a_asin = len(acts)
        acts += [(f"click[{a}]", "click", _canon_args({"value": a})) for a in self.asins]
        self.a_option = len(acts)
        acts += [(f"click[{o}]", "click", _canon_args({"value": o})) for o in _OPTIONS]
        self.a_const = {}
        for key, value in (("next", "next >"), ("back_search", "Back to Search"), ("Description", "Description"),
                           ("Features", "Features"), ("Reviews", "Reviews"), ("back", "< Prev"), ("buy", "Buy Now"),
                           ("bogus", "Add to Cart"), ("bogus2", "Checkout")):
            self.a_const[key] = len(acts)
            acts.append((f"click[{value}]", "click", _canon_args({"value": value})))
        self.a_const["bad_args"] = len(acts)
        acts.append((None, "click", '{"val": "Buy Now"}'))
        self.a_const["unknown_tool"] = len(acts)
        acts.append((None, "purchase", '{"item": "current"}'))
        for reason in ("generation_length", "protocol_budget"):
            self.a_const["term_" + reason] = len(acts)
            acts.append((f"terminate[{reason}]", None, "{}"))
        self.action = pa.array([a[0] for a in acts], pa.string())
        self.tool = pa.array([a[1] for a in acts], pa.string())
        self.args = pa.array([a[2] for a in acts], pa.string())
        self.frag = pa.array(
            ['"type":"function","function":' + json.dumps({"name": a[1], "arguments": a[2]}, separators=(",", ":"))
             if a[1] else "" for a in acts], pa.string())
        # page texts and observation states, N_VARIANT per page
        self.page_text, self.page_state = [], []
        for p in range(len(PAGES)):
            for v in range(N_VARIANT):
                self.page_text.append(self._render(p, v))
                self.page_state.append(self._state(p, v))
        self.page_text_arr = pa.array(self.page_text, pa.string())
        # observation texts: page texts, protocol feedback, invalid-action texts, client terminations
        obs = list(self.page_text)
        self.o_proto = len(obs)
        obs += [PROTOCOL_FEEDBACK[x] for x in PROTOCOL]
        self.o_invalid = len(obs)  # + fb * 5 * N_VARIANT + page * N_VARIANT + variant
        obs += [f"Invalid action: {FEEDBACK[fb]} [SEP] {t}" for fb in ("search_unavailable", "unknown_clickable")
                for t in self.page_text]
        self.o_term = len(obs)
        obs += [f"Episode terminated by the client: {r}." for r in ("generation_length", "protocol_budget")]
        self.obs_static = obs
        self.page_state_arr = pa.array(self.page_state, pa.string())
        self.reasoning = pa.array([
            f"The instruction asks for specific attributes; the page shows {n} options. "
            f"I should {verb} before buying, keeping the budget in mind (variant {v})."
            for v, (n, verb) in enumerate((a, b) for a in ("two", "three", "several", "no") for b in (
                "search with the key attributes", "open the closest match", "pick the requested size",
                "check the price", "go back to the results", "read the description", "compare two items",
                "click buy now"))], pa.string())

    def _render(self, p: int, v: int) -> str:
        if p == PG_SEARCH:
            return "WebShop [SEP] Instruction: [SEP] see the task above [SEP] [button] Search [button_]"
        if p == PG_RESULTS:
            items = " [SEP] ".join(f"[button] {self.asins[(v * 5 + j) % N_ASIN]} [button_] [SEP] "
                                   f"{_ATTRS[(v + j) % len(_ATTRS)]} {_NOUNS[(v * 3 + j) % len(_NOUNS)]} [SEP] "
                                   f"${9.99 + 5 * ((v + j) % 9):.2f}" for j in range(3))
            return f"[button] Back to Search [button_] [SEP] Page {1 + v % 3} (Total results: 50) [SEP] [button] next > [button_] [SEP] {items}"
        if p == PG_ITEM:
            opts = " ".join(f"[button] {_OPTIONS[(v + j) % len(_OPTIONS)]} [button_]" for j in range(4))
            return (f"[button] Back to Search [button_] [SEP] [button] < Prev [button_] [SEP] size [SEP] {opts} [SEP] "
                    f"{_ATTRS[v % len(_ATTRS)]} {_NOUNS[v % len(_NOUNS)]} [SEP] Price: ${12.5 + v:.2f} [SEP] Rating: 4.{v % 10} "
                    "[SEP] [button] Description [button_] [SEP] [button] Features [button_] [SEP] [button] Reviews [button_] "
                    "[SEP] [button] Buy Now [button_]")
        if p == PG_DETAIL:
            return (f"[button] Back to Search [button_] [SEP] [button] < Prev [button_] [SEP] "
                    f"Made of {_ATTRS[v % len(_ATTRS)]} material; fits true to size (variant {v}).")
        return "Thank you for shopping with us! [SEP] Your episode is over."

    def _state(self, p: int, v: int) -> str:
        actions = {
            PG_SEARCH: [],
            PG_RESULTS: ["Back to Search", "next >"] + [self.asins[(v * 5 + j) % N_ASIN] for j in range(3)],
            PG_ITEM: ["Back to Search", "< Prev"] + [_OPTIONS[(v + j) % len(_OPTIONS)] for j in range(4)]
            + ["Description", "Features", "Reviews", "Buy Now"],
            PG_DETAIL: ["Back to Search", "< Prev"],
            PG_DONE: [],
        }[p]
        return json.dumps({"observation_version": "1", "page": PAGES[p], "search_available": p == PG_SEARCH,
                           "actions": actions}, separators=(",", ":"))


def _canon_args(d: dict) -> str:
    return json.dumps(d, separators=(", ", ": "))


_POOLS: _Pools | None = None


def _pools() -> _Pools:
    global _POOLS
    if _POOLS is None:
        _POOLS = _Pools()
    return _POOLS


# ---------------------------------------------------------------------------------------------- helpers


def _s(x) -> pa.Array | pa.Scalar:
    return pa.scalar(x, pa.string()) if isinstance(x, str) else x


def _cat(*parts) -> pa.Array:
    return pc.binary_join_element_wise(*[_s(p) for p in parts], "")


def _istr(a: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(a), pa.string())


def _ts(us: np.ndarray) -> pa.Array:
    return pa.array(us.astype(np.int64), pa.timestamp("us", tz="UTC"))


def _pick(pool, codes: np.ndarray) -> pa.Array:
    """pool[codes] as an Arrow string array (fast for small pools)."""
    return pa.array(list(pool), pa.string()).take(pa.array(np.asarray(codes, dtype=np.int64)))


def _null_where(arr: pa.Array, mask: np.ndarray) -> pa.Array:
    return pc.if_else(pa.array(mask), pa.nulls(len(arr), arr.type), arr)


def _table(name: str, cols: dict, load_id: str) -> pa.Table:
    n = len(next(iter(cols.values())))
    spec = TABLES[name]
    out = {}
    for c in spec.columns:
        if c.name in cols:
            v = cols[c.name]
            out[c.name] = v if isinstance(v, pa.Array | pa.ChunkedArray) else pa.array(v, c.type)
        elif c.name == "load_id":
            out[c.name] = pa.array([load_id] * n, pa.string()) if n else pa.array([], pa.string())
        elif c.name == "schema_version":
            out[c.name] = pa.array(np.full(n, SCHEMA_VERSION, np.int16))
        else:
            out[c.name] = pa.nulls(n, c.type)
    unknown = set(cols) - set(spec.column_names)
    if unknown:
        raise KeyError(f"table {name!r} has no column(s) {sorted(unknown)}")
    return pa.table(out).cast(spec.arrow_schema)


def _reduce(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per-segment sums of a flat array (segments may be empty)."""
    cs = np.concatenate([[0], np.cumsum(values, dtype=np.float64)])
    return cs[starts + lengths] - cs[starts]


# ---------------------------------------------------------------------------------------------- jobs


@dataclass
class _JobList:
    name: str
    task_ids: np.ndarray  # per job
    sample_ids: np.ndarray
    task_idx: np.ndarray  # index into the task arrays
    episode_ids: list[str]
    instructions: list[str]
    n_att: np.ndarray  # per task
    n_opt: np.ndarray
    difficulty: np.ndarray
    hash: str


def _job_list(name: str, n_tasks: int, repeats: int, seed: int) -> _JobList:
    rng = np.random.default_rng([seed, int(_sha(name)[:8], 16)])
    task_ids = np.sort(rng.choice(np.arange(1000, 1000 + 10 * n_tasks), n_tasks, replace=False))
    n_att = rng.integers(1, 4, n_tasks)
    n_opt = rng.integers(0, 3, n_tasks)
    difficulty = rng.normal(0.45, 0.15, n_tasks)
    instructions = []
    for i in range(n_tasks):
        noun = _NOUNS[(i * 5 + 3) % len(_NOUNS)]
        attrs = " and ".join(_ATTRS[(i * 3 + j) % len(_ATTRS)] for j in range(int(n_att[i])))
        opts = "".join(f", {_OPTIONS[(i + 4 * j) % len(_OPTIONS)]}" for j in range(int(n_opt[i])))
        instructions.append(f"i need a {attrs} {noun}{opts}, and price lower than {20 + (i % 8) * 10}.00 dollars")
    tid = np.repeat(task_ids, repeats)
    sid = np.tile(np.arange(repeats), n_tasks)
    tix = np.repeat(np.arange(n_tasks), repeats)
    eids = np.array([f"task-{t}__sample-{s}" for t, s in zip(tid.tolist(), sid.tolist(), strict=True)])
    order = np.argsort(eids, kind="stable")  # string order = the sort key of every table
    h = _sha(_canon({"name": name, "tasks": task_ids.tolist(), "repeats": repeats}))
    return _JobList(name, tid[order], sid[order], tix[order], eids[order].tolist(), instructions,
                    n_att, n_opt, difficulty, h)


# ---------------------------------------------------------------------------------------------- runs


def _fingerprint_fields(spec: RunSpec, jobs: _JobList, action_limit: int) -> dict:
    bank = SKILL_BANKS.get(spec.skill_bank) if spec.skill_bank else None
    return {
        "job_list_hash": jobs.hash,
        "experiment_seed": spec.experiment_seed,
        "split_manifest_hash": _sha("persona_splits.v1"),
        "model_name": spec.model_name,
        "checkpoint_id": spec.checkpoint_id,
        "sampling": {"temperature": spec.temperature, "top_p": 1.0, "max_tokens": 4096},
        "prompt_hash": _sha(SYSTEM_PROMPT + spec.prompt_version),
        "skill_bank_hash": _sha(_canon(bank)) if bank else None,
        "action_limit": action_limit,
        "environment_mode": "embedded",
        "skills_mask_rate": spec.mask_rate if bank else None,
    }


def _runs_row(spec: RunSpec, jobs: _JobList, action_limit: int, created: datetime, load_id: str) -> pa.Table:
    ff = _fingerprint_fields(spec, jobs, action_limit)
    config = {"experiment": {"name": spec.run_id, "seed": spec.experiment_seed},
              "tasks": {"split": spec.split, "job_list": spec.job_list},
              "model": {"name": spec.model_name, "checkpoint_id": spec.checkpoint_id,
                        "api_key_env": "SHOPSIM_API_KEY", "sampling": ff["sampling"]},
              "skills": {"bank": spec.skill_bank, "mask_rate": ff["skills_mask_rate"]},
              "runtime": {"action_limit": action_limit}}
    row = {
        "experiment": spec.run_id, "fingerprint": _sha(_canon(ff)), "fingerprint_fields": _canon(ff),
        "config": _canon(config), "created_at": created, "source_format": "shopsim-wh-runner",
        "model_name": spec.model_name, "checkpoint_id": spec.checkpoint_id, "split": spec.split,
        "split_manifest_version": "persona_splits.v1", "split_manifest_hash": ff["split_manifest_hash"],
        "prompt_version": spec.prompt_version, "prompt_hash": ff["prompt_hash"],
        "skill_bank_hash": ff["skill_bank_hash"], "environment_mode": "embedded",
        "environment_dialect": "canonical", "observation_fidelity": "canonical", "action_limit": action_limit,
        "planned_episodes": len(jobs.episode_ids), "allow_test": False, "tool_version": "synth",
        "provenance": _canon({"generator": "shopsim_wh.demo.shop"}),
    }
    return _table("runs", {k: [v] for k, v in row.items()}, load_id)


def _loads_row(load_id: str, started: datetime, n: int) -> pa.Table:
    return _table("loads", {"command": ["run"], "started_at": [started], "finished_at": [started],
                            "episodes_written": [n], "status": ["complete"], "tool_version": ["synth"]}, load_id)


# ---------------------------------------------------------------------------------------------- chunk


class _C:
    """The arrays of one chunk, shared by the table builders (episode arrays length E, step arrays S)."""


def _outcomes(c: _C, spec: RunSpec, jobs: _JobList, sel: slice, steps: int, action_limit: int) -> None:
    rng = c.rng
    c.eids = jobs.episode_ids[sel]
    E = c.E = len(c.eids)
    c.tix, c.task_ids, c.sample_ids = jobs.task_idx[sel], jobs.task_ids[sel], jobs.sample_ids[sel]
    c.bank = SKILL_BANKS.get(spec.skill_bank) if spec.skill_bank else ()
    K = c.K = len(c.bank)
    u = rng.random(E)
    term = rng.choice(4, E, p=[0.83, 0.09, 0.05, 0.03]).astype(np.int8)
    term[u < 0.02] = TERM_FAILED
    c.retried = (u >= 0.02) & (u < 0.04)
    L = rng.integers(max(3, steps - 7), steps + 6, E)
    L[term == TERM_LIMIT] = action_limit
    for code, lo in ((TERM_GENLEN, 1), (TERM_BUDGET, 3), (TERM_FAILED, 0)):
        L[term == code] = rng.integers(lo, steps + 1, int((term == code).sum()))
    c.L = L = np.minimum(L, action_limit)
    c.churn = (rng.random(E) < 0.06) & (L >= 10) & (term != TERM_GENLEN)
    c.loop = (rng.random(E) < 0.05) & (L >= 10) & ~c.churn & (term != TERM_GENLEN)
    c.mask = rng.random((E, K)) < spec.mask_rate if K else np.zeros((E, 0), bool)
    c.patterns = c.mask @ (1 << np.arange(K)) if K else np.zeros(E, np.int64)
    effects = np.array([e for _, e in c.bank]) if K else np.zeros(0)
    p = np.clip(jobs.difficulty[c.tix] + spec.quality_shift + c.mask @ effects + rng.normal(0, 0.12, E), 0.02, 0.98)
    na, no = jobs.n_att[c.tix], jobs.n_opt[c.tix]
    purchased = term == TERM_PURCHASE
    r_type = (rng.random(E) < 0.92).astype(float)  # independent of p: the reward stays linear in p
    r_att = rng.binomial(na, p) / na
    r_opt = np.where(no > 0, rng.binomial(no, p) / np.maximum(no, 1), np.nan)
    r_price = (rng.random(E) < 0.88).astype(float)
    reward = r_type * (na * r_att + np.nan_to_num(r_opt) * no + r_price) / (na + no + 1)
    for arr in (r_type, r_att, r_price, reward):  # the server's zero-score terminal payload
        arr[~purchased] = 0.0
    c.r_opt = np.where(~purchased, np.where(no > 0, 0.0, np.nan), r_opt)
    c.r_type, c.r_att, c.r_price, c.reward = r_type, r_att, r_price, np.round(reward, 6)
    all_ok = purchased & (r_type == 1) & (r_att == 1) & (r_price == 1) & ((no == 0) | (c.r_opt == 1))
    c.right = all_ok & (rng.random(E) < 0.92)
    goal = c.tix % N_ASIN
    c.asin_idx = np.where(c.right, goal, (goal + 1 + rng.integers(0, N_ASIN - 1, E)) % N_ASIN)
    c.term, c.purchased, c.completed = term, purchased, term != TERM_FAILED
    c.attempt = np.where(c.retried, 2, 1).astype(np.int16)
    c.eid_arr = pa.array(c.eids, pa.string())


def _walk(rng, term: np.ndarray, L: np.ndarray, churn: np.ndarray, loop: np.ndarray):
    """Kinds, pages before/after and validity of every step, flattened in (episode, step) order."""
    E, Lmax = len(L), int(L.max()) if len(L) else 0
    kinds = np.full((E, Lmax), -1, np.int8)
    before = np.full((E, Lmax), -1, np.int8)
    after = np.full((E, Lmax), -1, np.int8)
    valid = np.zeros((E, Lmax), bool)
    page = np.zeros(E, np.int8)
    F = L - 1
    forced = np.full((E, 5), -1, np.int8)
    forced[churn] = [SEARCH, BACK_SEARCH, SEARCH, BACK_SEARCH, SEARCH]
    forced[loop, 1:4] = NEXT  # the same click three times in a row
    purchase = term == TERM_PURCHASE
    for t in range(Lmax):
        act = t < L
        cum = _CUM[np.minimum(page, 3)]
        k = (rng.random(E)[:, None] > cum).sum(axis=1).astype(np.int8)
        if t < 5:
            k = np.where(forced[:, t] >= 0, forced[:, t], k)
        if t == 0:
            k[:] = SEARCH
        # purchases must stand on an item page at their last step: walk greedily when time runs out
        steer = purchase & (t < F) & (F - t <= _DIST[page] + 2)
        k = np.where(steer, _GREEDY[page], k)
        k = np.where(purchase & (t == F), BUY, k)
        k = np.where(((term == TERM_GENLEN) | (term == TERM_BUDGET)) & (t == F), TERMINATE, k)
        k = np.where((term == TERM_BUDGET) & (t >= F - 2) & (t < F), P_NOCALL, k).astype(np.int8)
        nxt = _NEXT[page, k]
        ok = nxt >= 0
        new_page = np.where(ok, nxt, page)
        new_page = np.where((k == TERMINATE) | ((term == TERM_LIMIT) & (t == F)), PG_DONE, new_page)
        kinds[act, t] = k[act]
        before[act, t] = page[act]
        after[act, t] = new_page[act]
        valid[act, t] = (ok | (k > INVALID))[act]
        page = np.where(act, new_page, page).astype(np.int8)
    m = kinds >= 0
    return kinds[m].astype(np.int64), before[m].astype(np.int64), after[m].astype(np.int64), valid[m]


def _step_arrays(c: _C, spec: RunSpec, action_limit: int, t0_us: int, chunk_no: int, run_no: int) -> None:
    P, rng = _pools(), c.rng
    kind, c.pg_before, c.pg_after, c.valid = _walk(rng, c.term, c.L, c.churn, c.loop)
    c.kind = kind
    S = c.S = len(kind)
    ep = c.ep = np.repeat(np.arange(c.E), c.L)
    c.st_start = np.cumsum(c.L) - c.L
    t = c.t = np.arange(S) - c.st_start[ep]
    c.last = t == (c.L[ep] - 1)
    c.variant = (c.tix[ep] * 3 + t) % N_VARIANT
    c.term_ep = term_ep = c.term[ep]
    c.is_env = kind <= INVALID
    inv_search = (kind == INVALID) & (c.pg_before != PG_SEARCH) & (rng.random(S) < 0.5)
    # feedback code of invalid environment actions: 0 search_unavailable, 1 unknown_clickable, -1 none
    c.fb = np.where(c.is_env & ~c.valid, np.where((kind == SEARCH) | inv_search, 0, 1), -1)
    # protocol error of the step (the protocol_budget episode's last response is one more no-call error)
    c.proto = np.where((kind >= P_NOCALL) & (kind <= P_UNKNOWN), kind - P_NOCALL,
                       np.where((kind == TERMINATE) & (term_ep == TERM_BUDGET), 0, -1))
    tix_ep = c.tix[ep]
    a = np.full(S, P.a_const["bogus"], np.int64)  # action-pool index of the step's first call
    sel = kind == SEARCH
    a[sel] = P.a_query + (tix_ep * 3 + t)[sel] % N_QUERY
    sel = kind == PRODUCT
    a[sel] = P.a_asin + ((tix_ep * 5 + c.variant) % N_ASIN)[sel]
    a[sel & c.last] = P.a_asin + c.asin_idx[ep][sel & c.last]
    sel = kind == OPTION
    a[sel] = P.a_option + ((tix_ep + t) % len(_OPTIONS))[sel]
    for k, key in ((NEXT, "next"), (BACK_SEARCH, "back_search"), (BACK, "back"), (BUY, "buy"),
                   (P_ARGS, "bad_args"), (P_UNKNOWN, "unknown_tool")):
        a[kind == k] = P.a_const[key]
    sel = kind == DETAIL
    a[sel] = np.array([P.a_const[x] for x in ("Description", "Features", "Reviews")])[t[sel] % 3]
    a[inv_search] = P.a_query + (tix_ep % N_QUERY)[inv_search]
    a[(kind == INVALID) & ~inv_search & (t % 2 == 1)] = P.a_const["bogus2"]
    a[kind == P_MULTI] = P.a_asin + (tix_ep % N_ASIN)[kind == P_MULTI]
    sel = kind == TERMINATE
    a[sel] = np.where(term_ep[sel] == TERM_GENLEN, P.a_const["term_generation_length"], P.a_const["term_protocol_budget"])
    c.a = a
    # calls per step: 0 for no_tool_call, 2 for multiple_tool_calls, else 1 (terminate: one row, no call id)
    c.n_calls = np.where(kind == P_NOCALL, 0, np.where(kind == P_MULTI, 2, 1))
    c.n_obs = np.maximum(c.n_calls, 1)
    n_follow = np.where(kind == TERMINATE, 0, c.n_obs)  # messages after the assistant message
    # a generation_length turn adds no message at all (ShopSimRL's protocol appends nothing for a policy failure)
    c.has_asst = ~((kind == TERMINATE) & (term_ep == TERM_GENLEN))
    msgs_step = c.has_asst + n_follow
    before = np.cumsum(msgs_step) - msgs_step
    c.pmc = 2 + before - before[c.st_start[ep]]  # prompt_msg_count
    c.msgs_per_ep = 2 + _reduce(msgs_step.astype(float), c.st_start, c.L).astype(np.int64)
    c.tokens_out = rng.integers(40, 400, S)
    c.tokens_out[sel & (term_ep == TERM_GENLEN)] = 4096
    c.tokens_in = 700 + 140 * c.pmc + rng.integers(0, 60, S)
    c.latency = np.round(np.exp(rng.normal(6.6, 0.45, S)), 3)
    c.ep_start_us = t0_us + (np.arange(c.E) + chunk_no * 1_000_003 + run_no * 97_000_019) * 1_000
    gap = c.latency * 1000 + 150_000
    off = np.cumsum(gap) - gap
    c.started = c.ep_start_us[ep] + (off - off[c.st_start[ep]]).astype(np.int64)
    c.dur_s = np.round(_reduce(gap, c.st_start, c.L) / 1e6 + 0.4, 3)
    c.step_eid = c.eid_arr.take(pa.array(ep))
    c.reason_code = (tix_ep + 5 * t) % len(P.reasoning)
    # assistant text: 0 none, 1 a no-call reply, 2 the protocol_budget's last reply
    c.asst = np.where(kind == P_NOCALL, 1, np.where((kind == TERMINATE) & (term_ep == TERM_BUDGET), 2, 0))


ASSISTANT_TEXT = (None, "I think the second item is the best choice.", "Let me think about which item fits best.")


def _steps_table(c: _C, spec: RunSpec, load_id: str) -> pa.Table:
    P, S, kind = _pools(), c.S, c.kind
    term_step = kind == TERMINATE
    genlen = term_step & (c.term_ep == TERM_GENLEN)
    return _table("steps", {
        "episode_id": c.step_eid, "attempt": pa.array(c.attempt[c.ep]), "agent_id": _pick(["main"], np.zeros(S)),
        "step_idx": pa.array(c.t.astype(np.int32)), "seq": pa.array(c.t.astype(np.int32)),
        "page": _pick(PAGES, c.pg_before),
        "observation_state": P.page_state_arr.take(pa.array(c.pg_before * N_VARIANT + c.variant)),
        "prompt_msg_count": pa.array(c.pmc.astype(np.int32)),
        "tools_hash": _pick([TOOLS_HASH_CLICK, TOOLS_HASH_SEARCH], c.pg_before == PG_SEARCH),
        "tool_schema_hashes": _pick([json.dumps([TOOL_HASH["click"]]), json.dumps([TOOL_HASH["search"], TOOL_HASH["click"]])],
                                    c.pg_before == PG_SEARCH),
        "reasoning": P.reasoning.take(pa.array(c.reason_code)), "content": _pick(ASSISTANT_TEXT, c.asst),
        "finish_reason": _pick(["tool_calls", "stop", "length"], np.where(genlen, 2, np.where(c.asst > 0, 1, 0))),
        "protocol_error": _pick([None, *PROTOCOL], c.proto + 1),
        "protocol_feedback": _pick([None] + [PROTOCOL_FEEDBACK[x] for x in PROTOCOL], c.proto + 1),
        "policy_failure": _pick([None, "generation_length"], genlen),
        "raw_response": _pick([None, '{"choices":[{"finish_reason":"see step"}]}'], (c.proto >= 0) | genlen),
        "response_id": _cat("resp-", c.step_eid, "-", _istr(c.t)), "model": _pick([spec.model_name], np.zeros(S)),
        "step_seed": pa.array(c.tix[c.ep].astype(np.int64) * 1_000_003 + c.t * 7919 + spec.experiment_seed),
        "tokens_in": pa.array(c.tokens_in.astype(np.int64)), "tokens_out": pa.array(c.tokens_out.astype(np.int64)),
        "latency_ms": pa.array(c.latency), "started_at": _ts(c.started),
    }, load_id)


def _actions_table(c: _C, load_id: str) -> pa.Table:
    P = _pools()
    ast = c.ast = np.repeat(np.arange(c.S), c.n_calls)
    c.call_idx = np.arange(len(ast)) - np.repeat(np.cumsum(c.n_calls) - c.n_calls, c.n_calls)
    apool = c.a[ast].copy()
    second = (c.kind[ast] == P_MULTI) & (c.call_idx == 1)
    apool[second] = P.a_query + (c.tix[c.ep[ast]] % N_QUERY)[second]
    c.apool = apool
    a_kind = c.kind[ast]
    call_id = _cat("call_", _istr(c.ep_start_us[c.ep[ast]] % 10**9), "_", _istr(c.t[ast]), "_", _istr(c.call_idx))
    c.call_id = call_id = _null_where(call_id, a_kind == TERMINATE)
    a_proto = (a_kind >= P_NOCALL) & (a_kind <= P_UNKNOWN)
    fb_codes = ["search_unavailable", "unknown_clickable", *PROTOCOL]
    fb = np.where(a_proto, 2 + c.proto[ast], c.fb[ast])
    fb_msg = np.where(a_proto, -1, c.fb[ast])
    return _table("actions", {
        "episode_id": c.step_eid.take(pa.array(ast)), "attempt": pa.array(c.attempt[c.ep[ast]]),
        "agent_id": _pick(["main"], np.zeros(len(ast))), "step_idx": pa.array(c.t[ast].astype(np.int32)),
        "call_idx": pa.array(c.call_idx.astype(np.int16)), "call_id": call_id,
        "tool_name": P.tool.take(pa.array(apool)), "arguments": P.args.take(pa.array(apool)),
        "action": _null_where(P.action.take(pa.array(apool)), a_proto),
        "action_type": _pick(["tool_use", "terminate"], a_kind == TERMINATE),
        "tool_type": _pick(["execution", None], a_kind == TERMINATE),
        "action_valid": pa.array(c.valid[ast] & ~a_proto),
        "feedback_code": _pick([None, *fb_codes], fb + 1),
        "feedback_message": _pick([None, FEEDBACK["search_unavailable"], FEEDBACK["unknown_clickable"]], fb_msg + 1),
    }, load_id)


def _observations_table(c: _C, action_limit: int, load_id: str) -> pa.Table:
    P = _pools()
    ost = c.ost = np.repeat(np.arange(c.S), c.n_obs)
    k = c.o_kind = c.kind[ost]
    c.o_call = np.arange(len(ost)) - np.repeat(np.cumsum(c.n_obs) - c.n_obs, c.n_obs)
    # observation i of a step answers call i; a no-call step's single observation has no call id
    act_pos = np.repeat(np.cumsum(c.n_calls) - c.n_calls, c.n_obs) + c.o_call
    has_call = k != P_NOCALL
    idx = pa.array(np.where(has_call, np.minimum(act_pos, max(len(c.ast) - 1, 0)), 0), mask=~has_call)
    c.o_callid = c.call_id.take(idx) if len(c.ast) else pa.nulls(len(ost), pa.string())
    proto = (k >= P_NOCALL) & (k <= P_UNKNOWN)
    after, variant, last, term = c.pg_after[ost], c.variant[ost], c.last[ost], c.term_ep[ost]
    page_code = after * N_VARIANT + variant
    # text code into the chunk's observation pool: static texts, then the action-limit text, then rewards
    rewards, r_code = np.unique(c.reward, return_inverse=True)
    n_static = len(P.obs_static)
    code = page_code.copy()
    fb = c.fb[ost]
    code = np.where(fb >= 0, P.o_invalid + fb * 5 * N_VARIANT + page_code, code)
    code = np.where(proto, P.o_proto + c.proto[ost], code)
    code = np.where(last & (term == TERM_PURCHASE), n_static + 1 + r_code[c.ep[ost]], code)
    code = np.where(last & (term == TERM_LIMIT), n_static, code)
    code = np.where(k == TERMINATE, P.o_term + (term == TERM_BUDGET), code)
    c.obs_pool = pa.concat_arrays([
        pa.array(P.obs_static, pa.string()),
        pa.array([f"Episode over: the action limit ({action_limit}) was reached without a purchase."], pa.string()),
        pa.array([f"Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] {r:.4f}" for r in rewards],
                 pa.string())])
    c.o_code = code
    terminal = last & c.completed[c.ep[ost]]
    return _table("observations", {
        "episode_id": c.step_eid.take(pa.array(ost)), "attempt": pa.array(c.attempt[c.ep[ost]]),
        "agent_id": _pick(["main"], np.zeros(len(ost))), "step_idx": pa.array(c.t[ost].astype(np.int32)),
        "call_id": c.o_callid, "observation_type": _pick(["environment", "error"], proto),
        "content": c.obs_pool.take(pa.array(code)),
        "observation_state": _null_where(P.page_state_arr.take(pa.array(page_code)), proto),
        "page": _pick([*PAGES, None], np.where(proto, len(PAGES), after)),
        "is_error": pa.array(proto | (fb >= 0)),
        "reward": pa.array(np.where(terminal, c.reward[c.ep[ost]], np.nan), from_pandas=True),
        "done": pa.array(terminal),
    }, load_id)


def _messages_table(c: _C, jobs: _JobList, load_id: str) -> pa.Table:
    P, E, S = _pools(), c.E, c.S
    K, bank = c.K, c.bank
    c.sys_pool = [SYSTEM_PROMPT + "".join(f"\n\n## Skill {bank[j][0]}\n{_skill_text(bank[j][0])}"
                                          for j in range(K) if pat >> j & 1) for pat in range(1 << K)]
    tasks, t_code = np.unique(c.tix, return_inverse=True)
    user_pool = [f"Instruction: {jobs.instructions[i]}\nPersona: {_PERSONAS[i % len(_PERSONAS)]}\n"
                 f"Observation: {P.page_text[i % N_VARIANT]}" for i in tasks.tolist()]
    # one pool for every message text: observations | system prompts | tasks | assistant texts
    n_obs_pool = len(c.obs_pool)
    pool = pa.concat_arrays([c.obs_pool, pa.array(c.sys_pool, pa.string()), pa.array(user_pool, pa.string()),
                             pa.array(ASSISTANT_TEXT, pa.string())])
    off_sys, off_user = n_obs_pool, n_obs_pool + len(c.sys_pool)
    off_asst = off_user + len(user_pool)
    # tool_calls JSON of each step, from its action rows
    frag = _cat('{"id":"', pc.fill_null(c.call_id, ""), '",', P.frag.take(pa.array(c.apool)), "}")
    lists = pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(c.n_calls)]).astype(np.int32)), frag)
    tc = _null_where(_cat("[", pc.binary_join(lists, ","), "]"), (c.n_calls == 0) | (c.kind == TERMINATE))
    follow = np.nonzero(c.o_kind != TERMINATE)[0]  # every observation but the terminate payload
    n = int(c.msgs_per_ep.sum())
    ep_off = np.cumsum(c.msgs_per_ep) - c.msgs_per_ep
    pos_sys, pos_user = ep_off, ep_off + 1
    pos_asst = (ep_off[c.ep] + c.pmc)[c.has_asst]
    f_step = c.ost[follow]
    pos_f = ep_off[c.ep[f_step]] + c.pmc[f_step] + 1 + c.o_call[follow]
    content = np.empty(n, np.int64)
    content[pos_sys] = off_sys + c.patterns
    content[pos_user] = off_user + t_code
    content[pos_asst] = off_asst + c.asst[c.has_asst]
    content[pos_f] = c.o_code[follow]
    role = np.empty(n, np.int64)  # 0 system, 1 user, 2 assistant, 3 tool
    role[pos_sys], role[pos_user], role[pos_asst] = 0, 1, 2
    role[pos_f] = np.where(c.o_kind[follow] == P_NOCALL, 1, 3)
    step_of = np.full(n, -1, np.int64)  # assistant rows: their step
    step_of[pos_asst] = np.arange(S)[c.has_asst]
    obs_of = np.full(n, -1, np.int64)  # follow-up rows: their observation
    obs_of[pos_f] = follow
    ep_of = np.repeat(np.arange(E), c.msgs_per_ep)
    msg_idx = np.arange(n) - ep_off[ep_of]
    is_a, is_f = step_of >= 0, obs_of >= 0
    return _table("messages", {
        "episode_id": c.eid_arr.take(pa.array(ep_of)), "attempt": pa.array(c.attempt[ep_of]),
        "agent_id": _pick(["main"], np.zeros(n)), "msg_idx": pa.array(msg_idx.astype(np.int32)),
        "role": _pick(["system", "user", "assistant", "tool"], role), "content": pool.take(pa.array(content)),
        "reasoning_content": pa.nulls(n, pa.string()),  # the runner does not send reasoning back
        "tool_calls": tc.take(pa.array(np.maximum(step_of, 0), mask=~is_a)),
        "tool_call_id": c.o_callid.take(pa.array(np.maximum(obs_of, 0), mask=~is_f)),
    }, load_id)


def _episode_tables(c: _C, spec: RunSpec, load_id: str) -> list[tuple[str, pa.Table]]:
    P, E, K, bank, st = _pools(), c.E, c.K, c.bank, c.st_start
    is_env = c.kind <= INVALID
    n_failed = int((~c.completed).sum())
    stages = np.array(["reset", "model", "step", "runtime"], dtype=object)
    stage = np.full(E, None, object)
    stage[~c.completed] = np.where(c.L[~c.completed] == 0, "reset", stages[1 + c.rng.integers(0, 3, n_failed)])
    exc = {"reset": "EnvProtocolError", "model": "ModelUnavailable", "step": "ReadTimeout", "runtime": "RuntimeError"}
    err_type = np.array([exc.get(s) for s in stage], dtype=object)
    err_msg = np.array([f"{exc[s]} during {s}; retry with resume" if s else None for s in stage], dtype=object)
    prompt_hashes = [_sha(s)[:16] for s in c.sys_pool]
    skill_ids = [json.dumps([bank[j][0] for j in range(K) if pat >> j & 1]) for pat in range(1 << K)]
    detail = _cat('{"r_type":', _istr(c.r_type), ',"r_att":', _istr(np.round(c.r_att, 6)),
                  ',"r_price":', _istr(c.r_price), "}")
    done = c.completed

    def f64(x):
        return pa.array(np.where(done, x, np.nan), from_pandas=True)

    def red(x):
        return _reduce(np.asarray(x, dtype=float), st, c.L)

    cols = {
        "episode_id": c.eid_arr, "attempt": pa.array(c.attempt), "experiment": _pick([spec.run_id], np.zeros(E)),
        "task_id": pa.array(c.task_ids.astype(np.int64)), "sample_id": pa.array(c.sample_ids.astype(np.int32)),
        "seed": pa.array(c.task_ids.astype(np.int64) * 1_000_003 + c.sample_ids * 7 + spec.experiment_seed),
        "split": _pick([spec.split], np.zeros(E)), "status": _pick(["failed", "completed"], done),
        "done": pa.array(done), "reward": f64(c.reward), "r_type": f64(c.r_type), "r_att": f64(c.r_att),
        "r_option": f64(c.r_opt), "r_price": f64(c.r_price),
        "right_product": pa.array(c.right, mask=~done), "purchase_asin": _null_where(
            pa.array(P.asins, pa.string()).take(pa.array(c.asin_idx)), ~c.purchased),
        "reward_detail": _null_where(detail, ~done), "termination_reason": _pick(TERM_NAMES, c.term),
        "model_steps": pa.array(c.L.astype(np.int32)),
        "protocol_errors": pa.array(red(c.proto >= 0).astype(np.int32)),
        "total_actions": pa.array(red(is_env).astype(np.int32)),
        "invalid_actions": pa.array(red(is_env & ~c.valid).astype(np.int32)),
        "tokens_in": pa.array(red(c.tokens_in).astype(np.int64)), "tokens_out": pa.array(red(c.tokens_out).astype(np.int64)),
        "instruction": pa.array(c.user_instr, pa.string()), "persona": pa.array(c.user_persona, pa.string()),
        "prompt_hash": _pick(prompt_hashes, c.patterns), "skill_ids": _pick(skill_ids, c.patterns),
        "error_stage": pa.array(stage, pa.string()), "error_type": pa.array(err_type, pa.string()),
        "error_message": pa.array(err_msg, pa.string()),
        "started_at": _ts(c.ep_start_us), "finished_at": _ts(c.ep_start_us + (c.dur_s * 1e6).astype(np.int64)),
        "duration_s": pa.array(c.dur_s), "source_format": _pick(["shopsim-wh-runner"], np.zeros(E)),
    }
    episodes = _table("episodes", cols, load_id)
    # retried episodes: a first attempt that failed at reset (no child rows) before the final one
    r_ix = np.nonzero(c.retried)[0]
    nr = len(r_ix)
    first = {k: v.take(pa.array(r_ix)) for k, v in cols.items()}
    first.update({
        "attempt": pa.array(np.ones(nr, np.int16)), "status": _pick(["failed"], np.zeros(nr)),
        "done": pa.array(np.zeros(nr, bool)), "termination_reason": pa.nulls(nr, pa.string()),
        **{k: pa.nulls(nr, pa.float64()) for k in ("reward", "r_type", "r_att", "r_option", "r_price")},
        "right_product": pa.nulls(nr, pa.bool_()), "purchase_asin": pa.nulls(nr, pa.string()),
        "reward_detail": pa.nulls(nr, pa.string()),
        **{k: pa.array(np.zeros(nr, np.int32)) for k in ("model_steps", "protocol_errors", "total_actions", "invalid_actions")},
        **{k: pa.array(np.zeros(nr, np.int64)) for k in ("tokens_in", "tokens_out")},
        "error_stage": _pick(["reset"], np.zeros(nr)), "error_type": _pick(["ConnectError"], np.zeros(nr)),
        "error_message": _pick(["ConnectError during reset; retried"], np.zeros(nr)), "duration_s": pa.array(np.full(nr, 0.05)),
    })
    episodes = pa.concat_tables([episodes, _table("episodes", first, load_id)]).sort_by(
        [("episode_id", "ascending"), ("attempt", "ascending")])
    f_ix = np.nonzero(~done)[0]
    nf = len(f_ix)
    failures = _table("failures", {
        "episode_id": pa.concat_arrays([c.eid_arr.take(pa.array(f_ix)), c.eid_arr.take(pa.array(r_ix))]),
        "attempt": pa.array(np.concatenate([c.attempt[f_ix], np.ones(nr, np.int16)]).astype(np.int16)),
        "stage": pa.array(np.concatenate([stage[f_ix], np.full(nr, "reset", object)]), pa.string()),
        "exception_type": pa.array(np.concatenate([err_type[f_ix], np.full(nr, "ConnectError", object)]), pa.string()),
        "message": pa.array(np.concatenate([err_msg[f_ix], np.full(nr, "ConnectError during reset; retried", object)]),
                            pa.string()),
        "traceback": _pick(["Traceback (most recent call last):\n  ... (synthetic)"], np.zeros(nf + nr)),
        "occurred_at": _ts(np.concatenate([c.ep_start_us[f_ix], c.ep_start_us[r_ix] - 1_000_000])),
    }, load_id).sort_by([("episode_id", "ascending"), ("attempt", "ascending")])
    agents = _table("agents", {
        "episode_id": c.eid_arr, "attempt": pa.array(c.attempt), "agent_id": _pick(["main"], np.zeros(E)),
        "agent_role": _pick(["main"], np.zeros(E)), "depth": pa.array(np.zeros(E, np.int16)),
        "model": _pick([spec.model_name], np.zeros(E)),
    }, load_id)
    two = np.tile([0, 1], E)
    schemas = [_tool_schema("click"), _tool_schema("search")]
    tools = _table("tools", {  # the two schemas offered (search only on the search page)
        "episode_id": c.eid_arr.take(pa.array(np.repeat(np.arange(E), 2))),
        "attempt": pa.array(np.repeat(c.attempt, 2)), "agent_id": _pick(["main"], np.zeros(2 * E)),
        "name": _pick(["click", "search"], two), "description": _pick([s["description"] for s in schemas], two),
        "parameters": _pick([_canon(s["parameters"]) for s in schemas], two),
        "tool_type": _pick(["execution"], np.zeros(2 * E)),
        "schema_hash": _pick([TOOL_HASH["click"], TOOL_HASH["search"]], two),
    }, load_id)
    out = [("episodes", episodes), ("failures", failures), ("agents", agents), ("tools", tools)]
    if K:
        se, sk = np.nonzero(c.mask)
        ids = [b[0] for b in bank]
        out.append(("skills_selected", _table("skills_selected", {
            "episode_id": c.eid_arr.take(pa.array(se)), "attempt": pa.array(c.attempt[se]),
            "skill_id": _pick(ids, sk), "skill_version": _pick(["1"], np.zeros(len(se))),
            "scope": _pick(["global"], np.zeros(len(se))), "content_hash": _pick([_sha(_skill_text(i)) for i in ids], sk),
            "content": _pick([_skill_text(i) for i in ids], sk),
            "metadata": _pick([json.dumps({"mask_rate": spec.mask_rate, "included": True})], np.zeros(len(se))),
        }, load_id)))
    return out


@dataclass(frozen=True)
class _RunWrite:
    """One run as :func:`generate` writes it, chunk by chunk."""

    spec: RunSpec
    run_no: int
    jobs: _JobList
    load_id: str
    t0_us: int  # the run's first episode start (microseconds since the epoch)


def _chunk_tables(run: _RunWrite, shape: WarehouseSpec, chunk_no: int, sel: slice) -> list[tuple[str, pa.Table]]:
    spec, run_no, jobs, load_id, t0_us = run.spec, run.run_no, run.jobs, run.load_id, run.t0_us
    steps, action_limit = shape.steps, shape.action_limit
    c = _C()
    c.rng = np.random.default_rng([shape.seed, run_no, chunk_no, 17])
    _outcomes(c, spec, jobs, sel, steps, action_limit)
    c.user_instr = [jobs.instructions[i] for i in c.tix.tolist()]
    c.user_persona = [_PERSONAS[i % len(_PERSONAS)] for i in c.tix.tolist()]
    _step_arrays(c, spec, action_limit, t0_us, chunk_no, run_no)
    out = [("steps", _steps_table(c, spec, load_id)), ("actions", _actions_table(c, load_id)),
           ("observations", _observations_table(c, action_limit, load_id)),
           ("messages", _messages_table(c, jobs, load_id))]
    return out + _episode_tables(c, spec, load_id)


def _skill_text(skill_id: str) -> str:
    return f"When shopping, apply {skill_id.replace('-', ' ')}: read every option of the item page before buying."


# ---------------------------------------------------------------------------------------------- entry


def generate(root: str | os.PathLike, n_episodes: int, shape: WarehouseSpec | None = None) -> SynthInfo:
    """Write ``n_episodes`` shop episodes split evenly over ``shape.runs`` (plus ``shape.coding_episodes`` coding
    sessions); ``shape`` defaults to ``WarehouseSpec()``.

    Re-generating a run id replaces it. Returns what was written (run specs, tasks, repeats).
    """
    from .coding import coding_tables

    shape = shape or WarehouseSpec()
    runs, seed, repeats, chunk_episodes = shape.runs, shape.seed, shape.repeats, shape.chunk_episodes
    specs = default_runs(runs) if isinstance(runs, int) else list(runs)
    if not specs:
        raise ValueError("runs must name at least one run")
    per_run = max(1, n_episodes // len(specs))
    n_tasks = max(1, per_run // repeats)
    action_limit = shape.action_limit
    wh = Warehouse(root)
    job_lists: dict[str, _JobList] = {}
    t0 = datetime(2026, 1, 5, tzinfo=UTC)
    t0_us = int(t0.timestamp() * 1e6)
    with wh.writer() as w:
        for run_no, spec in enumerate(specs):
            jobs = job_lists.get(spec.job_list)
            if jobs is None:
                jobs = job_lists[spec.job_list] = _job_list(spec.job_list, n_tasks, repeats, seed)
            load_id = f"load-{spec.run_id}"
            created = datetime.fromtimestamp(t0.timestamp() + 3600 * run_no, UTC)
            n = len(jobs.episode_ids)
            run = _RunWrite(spec, run_no, jobs, load_id, t0_us + run_no * 3_600_000_000)
            for chunk_no, start in enumerate(range(0, n, chunk_episodes)):
                tables = _chunk_tables(run, shape, chunk_no, slice(start, min(n, start + chunk_episodes)))
                if chunk_no == 0:
                    tables += [("runs", _runs_row(spec, jobs, action_limit, created, load_id)),
                               ("loads", _loads_row(load_id, created, n))]
                w.commit([(name, spec.run_id, tbl) for name, tbl in tables],
                         replace_runs=[spec.run_id] if chunk_no == 0 else ())
                del tables
            if shape.compact:
                w.compact(spec.run_id)
        coding_run = None
        if shape.coding_episodes:
            coding_run = "synth-coding"
            w.commit([(name, coding_run, tbl) for name, tbl in coding_tables(shape.coding_episodes, seed, _table)],
                     replace_runs=[coding_run])
    effects = {sid: eff for bank in SKILL_BANKS.values() for sid, eff in bank}
    return SynthInfo(str(root), specs, coding_run, n_tasks, repeats, n_tasks * repeats, effects)
