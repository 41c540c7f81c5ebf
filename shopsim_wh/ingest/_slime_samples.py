"""One slime ``Sample.to_dict()`` -> its rows of ``training_samples``, ``training_tokens`` and ``training_spans``
(docs/ingest.md, "slime rollout dumps"; the columns are documented in shopsim_wh/core/schema.py).

:func:`parse` checks a sample and names its episode; :func:`rows` builds the rows once the episode's run, attempt
and the steps before it are known. Values are kept exactly: token ids as int32, the mask as int8, log-probabilities
as float64, and every field no column holds in ``metadata`` (the sample's own ``metadata`` under the key
``metadata``, every other field under its own name), so that the sample can be written back out whole.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import orjson

INT32 = 2 ** 31
STATUSES = ("pending", "completed", "truncated", "aborted", "failed")
# ShopSimRL's trace layout: <shopsim_training_output_dir>/<round>/group-{g:09d}/rollout-{index}.json
# (full-skill-retry.json: the group's diagnostic retry; triage.json: its failure triage, not an episode)
TRACE_TAIL = re.compile(r"(?:^|[/\\])(?P<round>[^/\\]+)[/\\]group-(?P<group>\d{9,})[/\\]"
                        r"(?P<name>rollout-(?P<index>\d+)|full-skill-retry|triage)\.json$")
# the fields a column holds (everything else of the sample goes into training_samples.metadata)
COLUMN_FIELDS = frozenset({"group_index", "index", "prompt", "tokens", "response", "response_length", "label",
                           "reward", "loss_mask", "weight_versions", "rollout_log_probs", "remove_sample",
                           "teacher_log_probs", "status", "rollout_id", "metadata", "advantage"})


class Invalid(Exception):
    """The sample breaks slime's own invariants; the message says which. ``episode`` is ``(round, episode_id)`` when
    the sample still names its episode, ``model_turns`` the runs of 1s of its loss mask when they can be counted
    (the episode's later samples keep their places and steps)."""

    episode: tuple[str | None, str] | None = None
    model_turns: int | None = None


@dataclass
class Parsed:
    """A checked sample: its arrays, and the episode it belongs to (run and episode ids by the one rule)."""

    pos: int
    d: dict
    tokens: list[int]
    response_length: int
    loss_mask: list[int] | None
    logprobs: list[float] | None
    ref_logprobs: list[float] | None
    meta: dict
    trace_path: str | None
    tail: str | None  # <round>/group-…/rollout-N.json, when the recorded path has ShopSimRL's layout
    round: str | None
    episode_id: str
    extra: dict = field(default_factory=dict)
    run_id: str = ""  # set by the caller: the run id rule needs the ingest's --source


def _int(v, what: str, lo: int = -(2 ** 63), hi: int = 2 ** 63) -> int | None:
    if v is None:
        return None
    if type(v) is not int or not lo <= v < hi:
        raise Invalid(f"{what} must be an integer, got {type(v).__name__} {str(v)[:40]!r}")
    return v


def _ids(v) -> list[int]:
    if not isinstance(v, list):
        raise Invalid(f"tokens must be a list of token ids, got {type(v).__name__}")
    if not all(type(t) is int and 0 <= t < INT32 for t in v):
        bad = next(t for t in v if not (type(t) is int and 0 <= t < INT32))
        raise Invalid(f"tokens must hold int32 token ids, got {str(bad)[:40]!r}")
    return v


def _floats(v, what: str, n: int) -> list[float] | None:
    if v is None:
        return None
    if not isinstance(v, list) or not all(type(x) in (int, float) for x in v):
        raise Invalid(f"{what} must be a list of numbers")
    if len(v) != n:
        raise Invalid(f"len({what}) = {len(v)} but response_length = {n}: they must be equal")
    return [float(x) for x in v]


def episode_of(d: dict, meta: dict) -> tuple[str | None, str | None, str | None, str]:
    """``(trace_path, tail, round, episode_id)``: from the recorded ShopSimRL trace path when it has the layout
    (``rollout-{i}.json`` -> ``train-group-{g:09d}-sample-{i:09d}``, ShopSimRL's own episode id), else from the
    sample's ``group_index`` and ``rollout_id`` (or ``index``)."""
    path = meta.get("shopsim_trace_path")
    path = path if isinstance(path, str) and path else None
    m = TRACE_TAIL.search(path) if path else None
    if m is not None and m["name"] == "triage":
        m = None
    tail = f"{m['round']}/group-{m['group']}/{m['name']}.json" if m else None
    if m is not None and m["index"] is not None:
        return path, tail, m["round"], f"train-group-{int(m['group']):09d}-sample-{int(m['index']):09d}"
    group = _int(d.get("group_index"), "group_index")
    if group is None:
        group = _int(meta.get("shopsim_group_index"), "metadata.shopsim_group_index")
    index = _int(d.get("rollout_id"), "rollout_id")
    index = _int(d.get("index"), "index") if index is None else index
    if group is None or index is None:
        raise Invalid("no group_index and rollout_id (or index) to name its episode by, and no ShopSimRL trace path")
    suffix = "-full-skill-retry" if m else ""
    return path, tail, (m["round"] if m else None), f"train-group-{group:09d}-sample-{index:09d}{suffix}"


def parse(pos: int, d) -> Parsed:
    """Check one sample (:class:`Invalid` with the reason when it breaks slime's invariants: ``len(loss_mask) ==
    response_length == len(rollout_log_probs)``, ``response_length <= len(tokens)``, int32 ids, a 0/1 mask)."""
    if not isinstance(d, dict):
        raise Invalid(f"a sample must be a dict (Sample.to_dict()), got {type(d).__name__}")
    meta = d.get("metadata") if isinstance(d.get("metadata"), dict) else {}
    for k in ("rollout_id", "index", "group_index"):
        _int(d.get(k), k)
    path, tail, rnd, eid = episode_of(d, meta)
    mask = d.get("loss_mask")
    try:
        tokens, rl, logprobs = _arrays(d, mask)
    except Invalid as e:
        e.episode = (rnd, eid)
        ok = isinstance(mask, list) and all(type(x) is int and x in (0, 1) for x in mask)
        e.model_turns = sum(1 for v, _, _ in mask_runs(mask, len(mask)) if v) if ok else None
        raise
    try:
        ref = _floats(d.get("teacher_log_probs"), "teacher_log_probs", rl)
    except Invalid:
        ref = None  # kept in metadata as it is
    kept = {"teacher_log_probs": ref is None, "advantage": _num(d.get("advantage")) is None}
    extra = {k: v for k, v in d.items() if k not in COLUMN_FIELDS or (kept.get(k) and v is not None)}
    if "metadata" in d and not isinstance(d.get("metadata"), dict):
        extra["metadata"] = d["metadata"]
    return Parsed(pos, d, tokens, rl, mask, logprobs, ref, meta, path, tail, rnd, eid, extra)


def _arrays(d: dict, mask) -> tuple[list[int], int, list[float] | None]:
    tokens = _ids(d.get("tokens"))
    rl = _int(d.get("response_length"), "response_length", 0, INT32)
    if rl is None:
        raise Invalid("response_length is missing")
    if rl > len(tokens):
        raise Invalid(f"response_length = {rl} is more than len(tokens) = {len(tokens)}")
    if mask is not None:
        if not isinstance(mask, list) or not all(type(x) is int and x in (0, 1) for x in mask):
            raise Invalid("loss_mask must be a list of 0 and 1")
        if len(mask) != rl:
            raise Invalid(f"len(loss_mask) = {len(mask)} but response_length = {rl}: they must be equal")
    return tokens, rl, _floats(d.get("rollout_log_probs"), "rollout_log_probs", rl)


def mask_runs(mask: list[int] | None, n: int) -> list[tuple[int, int, int]]:
    """``(value, start, end)`` runs of the response mask (``None``: slime trains every response token)."""
    if mask is None:
        return [(1, 0, n)] if n else []
    runs, start = [], 0
    for i in range(1, n + 1):
        if i == n or mask[i] != mask[start]:
            runs.append((mask[start], start, i))
            start = i
    return runs


@dataclass
class Key:
    """Where a sample's rows go: the episode's run, id and attempt, its position in the episode's fan-out."""

    run_id: str
    episode_id: str
    attempt: int
    sample_idx: int


@dataclass
class DumpFacts:
    """What every sample of one dump shares."""

    rollout_step: int | None
    source_file: str
    file_sha256: str
    tokenizer_id: str | None
    tokenizer_hash: str | None


def _num(v) -> float | None:
    return float(v) if type(v) in (int, float) and not (type(v) is float and math.isnan(v)) else None


def _text(v) -> str | None:
    return v if isinstance(v, str) or v is None else orjson.dumps(v).decode()


def rows(p: Parsed, key: Key, facts: DumpFacts, steps_before: int | None) -> tuple[dict, dict, list[dict], int]:
    """``(training_samples row, training_tokens row, training_spans rows, model turns in this sample)``.

    Spans: the prompt, then the runs of the response's loss mask; the k-th run of 1s of the episode (counting the
    ``steps_before`` runs of its earlier samples) is its model turn ``step_idx = k``, a run of 0s carries the answer
    to the turn before it (``how = 'mask-runs'``). ``steps_before`` None (an earlier sample's mask was unreadable):
    the steps are unknown, ``step_idx`` NULL."""
    d, rl = p.d, p.response_length
    k = {"episode_id": key.episode_id, "attempt": key.attempt, "agent_id": "main", "sample_idx": key.sample_idx}
    reward = d.get("reward")
    rdict = reward if isinstance(reward, dict) else {}
    scalar = _num(rdict.get("reward")) if isinstance(reward, dict) else _num(reward)
    prompt_len = len(p.tokens) - rl
    group = d.get("group_index") if d.get("group_index") is not None else p.meta.get("shopsim_group_index")
    try:
        metadata = orjson.dumps({"metadata": p.meta, **p.extra} if "metadata" not in p.extra else p.extra).decode()
        rewards = None if reward is None else orjson.dumps(reward).decode()
    except (TypeError, orjson.JSONEncodeError) as e:
        raise Invalid(f"a field cannot be stored as JSON: {e}") from None
    sample = {
        **k, "source": "slime", "rollout_step": facts.rollout_step, "rollout_id": d.get("rollout_id"),
        "group_index": group if type(group) is int else None, "sample_index": d.get("index"),
        "tokenizer_id": facts.tokenizer_id, "tokenizer_hash": facts.tokenizer_hash, "prompt_length": prompt_len,
        "response_length": rl, "total_length": len(p.tokens),
        "trainable_tokens": sum(p.loss_mask) if p.loss_mask is not None else rl,
        "status": d.get("status") if isinstance(d.get("status"), str) else _text(d.get("status")),
        "remove_sample": d.get("remove_sample") if isinstance(d.get("remove_sample"), bool) else None,
        "reward": scalar, "r_loose": _num(rdict.get("r_loose")), "r_strict": _num(rdict.get("r_strict")),
        "r_success": _num(rdict.get("r_success")), "rewards": rewards, "advantage": _num(d.get("advantage")),
        "label": _text(d.get("label")), "prompt": _text(d.get("prompt")), "response": _text(d.get("response")),
        "weight_versions": None if d.get("weight_versions") is None else orjson.dumps(d["weight_versions"]).decode(),
        "trace_path": p.trace_path, "metadata": metadata, "source_file": facts.source_file,
        "file_sha256": facts.file_sha256,
    }
    tokens = {**k, "token_ids": p.tokens, "loss_mask": p.loss_mask, "rollout_logprobs": p.logprobs,
              "ref_logprobs": p.ref_logprobs}
    spans = []
    if prompt_len:
        spans.append({**k, "span_idx": 0, "token_start": 0, "token_end": prompt_len, "kind": "prompt",
                      "trainable": False, "step_idx": None, "message_idx": None, "how": "mask-runs"})
    step, turns = steps_before, 0
    for value, start, end in mask_runs(p.loss_mask, rl):
        if value:
            kind, at, turns = "model", step, turns + 1
            step = None if step is None else step + 1
        else:
            kind, at = "inserted", (step - 1 if step else None)
        spans.append({**k, "span_idx": len(spans), "token_start": prompt_len + start, "token_end": prompt_len + end,
                      "kind": kind, "trainable": bool(value), "step_idx": at, "message_idx": None,
                      "how": "mask-runs"})
    return sample, tokens, spans, turns
