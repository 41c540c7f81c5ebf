"""Checks of a ``shopsimrl-episode-v4`` record that must pass before any of its rows is written (a wrong type would
break a whole Arrow batch), and the store's view of a line that fails them.

``validate`` runs one expression per step for the common shape and the field-by-field checks (which name the
field) only when it fails.
"""

from __future__ import annotations

import re

from ._json import RecordError

SCHEMA = "shopsimrl-episode-v4"
SLIME_ID = re.compile(r"train-group-(\d{9,})-sample-(\d{9,})(-full-skill-retry)?")


def _wrong(msg: str) -> RecordError:
    return RecordError("wrong_type", msg)


def _opt(v, types, what: str):
    if v is not None and (not isinstance(v, types) or isinstance(v, bool) and bool not in types):
        raise _wrong(f"{what} must be {_tname(types)} or null, got {type(v).__name__} {str(v)[:40]!r}")
    return v


def _tname(types) -> str:
    names = {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number", bool: "a boolean"}
    return " or ".join(names.get(t, t.__name__) for t in (types if isinstance(types, tuple) else (types,)))


NUM = (int, float)
_NONE = type(None)
STRN, DICTN, LISTN, NUMN = frozenset({str, _NONE}), frozenset({dict, _NONE}), frozenset({list, _NONE}), \
    frozenset({int, float, _NONE})


def validate(rec) -> tuple[str, int, int]:
    """Schema and type checks that must pass before any row is written. Returns (episode_id, task, sample)."""
    if not isinstance(rec, dict):
        raise _wrong(f"a record must be a JSON object, got {type(rec).__name__}")
    schema = rec.get("schema_version")
    if schema != SCHEMA:
        hint = (" (a top-level 'schema' key is shopsim-wh's pre-0.9 guess of this format, no longer read: "
                "re-export it with the real runtime or `shopsim-wh dump --format shopsimrl-v4`)") if "schema" in rec else ""
        raise RecordError("unknown_schema_version", f"schema_version {str(schema)[:60]!r} is not {SCHEMA!r}{hint}; "
                          "convert it or pass the right --format")
    job = rec.get("job")
    if not isinstance(job, dict):
        raise _wrong(f"job must be an object, got {type(job).__name__}")
    task_id, sample_id = job.get("task_id"), job.get("sample_id")
    for k, v in (("job.task_id", task_id), ("job.sample_id", sample_id)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise _wrong(f"{k} must be an integer, got {type(v).__name__} {str(v)[:40]!r}")
    _opt(job.get("seed"), int, "job.seed")
    _opt(job.get("split"), str, "job.split")
    status = rec.get("status")
    if status not in ("completed", "failed"):
        raise _wrong(f"status must be 'completed' or 'failed', got {str(status)[:40]!r}")
    eid = rec.get("episode_id")
    if not isinstance(eid, str):
        raise _wrong(f"episode_id must be a string, got {type(eid).__name__}")
    if eid.startswith("task-"):
        want = f"task-{task_id:06d}__sample-{sample_id:03d}"
        if eid != want:
            raise _wrong(f"episode_id {eid[:60]!r} is not the runtime's task-NNNNNN__sample-NNN id of its job "
                         f"({want!r}); fix the record's episode_id or job")
    else:
        m = SLIME_ID.fullmatch(eid)
        if m is None or int(m[2]) != sample_id:
            raise _wrong(f"episode_id {eid[:60]!r} is neither task-NNNNNN__sample-NNN nor "
                         f"train-group-G-sample-I matching job.sample_id {sample_id}")
    for k in ("provenance", "reset", "final", "error"):
        _opt(rec.get(k), dict, k)
    for k in ("started_at", "ended_at"):
        _opt(rec.get(k), str, k)
    _opt(rec.get("duration_ms"), NUM, "duration_ms")
    for k in ("conversation", "steps", "selected_skills"):
        items = _opt(rec.get(k), list, k) or ()
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise _wrong(f"{k}[{i}] must be an object, got {type(item).__name__}")
    for i, s in enumerate(rec.get("steps") or ()):
        g = s.get
        model, env = g("model"), g("environment")
        if type(model) is dict and type(env) in DICTN and type(g("tools")) in LISTN and type(g("action")) in STRN \
                and type(g("observation")) in STRN and type(g("protocol_error")) in DICTN \
                and type(g("policy_failure")) in DICTN:
            mg = model.get
            calls = mg("tool_calls")
            if type(mg("content")) in STRN and type(mg("reasoning")) in STRN and type(mg("finish_reason")) in STRN \
                    and type(mg("response_id")) in STRN and type(mg("usage")) in DICTN \
                    and type(mg("latency_ms")) in NUMN \
                    and (calls is None or type(calls) is list and all(type(c) is dict for c in calls)) \
                    and (env is None or type(env.get("observation")) in STRN and type(env.get("reward")) in NUMN):
                continue  # the common case, checked in one expression
        _check_step(i, s)
    final = rec.get("final") or {}
    _opt(final.get("reward"), NUM, "final.reward")
    _opt(final.get("reward_detail"), dict, "final.reward_detail")
    return eid, task_id, sample_id


def _check_step(i: int, s: dict) -> None:
    """The step's field types one by one (raises on the first wrong one; the fast path in ``validate`` only says
    *that* something is off)."""
    model = _opt(s.get("model"), dict, f"steps[{i}].model") or {}
    _opt(s.get("environment"), dict, f"steps[{i}].environment")
    _opt(s.get("tools"), list, f"steps[{i}].tools")
    _opt(s.get("action"), str, f"steps[{i}].action")
    _opt(s.get("observation"), str, f"steps[{i}].observation")
    for k in ("content", "reasoning", "finish_reason", "response_id"):
        _opt(model.get(k), str, f"steps[{i}].model.{k}")
    _opt(model.get("usage"), dict, f"steps[{i}].model.usage")
    _opt(model.get("latency_ms"), NUM, f"steps[{i}].model.latency_ms")
    for k in ("protocol_error", "policy_failure"):
        _opt(s.get(k), dict, f"steps[{i}].{k}")
    for j, c in enumerate(_opt(model.get("tool_calls"), list, f"steps[{i}].model.tool_calls") or ()):
        if not isinstance(c, dict):
            raise _wrong(f"steps[{i}].model.tool_calls[{j}] must be an object")
    env = s.get("environment")
    if env is not None:
        _opt(env.get("observation"), str, f"steps[{i}].environment.observation")
        _opt(env.get("reward"), NUM, f"steps[{i}].environment.reward")


def _peek_store(line: bytes):
    """``(episode_id, record)`` when the ShopSimRL store would take this line as its episode's latest (it parses
    with Python's json - NaN and duplicate keys included - into an object with a string ``episode_id``)."""
    import json
    try:
        rec = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if isinstance(rec, dict) and isinstance(rec.get("episode_id"), str):
        return rec["episode_id"], rec
    return None
