"""Reader for ``shopsimrl-episode-v4`` JSONL (the seed runtime's ``runs/<experiment>/traces.jsonl``).

One record per line; the same ``episode_id`` may appear several times (a failed attempt, then a
retry): every valid record becomes an *attempt* numbered in file order, so the last valid record has
the highest attempt and is the one the ``episodes`` view keeps. Rejected lines get no attempt
number. A last line without newline that does not parse is a torn write (``torn_line``), not a
record. ``manifest.json`` / ``summary.json`` beside the file go into ``runs.provenance``.

Privacy: the private goal is read only from ``final.goal`` and only to compute
``episodes.right_product``; it is never stored. A goal found inside ``reset`` (or in an
``observation_state``, or inside ``final.reward_detail``) is stripped and counted in
``runs.provenance.ingest.private_goals_stripped``.

Fields the tables cannot hold (unknown keys, a record's provenance when it differs from the run's,
the reset observation text) go into ``episodes.source_extra`` of the attempt (JSON, sorted keys; NULL
when there is nothing), so that ``dump_episode(..., "shopsimrl-v4")`` re-emits the record.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from ._io import iter_lines, open_binary
from ._json import RecordError, parse_record
from ._rows import canonical, jdump, tool_schema_hash, tools_set_hash
from .core import UnitContext
from .registry import Reader, key_re, register

SCHEMA = "shopsimrl-episode-v4"
GOAL_KEYS = ("goal", "private_goal")
TOP_KEYS = {"schema", "episode_id", "job", "status", "provenance", "reset", "selected_skills", "conversation",
            "steps", "final", "error", "started_at", "finished_at", "duration_s"}
RESET_KEYS = {"instruction", "persona", "observation", "observation_state"}
FINAL_KEYS = {"reward", "reward_detail", "purchase", "goal", "termination_reason", "done"}
STEP_KEYS = {"step", "observation_state", "tools", "thinking", "content", "tool_call", "action", "finish_reason",
             "response_id", "model", "seed", "usage", "latency_ms", "started_at", "environment", "action_feedback",
             "protocol_error", "protocol_feedback", "policy_failure", "raw_response"}
ENV_KEYS = {"observation", "observation_state", "reward", "done"}
USAGE_KEYS = {"prompt_tokens", "completion_tokens"}
FB_KEYS = {"valid", "code", "message"}
TC_KEYS = {"id", "name", "arguments"}
MSG_KEYS = {"role", "content", "reasoning_content", "tool_calls", "tool_call_id", "name"}
SKILL_KEYS = {"id", "version", "scope", "content", "content_hash", "metadata"}
ERROR_KEYS = {"stage", "type", "message", "traceback"}
R_KEYS = ("r_type", "r_att", "r_option", "r_price")

_SNIFF_SCHEMA = key_re("schema", SCHEMA)
_SNIFF_JOB = key_re("job")
_SNIFF_STEPS = key_re("steps")


def sniff(head: bytes, path: Path) -> int:
    if _SNIFF_SCHEMA.search(head):
        return 100
    if _SNIFF_JOB.search(head) and _SNIFF_STEPS.search(head) and b'"conversation"' in head:
        return 60
    return 0


def _jb(obj) -> bytes | None:
    """JSON column value as UTF-8 bytes (the hot path skips jdump's decode: Arrow takes bytes as they are)."""
    return None if obj is None else orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)


def _wrong(msg: str) -> RecordError:
    return RecordError("wrong_type", msg)


def _dict(v, what: str, optional: bool = True) -> dict:
    if v is None and optional:
        return {}
    if not isinstance(v, dict):
        raise _wrong(f"{what} must be an object, got {type(v).__name__}")
    return v


def _list(v, what: str) -> list:
    if v is None:
        return []
    if not isinstance(v, list):
        raise _wrong(f"{what} must be a list, got {type(v).__name__}")
    return v


def _int(v, what: str, optional: bool = False):
    if v is None and optional:
        return None
    if not isinstance(v, int) or isinstance(v, bool):
        raise _wrong(f"{what} must be an integer, got {type(v).__name__} {str(v)[:40]!r}")
    return v


