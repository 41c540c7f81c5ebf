"""Paired comparison of a bare and an equipped run, as ShopSimRL's ``scripts/compare_shopsimrl_runs.py`` does
it (docs/gate.md "compare"): the same numbers, digit for digit, from the warehouse.

* Pairs: the final attempt of every job (split, task_id, sample_id); both runs must hold the same jobs, every
  one completed (resume a run with failures first); the bare run has no skills, every equipped episode got
  the same skills (one frozen bank), and the runs differ in nothing but the skills (``gate.check_pairable``).
* Per-job metrics: ``reward`` and the reward components ``r_*``, ``steps`` (model turns),
  ``protocol_error_rate`` and ``policy_failure_rate`` (per model turn), ``invalid_action_rate`` (per environment
  action), ``prompt_tokens`` / ``completion_tokens`` / ``total_tokens`` and ``duration_ms``; a metric is compared
  when every job of both runs has it.
* For each metric in name order: means (``statistics.fmean``), the mean of ``equipped - bare`` and a 95 % task-level
  paired percentile bootstrap: ``random.Random(int.from_bytes(sha256(f"{seed}:{metric}").digest()[:8], "big"))``
  draws ``randrange(n)`` n times per resample, the resample mean is the left-to-right float sum of the drawn
  differences over n, the sorted resample means give the interval ends by :func:`.stats.percentile_linear` at
  ``(1 - level) / 2`` and ``1 - (1 - level) / 2``.

The draws are Python's Mersenne Twister words taken in bulk through numpy's MT19937 with the same state, and the
sums run over all resamples at once, one draw position at a time: the same additions in the same order as the
per-resample loop (tests/test_compare.py holds the two equal), about a hundred times faster.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from statistics import fmean

import numpy as np

from ..core.errors import ShopsimError
from .gate import Alignment, GateRefused, alignment
from .stats import percentile_linear

SCHEMA_VERSION = "shopsimrl-paired-run-comparison-v1"
DEFAULT_SAMPLES = 10_000
DEFAULT_SEED = 20260901
REQUIRED = ("reward", "r_strict", "r_success")
COMPONENTS = ("r_type", "r_att", "r_option", "r_price", "r_loose", "r_strict", "r_success")
PREFERRED = ("reward", "r_strict", "r_success", "steps", "invalid_action_rate", "protocol_error_rate", "total_tokens")
SUMMATIONS = ("sequential", "neumaier")


class ComparisonError(ShopsimError):
    """The two runs cannot be compared."""


def metric_seed(seed: int, metric: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{metric}".encode()).digest()[:8], "big")


# ------------------------------------------------------------------------------------------ bootstrap


def _draws(seed: int, n: int, count: int, block: int):
    """``count`` values of ``random.Random(seed).randrange(n)`` in order, yielded in arrays of ``block``."""
    state = random.Random(seed).getstate()[1]
    gen = np.random.MT19937()
    gen.state = {"bit_generator": "MT19937", "state": {"key": np.array(state[:624], dtype=np.uint32), "pos": state[624]}}
    shift = 32 - n.bit_length()  # randrange(n) = getrandbits(n.bit_length()) until below n (one word each)
    pending = np.empty(0, dtype=np.int64)
    given = 0
    while given < count:
        want = min(block, count - given)
        while len(pending) < want:
            need = want - len(pending)
            words = gen.random_raw(int(need * (1 << n.bit_length()) / n * 1.05) + 64) >> np.uint64(shift)
            pending = np.concatenate([pending, words[words < n].astype(np.int64)])
        yield pending[:want]
        pending = pending[want:]
        given += want


def bootstrap_means(differences, samples: int, seed: int, summation: str = "neumaier") -> np.ndarray:
    """The ``samples`` resample means, in draw order (not sorted)."""
    if summation not in SUMMATIONS:
        raise ValueError(f"summation must be one of {SUMMATIONS}, not {summation!r}")
    values = np.asarray(differences, dtype=float)
    n = len(values)
    if n == 0:
        raise ComparisonError("no pairs to bootstrap")
    rows = max(1, min(samples, 4_000_000 // n))
    out = np.empty(samples)
    done = 0
    for chunk in _draws(seed, n, samples * n, rows * n):
        picked = np.ascontiguousarray(values[chunk.reshape(-1, n)].T)  # row j = the j-th draw of every resample
        total = np.zeros(picked.shape[1])
        comp = np.zeros(picked.shape[1])
        for x in picked:  # left to right, as sum() adds them
            if summation == "sequential":
                total += x
            else:  # CPython >= 3.12 sum(): Neumaier's compensated sum, compensation added at the end
                t = total + x
                comp += np.where(np.abs(total) >= np.abs(x), (total - t) + x, (x - t) + total)
                total = t
        if summation == "neumaier":
            total = np.where((comp != 0) & np.isfinite(comp), total + comp, total)
        out[done:done + len(total)] = total / n
        done += len(total)
    return out


def bootstrap_mean_ci(differences, samples: int = DEFAULT_SAMPLES, confidence_level: float = 0.95,
                      seed: int = 0, summation: str = "neumaier") -> list[float]:
    means = np.sort(bootstrap_means(differences, samples, seed, summation))
    tail = (1.0 - confidence_level) / 2.0
    return [percentile_linear(means, tail), percentile_linear(means, 1.0 - tail)]


# ------------------------------------------------------------------------------------------ data

_EPISODES_SQL = """
WITH pf AS (
    SELECT episode_id, attempt, count(policy_failure) AS policy_failures
    FROM steps WHERE run_id = $run GROUP BY episode_id, attempt
)
SELECT e.split, e.task_id, e.sample_id, e.status, e.reward, {components}, e.model_steps, e.protocol_errors,
       e.total_actions, e.invalid_actions, e.tokens_in, e.tokens_out, e.duration_s, e.skill_ids,
       coalesce(pf.policy_failures, 0) AS policy_failures