def _num(v, what: str):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _wrong(f"{what} must be a number, got {type(v).__name__} {str(v)[:40]!r}")
    return float(v)


def _str(v, what: str):
    if v is None:
        return None
    if not isinstance(v, str):
        raise _wrong(f"{what} must be a string, got {type(v).__name__}")
    return v


def _strip_goal(d, counter: list) -> dict | None:
    if not isinstance(d, dict):
        return d
    if any(k in d for k in GOAL_KEYS):
        counter[0] += 1
        return {k: v for k, v in d.items() if k not in GOAL_KEYS}
    return d


def validate(rec) -> tuple[str, int, int]:
    """Schema and type checks that must pass before any row is written. Returns the episode key."""
    if not isinstance(rec, dict):
        raise _wrong(f"a record must be a JSON object, got {type(rec).__name__}")
    schema = rec.get("schema")
    if schema != SCHEMA:
        raise RecordError("unknown_schema_version", f"schema {str(schema)[:60]!r} is not {SCHEMA!r}; "
                          "convert it or pass the right --format")
    job = _dict(rec.get("job"), "job", optional=False)
    task_id = _int(job.get("task_id"), "job.task_id")
    sample_id = _int(job.get("sample_id"), "job.sample_id")
    _int(job.get("seed"), "job.seed", optional=True)
    status = rec.get("status")
    if status not in ("completed", "failed"):
        raise _wrong(f"status must be 'completed' or 'failed', got {str(status)[:40]!r}")
    eid = rec.get("episode_id")
    want = f"task-{task_id}__sample-{sample_id}"
    if eid is not None and eid != want:
        raise _wrong(f"episode_id {str(eid)[:60]!r} does not match job ({want!r})")
    for k in ("provenance", "reset", "final", "error"):
        _dict(rec.get(k), k)
    for k in ("conversation", "steps", "selected_skills"):
        for i, item in enumerate(_list(rec.get(k), k)):
            _dict(item, f"{k}[{i}]", optional=False)
    for i, s in enumerate(rec.get("steps") or []):
        _dict(s.get("usage"), f"steps[{i}].usage")
        _dict(s.get("environment"), f"steps[{i}].environment")
        _dict(s.get("tool_call"), f"steps[{i}].tool_call")
        _dict(s.get("action_feedback"), f"steps[{i}].action_feedback")
        _list(s.get("tools"), f"steps[{i}].tools")
        _str(s.get("thinking"), f"steps[{i}].thinking")
    final = rec.get("final") or {}
    _num(final.get("reward"), "final.reward")
    return want, task_id, sample_id


class _State:
    def __init__(self):
        self.attempts: dict[str, int] = {}
        self.fid: dict[str, list[int]] = {}  # episode -> [total, converted, dropped]
        self.file_total = 0
        self.file_dropped = 0
        self.run_prov = None
        self.goals = [0]
        self.tool_hash_cache: dict[bytes, tuple] = {}
        self.any_line = False
        self.plain: list[str] | None = None  # chunk workers: keys whose provenance is the chunk's first


PIPELINE_MIN_BYTES = 64 * 1024 * 1024


def read(ctx: UnitContext):
    """Serial for small or compressed files; large ones are parsed by worker processes in chunks."""
    if ctx.parallel and not ctx.path.name.endswith((".gz", ".zst", ".zstd")) \
            and ctx.path.stat().st_size >= PIPELINE_MIN_BYTES:
        from ._v4_parallel import read_parallel
        yield from read_parallel(ctx)
    else:
        yield from read_serial(ctx)


def _new_state(ctx: UnitContext) -> _State:
    st = _State()
    for t in ("messages", "steps", "actions", "observations", "tools"):
        setattr(st, "t_obs" if t == "observations" else f"t_{t}", ctx.sink.buffer(t).tuples)
    return st


def read_serial(ctx: UnitContext):
    st = _new_state(ctx)
    _sidecars(ctx)
    with open_binary(ctx.path) as f:
        yield from _parse(ctx, st, iter_lines(f, ctx.on_bytes))
    _finish(ctx, st.any_line, st.attempts, st.fid, st.file_total, st.file_dropped, st.run_prov, st.goals[0])
    yield


def _parse(ctx: UnitContext, st: _State, lines, offset_base: int = 0):
    since_flush = since_bytes = 0
    for line_no, rel_offset, line, terminated in lines:
        offset = rel_offset + offset_base
        st.any_line = True
        ctx.records += 1
        try:
            rec, bom = parse_record(line, ctx.max_field_bytes)
            if bom:
                ctx.error(line_no, offset, "bom", "UTF-8 byte order mark before the record; stripped, record kept",
                          rejected=False)
            eid, task_id, sample_id = validate(rec)
        except RecordError as e:
            if not terminated:
                ctx.error(line_no, offset, "torn_line", f"last line has no newline and does not parse "
                          f"({e.error_class}): a torn write, not a record")
            else:
                ctx.error(line_no, offset + (e.at or 0), e.error_class, e.message)
            eid = _peek_episode(line)
            if eid:
                st.fid.setdefault(eid, [0, 0, 0])
                st.fid[eid][0] += 1
                st.fid[eid][2] += 1
            else:
                st.file_total += 1
                st.file_dropped += 1
            continue
        attempt = st.attempts.get(eid, 0) + 1
        st.attempts[eid] = attempt
        _emit(ctx, st, rec, eid, attempt, task_id, sample_id)
        fid = st.fid.setdefault(eid, [0, 0, 0])
        fid[0] += 1
        fid[1] += 1
        ctx.attempts += 1
        since_flush += 1
        since_bytes += len(line)
        if since_flush >= ctx.flush_every or since_bytes >= ctx.flush_bytes:
            since_flush = since_bytes = 0
            yield


def _finish(ctx, any_line, attempts, fid, file_total, file_dropped, run_prov, goals) -> None:
    if not any_line:
        ctx.error(None, 0, "empty_file", "the file holds no records")
    ctx.episodes = len(attempts)
    for eid, (total, conv, dropped) in fid.items():
        ctx.fidelity(eid, total, conv, 0, dropped)
    if file_total or not any_line:
        ctx.fidelity("file", file_total, 0, 0, file_dropped)
    prov = ctx.provenance.setdefault("v4", {})
    prov["record_provenance"] = run_prov
    prov["private_goals_stripped"] = goals


def _peek_episode(line: bytes) -> str | None:
    try:
        rec = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if isinstance(rec, dict):
        eid = rec.get("episode_id")
        if isinstance(eid, str):
            return eid
        job = rec.get("job")
        if isinstance(job, dict) and isinstance(job.get("task_id"), int) and isinstance(job.get("sample_id"), int):
            return f"task-{job['task_id']}__sample-{job['sample_id']}"
    return None


def _sidecars(ctx: UnitContext) -> None:
    for name in ("manifest", "summary"):
        p = ctx.path.parent / f"{name}.json"
        if p.is_file():
            try:
                ctx.provenance[name] = orjson.loads(p.read_bytes())
            except (orjson.JSONDecodeError, OSError) as e:
                ctx.error(None, None, "invalid_json", f"{p.name}: {e}", source_file=str(p), rejected=False)
    man = ctx.provenance.get("manifest")
    if isinstance(man, dict):
        exp = man.get("experiment")
        name = exp.get("name") if isinstance(exp, dict) else exp
        if isinstance(name, str) and ctx.experiment == ctx.source_format:
            ctx.experiment = name


def _run_fields(ctx: UnitContext, prov: dict, job: dict) -> None:
    model = prov.get("model")
    env = prov.get("environment") if isinstance(prov.get("environment"), dict) else {}
    rf = ctx.run_fields
    if isinstance(model, dict):
        rf["model_name"] = model.get("name")
        rf["checkpoint_id"] = model.get("checkpoint_id")
    elif isinstance(model, str):
        rf["model_name"] = model
    rf["prompt_hash"] = prov.get("prompt_hash")
    rf["prompt_version"] = prov.get("prompt_version")
    rf["skill_bank_hash"] = prov.get("skill_bank_hash")
    rf["environment_mode"] = env.get("mode")
    rf["environment_dialect"] = env.get("dialect")
    lim = prov.get("action_limit")
    rf["action_limit"] = lim if isinstance(lim, int) else None
    rf["split"] = job.get("split")