FROM episodes AS e LEFT JOIN pf ON pf.episode_id = e.episode_id AND pf.attempt = e.attempt
WHERE e.run_id = $run AND e.task_id IS NOT NULL
ORDER BY e.split, e.task_id, e.sample_id
""".format(components=", ".join(f"e.{c}" for c in COMPONENTS))


def _episodes(con, run: str) -> dict[tuple[str, int, int], dict]:
    cur = con.execute(_EPISODES_SQL, {"run": run})
    cols = [d[0] for d in cur.description]
    out: dict[tuple[str, int, int], dict] = {}
    for row in cur.fetchall():
        rec = dict(zip(cols, row, strict=True))
        out[(str(rec["split"]), int(rec["task_id"]), int(rec["sample_id"]))] = rec
    return out


def _num(v) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def job_metrics(rec: dict) -> dict[str, float]:
    """One job's metrics (ShopSimRL's per-task metrics, from the warehouse's columns)."""
    m: dict[str, float] = {}
    for name in ("reward", *COMPONENTS):
        v = _num(rec.get(name))
        if v is not None:
            m[name] = v
    steps = rec.get("model_steps")
    if steps is not None:
        m["steps"] = float(steps)
        m["protocol_error_rate"] = (rec.get("protocol_errors") or 0) / steps if steps else 0.0
        m["policy_failure_rate"] = (rec.get("policy_failures") or 0) / steps if steps else 0.0
    actions = rec.get("total_actions")
    if actions is not None:
        m["invalid_action_rate"] = (rec.get("invalid_actions") or 0) / actions if actions else 0.0
    tin, tout = rec.get("tokens_in"), rec.get("tokens_out")
    if tin is not None:
        m["prompt_tokens"] = float(tin)
    if tout is not None:
        m["completion_tokens"] = float(tout)
    if tin is not None and tout is not None:
        m["total_tokens"] = float(tin + tout)
    d = _num(rec.get("duration_s"))
    if d is not None:
        m["duration_ms"] = d * 1000.0
    return m


def _skill_ids(rec: dict) -> list:
    try:
        ids = json.loads(rec.get("skill_ids") or "[]")
    except ValueError:
        return []
    return ids if isinstance(ids, list) else []