def _emit(ctx: UnitContext, st: _State, rec: dict, eid: str, attempt: int, task_id: int, sample_id: int) -> None:
    add = ctx.sink.add
    key = {"episode_id": eid, "attempt": attempt}
    mkey = {"episode_id": eid, "attempt": attempt, "agent_id": "main"}
    residual: dict = {}
    extra = rec.keys() - TOP_KEYS
    if extra:
        residual["extra"] = {k: rec[k] for k in extra}
    job = rec["job"]
    if set(job) - {"task_id", "sample_id", "seed", "split"}:
        residual["job"] = {k: v for k, v in job.items() if k not in ("task_id", "sample_id", "seed", "split")}
    prov = rec.get("provenance") or {}
    if st.run_prov is None:
        st.run_prov = prov
        _run_fields(ctx, prov, job)
    if prov is not st.run_prov and prov != st.run_prov:
        residual["provenance"] = prov
    elif st.plain is not None:
        st.plain.append(f"{eid}#{attempt}")
    reset = _strip_goal(rec.get("reset") or {}, st.goals)
    if set(reset) - RESET_KEYS:
        residual["reset_extra"] = {k: v for k, v in reset.items() if k not in RESET_KEYS}
    final = rec.get("final") or {}
    goal = final.get("goal") if isinstance(final.get("goal"), dict) else None
    if set(final) - FINAL_KEYS:
        residual["final_extra"] = {k: v for k, v in final.items() if k not in FINAL_KEYS}
    if "final" not in rec:
        residual["no_final"] = True
    elif rec["final"] is None:
        residual["final_null"] = True
    conv = rec.get("conversation") or []
    steps = rec.get("steps") or []
    err = rec.get("error") or {}

    # messages (hot path: tuples in the table's column order)
    assistant_at = []
    msg_rows = st.t_messages
    for i, m in enumerate(conv):
        get = m.get
        role = get("role")
        if role == "assistant":
            assistant_at.append(i)
        tc = get("tool_calls")
        content = get("content")
        msg_rows.append((eid, attempt, "main", i, role,
                         content if isinstance(content, str) or content is None else jdump(content),
                         get("reasoning_content"), None if tc is None else _jb(tc), get("tool_call_id"), get("name")))
        mx = () if m.keys() <= MSG_KEYS else m.keys() - MSG_KEYS
        if mx or (content is not None and not isinstance(content, str)):
            residual.setdefault("messages", {})[str(i)] = {k: m[k] for k in mx} | (
                {"content_json": True} if content is not None and not isinstance(content, str) else {})
    # reset observation text: a reference into the user message that carries it, else kept verbatim
    obs0 = reset.get("observation")
    if obs0 is not None:
        ref = None
        for i, m in enumerate(conv[:4]):
            c = m.get("content")
            if m.get("role") == "user" and isinstance(c, str):
                pos = c.find(obs0) if isinstance(obs0, str) else -1
                if pos >= 0:
                    ref = [i, pos, len(obs0)]
                    break
        residual["reset_obs"] = ref if ref is not None else {"text": obs0}
    if "observation_state" in reset and (not steps or steps[0].get("observation_state") != reset["observation_state"]):
        residual["reset_state"] = reset["observation_state"]

    # steps, actions, observations, tools
    tools_seen: set[str] = set()
    n_proto = n_actions = n_invalid = 0
    tin = tout = None
    cache = st.tool_hash_cache
    for i, s in enumerate(steps):
        sx = () if s.keys() <= STEP_KEYS else s.keys() - STEP_KEYS
        if sx:
            residual.setdefault("steps", {})[str(i)] = {k: s[k] for k in sx}
        if s.get("step", i) != i:
            residual.setdefault("step_numbers", {})[str(i)] = s.get("step")
        state = _strip_goal(s.get("observation_state"), st.goals)
        usage = s.get("usage") or {}
        pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if not usage.keys() <= USAGE_KEYS:
            residual.setdefault("usage", {})[str(i)] = {k: v for k, v in usage.items()
                                                         if k not in ("prompt_tokens", "completion_tokens")}
        if pt is not None:
            tin = (tin or 0) + pt
        if ct is not None:
            tout = (tout or 0) + ct
        tl = s.get("tools")
        set_hash = hashes_json = None
        if tl is not None:
            # one cache entry per offered tool list (runtimes repeat the same lists): hashes, rows, set hash
            raw = orjson.dumps(tl)
            hit = cache.get(raw)
            if hit is None:
                rows = []
                for t in tl:
                    fn = t.get("function") if isinstance(t, dict) and isinstance(t.get("function"), dict) else t
                    name, desc, params = fn.get("name"), fn.get("description"), fn.get("parameters")
                    rows.append((tool_schema_hash(name, desc, params), name, desc, jdump(params)))
                hs = [r[0] for r in rows]
                hit = (rows, tools_set_hash(hs), jdump(hs))
                if len(cache) > 4096:
                    cache.clear()
                cache[raw] = hit
            for h, name, desc, params_s in hit[0]:
                if h not in tools_seen:
                    tools_seen.add(h)
                    st.t_tools.append((eid, attempt, "main", name, desc, params_s, "execution", h))
            set_hash, hashes_json = hit[1], hit[2]
        pe = s.get("protocol_error")
        if pe:
            n_proto += 1
        pf = s.get("policy_failure")
        pf_code = pf.get("code") if isinstance(pf, dict) else pf
        if isinstance(pf, dict) and set(pf) - {"code"}:
            residual.setdefault("policy_failure", {})[str(i)] = pf
        sg = s.get
        st.t_steps.append((
            eid, attempt, "main", i, i, state.get("page") if isinstance(state, dict) else None, _jb(state),
            assistant_at[i] if i < len(assistant_at) else None,
            set_hash, hashes_json, sg("thinking"), sg("content"),
            sg("finish_reason"), pe, sg("protocol_feedback"), pf_code, None, _jb(sg("raw_response")),
            sg("response_id"), sg("model"), sg("seed"), pt, ct, sg("latency_ms"), sg("started_at"), None))
        if tl is None and "tools" not in s:
            residual.setdefault("no_tools", []).append(i)
        tc = s.get("tool_call")
        env = s.get("environment")
        fb = s.get("action_feedback") or {}
        if not fb.keys() <= FB_KEYS:
            residual.setdefault("feedback", {})[str(i)] = fb
        action = s.get("action")
        valid = fb.get("valid") if fb else None
        if tc or action is not None or env:
            if action is not None and env is not None:
                n_actions += 1
                if valid is False:
                    n_invalid += 1
            if tc:
                args = tc.get("arguments")
                if not tc.keys() <= TC_KEYS:
                    residual.setdefault("tool_call", {})[str(i)] = tc
                args_s = args if isinstance(args, str) or args is None else jdump(args)
                if args is not None and not isinstance(args, str):
                    residual.setdefault("args_json", []).append(i)
                atype = "tool_use"
            else:
                args_s, atype = None, ("terminate" if pf_code else "tool_use")
            if atype == "terminate" and action is None:
                action_s = f"terminate[{pf_code}]"
            else:
                action_s = action
            st.t_actions.append((eid, attempt, "main", i, 0, tc.get("id") if tc else None,
                                 tc.get("name") if tc else None, args_s, action_s, atype, "execution",
                                 False if pe else valid, pe or fb.get("code"), fb.get("message")))
            if "action_feedback" in s and s["action_feedback"] is None:
                residual.setdefault("feedback_null", []).append(i)
            if env:
                estate = _strip_goal(env.get("observation_state"), st.goals)
                if not env.keys() <= ENV_KEYS:
                    residual.setdefault("environment", {})[str(i)] = {k: v for k, v in env.items() if k not in ENV_KEYS}
                st.t_obs.append((eid, attempt, "main", i, tc.get("id") if tc else None, "environment",
                                 env.get("observation"), _jb(estate),
                                 estate.get("page") if isinstance(estate, dict) else None,
                                 (not valid) if valid is not None else None, env.get("reward"), None, env.get("done")))
            elif pe:
                st.t_obs.append((eid, attempt, "main", i, tc.get("id") if tc else None, "error",
                                 s.get("protocol_feedback"), None, None, True, None, None, None))
    # skills
    for sk in rec.get("selected_skills") or []:
        if set(sk) - SKILL_KEYS:
            residual.setdefault("skills", {})[str(sk.get("id"))] = {k: v for k, v in sk.items() if k not in SKILL_KEYS}
        add("skills_selected", {**key, "skill_id": sk.get("id"), "skill_version": sk.get("version"),
                                "scope": sk.get("scope"), "content_hash": sk.get("content_hash"),
                                "content": sk.get("content"), "metadata": jdump(sk.get("metadata"))})
    # outcome
    detail = _strip_goal(final.get("reward_detail"), st.goals)
    detail_d = detail if isinstance(detail, dict) else {}
    purchase = final.get("purchase")
    asin = purchase.get("asin") if isinstance(purchase, dict) else purchase if isinstance(purchase, str) else None
    if isinstance(purchase, dict) and set(purchase) - {"asin"} or isinstance(purchase, str):
        residual["purchase"] = purchase
    right = None
    if goal is not None:
        gasin = goal.get("asin") or goal.get("product_id")
        right = bool(asin is not None and gasin is not None and asin == gasin)
    add("agents", {**mkey, "parent_agent_id": None, "agent_role": "main", "agent_type": None,
                   "spawned_by_call_id": None, "depth": 0,
                   "model": next((s.get("model") for s in steps if s.get("model")), None)})
    if err:
        if set(err) - ERROR_KEYS:
            residual["error_extra"] = {k: v for k, v in err.items() if k not in ERROR_KEYS}
        add("failures", {**key, "stage": err.get("stage"), "exception_type": err.get("type"),
                         "message": err.get("message"), "traceback": err.get("traceback"),
                         "occurred_at": rec.get("finished_at")})
    for k in ("reset", "selected_skills", "conversation", "steps", "error", "provenance"):
        if k not in rec:
            residual.setdefault("absent", []).append(k)
        elif rec[k] is None:
            residual.setdefault("null", []).append(k)
    add("episodes", {**key, **ctx.episode_common(), "task_id": task_id, "sample_id": sample_id,
                     "seed": job.get("seed"), "split": job.get("split"), "status": rec["status"],
                     "done": final.get("done"), "reward": _num(final.get("reward"), "final.reward"),
                     **{k: detail_d.get(k) if isinstance(detail_d.get(k), (int, float)) else None for k in R_KEYS},
                     "right_product": right, "purchase_asin": asin, "reward_detail": jdump(detail),
                     "termination_reason": final.get("termination_reason"), "model_steps": len(steps),
                     "protocol_errors": n_proto, "total_actions": n_actions, "invalid_actions": n_invalid,
                     "tokens_in": tin, "tokens_out": tout, "instruction": reset.get("instruction"),
                     "persona": reset.get("persona"), "prompt_hash": prov.get("prompt_hash"),
                     "skill_ids": jdump([sk.get("id") for sk in rec.get("selected_skills") or []]),
                     "error_stage": err.get("stage"), "error_type": err.get("type"),
                     "error_message": err.get("message"), "started_at": rec.get("started_at"),
                     "finished_at": rec.get("finished_at"), "duration_s": rec.get("duration_s"),
                     "source_extra": canonical(residual).decode() if residual else None})


register(Reader(name="shopsimrl-v4", description="shopsimrl-episode-v4 JSONL (traces.jsonl)", sniff=sniff, read=read))