def _align(con, bare: str, equipped: str, assume_aligned: bool = False) -> tuple[list, dict, dict, list, Alignment]:
    try:
        _, _, aligned = alignment(con, bare, equipped, allow_missing_checkpoint=True, assume_aligned=assume_aligned)
    except GateRefused as exc:
        raise ComparisonError(str(exc).replace("treatment", "equipped")) from exc
    n_skills = con.execute("SELECT count(*) FROM skills_selected WHERE run_id = ?", [equipped]).fetchone()[0]
    if not n_skills:
        raise ComparisonError(f"equipped run {equipped!r} injected no skills; compare a run with skills.path set "
                              "against its bare run")
    b, e = _episodes(con, bare), _episodes(con, equipped)
    if not b or set(b) != set(e):
        missing, extra = sorted(set(b) - set(e))[:5], sorted(set(e) - set(b))[:5]
        raise ComparisonError(f"bare and equipped jobs do not align: only in bare {missing}, only in equipped {extra}; "
                              "run both with the same jobs")
    keys = sorted(b)
    incomplete = [k for k in keys if b[k]["status"] != "completed" or e[k]["status"] != "completed"]
    if incomplete:
        raise ComparisonError(f"{len(incomplete)} job(s) are not completed in both runs (first: {incomplete[:5]}); "
                              "resume the runs (shopsim-wh run CONFIG) until every job is completed")
    frozen = None
    for k in keys:
        if _skill_ids(b[k]):
            raise ComparisonError(f"bare episode {k} has skills; the bare run must be skill-free")
        ids = _skill_ids(e[k])
        if frozen is None:
            frozen = ids
        elif ids != frozen:
            raise ComparisonError(f"equipped episode {k} got skills {ids}, not the frozen {frozen} of the first job; "
                                  "compare runs of one fixed skill bank (a masked run is for `shopsim-wh gate`)")
    return keys, b, e, frozen or [], aligned


def _alignment_block(al: Alignment, pairs: int, frozen: list) -> dict:
    """ShopSimRL's comparison.json ``alignment``: ``plan`` (the identity checks; ``status`` ``assumed`` when the
    caller waived them) and ``traces`` (the per-job checks, with the provenance the runs' records observed)."""
    d = al.to_dict()
    plan = {"status": al.status, "checked_fields": al.checked, "unchecked_fields": al.unchecked,
            "vocabulary": al.vocabulary,
            "identity_sources": {"bare": al.sources[0], "equipped": al.sources[1]},
            "bare_plan_fingerprint": d["bare_plan_fingerprint"], "equipped_plan_fingerprint": d["treatment_plan_fingerprint"],
            "notes": al.notes}
    traces = {"status": "matched", "pairs": pairs,
              "checked_fields": ["split", "task_id", "sample_id", "status", "skill_ids"], "equipped_chunk_ids": frozen}
    if any(al.observed):
        traces["bare"], traces["equipped"] = ({k: [v] for k, v in o.items()} for o in al.observed)
    return {"plan": plan, "traces": traces, "assumed_aligned": al.assumed}


def _absolute(con, run: str) -> dict:
    cur = con.execute("SELECT planned, completed, failed, coverage, reward_mean, reward_sem, r_success_mean "
                      "FROM run_metrics WHERE run_id = ?", [run])
    cols = [d[0] for d in cur.description]
    r = {c: (None if isinstance(v, float) and math.isnan(v) else v) for c, v in zip(cols, cur.fetchone(), strict=True)}
    return {"counts": {"requested": r["planned"], "completed": r["completed"], "failed": r["failed"],
                       "coverage": r["coverage"]},
            "primary": {"reward_mean": r["reward_mean"], "reward_sem": r["reward_sem"],
                        "success_rate": r["r_success_mean"]}}


@dataclass(frozen=True)
class CompareOptions:
    """How :func:`compare` bootstraps and pairs: resamples, seed, confidence level, summation, alignment.

    ``summation``: how a resample's differences are added, ``sequential`` (CPython <= 3.11 ``sum``, which the
    published ShopSimRL comparisons match) or ``neumaier`` (CPython >= 3.12). ``assume_aligned``: compare without
    checking the runs' identities (``alignment.plan.status`` is then ``assumed``).
    """

    samples: int = DEFAULT_SAMPLES  # bootstrap resamples
    seed: int = DEFAULT_SEED  # hashed with each metric's name (metric_seed)
    confidence_level: float = 0.95
    summation: str = "neumaier"  # one of SUMMATIONS
    assume_aligned: bool = False


def compare(con_or_warehouse, bare: str, equipped: str, options: CompareOptions | None = None) -> dict:
    """Equipped minus bare over the paired jobs, in the shape of ShopSimRL's comparison.json.

    ``options``: the bootstrap's resamples, seed, confidence level and summation, and whether to assume the
    runs aligned (:class:`CompareOptions`; default: its defaults).
    """
    o = options or CompareOptions()
    samples, seed, confidence_level, summation = o.samples, o.seed, o.confidence_level, o.summation
    if samples < 1:
        raise ComparisonError(f"samples must be positive, not {samples}")
    if not 0.0 < confidence_level < 1.0:
        raise ComparisonError(f"confidence_level must be between 0 and 1, not {confidence_level}")
    if summation not in SUMMATIONS:
        raise ComparisonError(f"summation must be one of {', '.join(SUMMATIONS)}, not {summation!r}")
    from ..engines.db import as_connection
    from .gate import resolve_run

    con = as_connection(con_or_warehouse)
    bare, equipped = resolve_run(con, bare), resolve_run(con, equipped)  # run ids, or experiments of one run
    keys, b, e, frozen, aligned = _align(con, bare, equipped, o.assume_aligned)
    bm = {k: job_metrics(b[k]) for k in keys}
    em = {k: job_metrics(e[k]) for k in keys}
    names = sorted(set.intersection(*(set(bm[k]) & set(em[k]) for k in keys)))
    missing = [m for m in REQUIRED if m not in names]
    if missing:
        raise ComparisonError(f"cannot compare required metric(s) {', '.join(missing)}: some paired episodes lack them "
                              "(a source without reward components?)")
    metrics = {}
    for name in names:
        bv = [bm[k][name] for k in keys]
        ev = [em[k][name] for k in keys]
        diff = [y - x for x, y in zip(bv, ev, strict=True)]
        metrics[name] = {
            "bare_mean": fmean(bv), "equipped_mean": fmean(ev), "mean_difference": fmean(diff),
            "confidence_interval": bootstrap_mean_ci(diff, samples, confidence_level, metric_seed(seed, name), summation),
            "pairs": len(keys),
        }
    return {
        "schema_version": SCHEMA_VERSION,
        "created_at": datetime.now(UTC).isoformat(),
        "runs": {"bare": bare, "equipped": equipped},
        "alignment": _alignment_block(aligned, len(keys), frozen),
        "absolute": {"bare": _absolute(con, bare), "equipped": _absolute(con, equipped)},
        "paired": {
            "pairs": len(keys),
            "difference_direction": "equipped_minus_bare",
            "metric_aggregation": "mean_of_task_level_values",
            "bootstrap": {"method": "task_level_paired_percentile", "samples": samples, "seed": seed,
                          "confidence_level": confidence_level, "summation": summation},
            "metrics": metrics,
        },
    }


def to_table(result: dict) -> str:
    """The comparison as plain text: preferred metrics first, then the rest by name."""
    p = result["paired"]
    metrics = p["metrics"]
    order = [m for m in PREFERRED if m in metrics] + [m for m in metrics if m not in PREFERRED]
    width = max(len("metric"), *(len(m) for m in order))
    bs = p["bootstrap"]
    lines = [f"paired comparison: equipped {result['runs']['equipped']} minus bare {result['runs']['bare']}",
             f"pairs {p['pairs']}   bootstrap {bs['samples']} task-level paired percentile (seed {bs['seed']}), "
             f"{bs['confidence_level']:.0%} interval",
             f"{'metric':<{width}} {'bare':>14} {'equipped':>14} {'difference':>14}   interval"]
    for m in order:
        r = metrics[m]
        lo, hi = r["confidence_interval"]
        lines.append(f"{m:<{width}} {r['bare_mean']:>14.6f} {r['equipped_mean']:>14.6f} {r['mean_difference']:>+14.6f}"
                     f"   [{lo:+.6f}, {hi:+.6f}]")
    al = result.get("alignment", {}).get("plan", {})
    lines.append(f"alignment {al.get('status', '-').upper()}: checked {', '.join(al.get('checked_fields') or []) or 'nothing'}")
    lines += [f"note: {n}" for n in al.get("notes") or []]
    return "\n".join(lines)
