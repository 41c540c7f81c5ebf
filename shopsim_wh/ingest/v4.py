"""Reader for ``shopsimrl-episode-v4``: the ShopSimRL runtime's ``runs/<name>/traces.jsonl`` (and the slime
training variant, also one pretty-printed record per ``.json`` file).

The record (``shopsimrl/runtime.py``): ``schema_version``, ``episode_id`` (``task-{task:06d}__sample-{s:03d}``
or ``train-group-{g:09d}-sample-{i:09d}[-full-skill-retry]``), ``status``, ``job``, ``provenance``, ``started_at``
/ ``ended_at`` / ``duration_ms``, ``reset``, ``selected_skills``, ``conversation``, ``steps``, ``final``,
``error``. Where each part lands (docs/ingest.md has the table):

* ``reset`` -> ``episodes.reset_payload`` (instruction / persona also as columns); ``conversation`` -> ``messages``;
  ``selected_skills`` -> ``skills_selected``; ``error`` -> ``failures``; ``provenance`` -> ``runs`` (the first
  record's; a record whose provenance differs keeps its own in ``source_extra``).
* a step (``step_index`` is 1-based, warehouse ``step_idx = step_index - 1``) -> ``steps`` (model output: content,
  reasoning, finish_reason, usage, response_id, latency, protocol error / feedback, policy failure, raw
  response; ``metadata`` = {usage, metadata, model_extra}), one ``actions`` row per ``model.tool_calls`` entry
  (``arguments`` = ``raw_arguments``), its tools in ``tools`` (deduplicated) and the environment's answer in
  ``observations`` (text, observation_state, page, reward, done; the rest of the answer in ``payload``).
* ``final``: the last step's answer when the episode ended on it; otherwise (``terminate`` after a length failure
  or the step budget) a ``terminate`` action plus an observation of type ``terminal`` holding the answer.
  Outcome columns: reward, ``r_*`` from ``reward_detail`` (``reward_derived`` false), purchase, termination.

Privacy: every ``goal`` / private-goal field (``final.goal``, the step answers' ``goal``, any in ``reset``) is
dropped before anything is stored; it is read only to compute ``episodes.right_product``.

Attempts: the same ``episode_id`` on several lines = attempts 1, 2, ... in file order; the ``episodes`` view keeps
the highest, i.e. the last line that parses (the original store's resume rule). Whatever no column holds goes
into ``episodes.source_extra`` (sorted-key JSON, NULL when nothing), so ``dump`` re-emits the record.

This module parses in this process (:func:`read_serial`); ``_v4_parallel.py`` registers the reader, whose ``read``
sends large JSONL files to worker processes and the rest here.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import orjson

from ..core import run_identity as identity
from ..core.schema import TABLES
from ..store.warehouse import stage_parquet_tables
from ._episode_index import EpisodeIndex
from ._io import TooLarge, base_suffix, iter_lines, open_binary, read_capped
from ._json import RecordError, cap, parse_record
from ._rows import canonical, jdump, tool_schema_hash, tools_set_hash
from ._v4_check import NUM, SCHEMA, STRN, _peek_store, validate
from .core import INGEST_ZSTD_LEVEL, UnitContext
from .registry import key_re

TOP_ORDER = ("schema_version", "episode_id", "status", "job", "provenance", "started_at", "ended_at", "duration_ms",
             "reset", "selected_skills", "conversation", "steps", "final", "error")
TOP_KEYS = frozenset(TOP_ORDER)
GOAL_KEYS = ("goal", "private_goal", "private_task_instruction", "goal_options", "reason_key")
STEP_BASE = frozenset({"step_index", "observation", "tools", "model", "action", "environment"})
STEP_PE = STEP_BASE | {"protocol_error", "protocol_feedback"}
STEP_PF = STEP_BASE | {"policy_failure"}
STEP_ALL = STEP_PE | STEP_PF
MODEL_KEYS = ("content", "reasoning", "tool_calls", "finish_reason", "usage", "response_id", "metadata", "latency_ms",
              "protocol_error", "policy_failure", "raw_response")
MODEL_SET = frozenset(MODEL_KEYS)
CALL_KEYS = frozenset({"call_id", "name", "arguments", "raw_arguments"})
MSG_COLS = frozenset({"role", "content", "reasoning_content", "tool_calls", "tool_call_id", "name"})
MSG_OPT = ("reasoning_content", "tool_calls", "tool_call_id", "name")
MSG_RC, MSG_RCT, MSG_RCI = (frozenset({"role", "content"}), frozenset({"role", "content", "tool_calls"}),
                            frozenset({"role", "content", "tool_call_id"}))
SKILL_KEYS = frozenset({"skill_id", "content", "version", "metadata", "content_sha256"})
ERROR_KEYS = frozenset({"stage", "type", "message", "traceback"})
R_COLS = ("r_type", "r_att", "r_option", "r_price", "r_loose", "r_strict", "r_success")

_SNIFF_SCHEMA = key_re("schema_version", SCHEMA)


def sniff(head: bytes, path: Path) -> int:
    return 100 if _SNIFF_SCHEMA.search(head) else 0


def companions(path: Path) -> list[Path]:
    """``manifest.json`` / ``summary.json`` (and a gate run's ``mask_assignments.json``) beside a ``traces.jsonl``:
    part of the unit (hashed with it)."""
    if not path.name.startswith("traces."):
        return []
    return [p for p in (path.parent / "manifest.json", path.parent / "summary.json",
                        path.parent / "mask_assignments.json") if p.is_file()]


def _jb(obj) -> bytes | None:
    """JSON column value as UTF-8 bytes (Arrow takes bytes as they are: no decode on the hot path)."""
    return None if obj is None else orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)


class _State:
    def __init__(self):
        self.attempts: dict[str, int] = {}
        self.fid: dict[str, list[int]] = {}  # episode -> [total, converted, dropped]
        self.file_total = 0
        self.file_dropped = 0
        self.run_prov = None
        self.have_prov = False
        self.need_fields = True
        self.goals = [0]
        self.tool_hash_cache: dict[bytes, tuple] = {}
        self.any_line = False
        self.plain: list[str] | None = None  # chunk workers: keys whose provenance is the chunk's first
        # serial path past its first chunk: the earlier chunks' episodes; ``attempts`` / ``fid`` then hold this
        # chunk's only, ``prior`` the attempts its episodes had in earlier chunks (counted in ``attempts``)
        self.seen: EpisodeIndex | None = None
        self.prior: dict[str, int] = {}
        # episode -> (attempt, line, offset, goal fields stripped) of its first completed record in this chunk
        self.done: dict[str, tuple[int, int, int, int]] = {}


PIPELINE_MIN_BYTES = 64 * 1024 * 1024  # JSONL from this size on is parsed by worker processes (_v4_parallel.read)


def _new_state(ctx: UnitContext) -> _State:
    st = _State()
    for t in ("messages", "steps", "actions", "observations", "tools"):
        setattr(st, "t_obs" if t == "observations" else f"t_{t}", ctx.sink.buffer(t).tuples)
    return st


def read_serial(ctx: UnitContext):
    """In this process, a chunk (``flush_every`` records or ``flush_bytes``) at a time. A file of one chunk keeps
    its episodes in dicts; past the first chunk they go to an :class:`EpisodeIndex` (12 bytes per episode, the
    rest on disk), as on the parallel path, so memory does not grow with the file."""
    st = _new_state(ctx)
    _sidecars(ctx)
    try:
        with ctx.watch(open_binary(ctx.path)) as f:
            if base_suffix(ctx.path) == ".json":  # slime: one (indented) record per file
                data = read_capped(f, ctx.max_record_bytes, ctx.on_bytes)
                lines = [(1, 0, data, True)] if type(data) is TooLarge or data.strip() else []
            else:
                lines = iter_lines(f, ctx.on_bytes, ctx.max_record_bytes)
            for _ in _parse(ctx, st, lines):
                _end_chunk(st)
                yield
        if st.seen is None:
            _finish(ctx, st)
        else:
            _end_chunk(st)
            finish_indexed(ctx, st.seen, st.any_line, st.file_total, st.file_dropped, st.run_prov, st.goals[0])
    finally:
        if st.seen is not None:
            st.seen.close()
    yield


def _end_chunk(st: _State) -> None:
    """Serial path: this chunk's episodes into the index (made at the first chunk's end); start the next."""
    if st.seen is None:
        st.seen = EpisodeIndex()
    st.seen.add({e: n - st.prior.get(e, 0) for e, n in st.attempts.items()}, st.fid, st.prior, st.done)
    st.attempts, st.fid, st.prior, st.done = {}, {}, {}, {}


def _known(st: _State, eid: str) -> int:
    """The attempts ``eid`` had so far in this file (a worker's: within its chunk); registers the episode."""
    n = st.attempts.get(eid)
    if n is None:
        n = 0
        if st.seen is not None and (p := st.seen.prior((eid,))):
            n = st.prior[eid] = p[eid]
        st.attempts[eid] = n
    return n


def _next_attempt(st: _State, eid: str) -> int:
    """The attempt number of ``eid``'s next record in this file (a worker's: within its chunk)."""
    n = _known(st, eid) + 1
    st.attempts[eid] = n
    return n


def is_completed(rec: dict) -> bool:
    """The ShopSimRL store's complete record (``RunStore.is_complete``): status completed and ``final.done`` true
    (``validate`` has checked the schema version)."""
    final = rec.get("final")
    return rec.get("status") == "completed" and isinstance(final, dict) and final.get("done") is True


def _completed_before(st: _State, eid: str) -> bool:
    """Whether an earlier line of this file (a worker's: of its chunk) holds a completed record of ``eid``."""
    if eid in st.done:
        return True
    if st.seen is None:
        return False
    _known(st, eid)
    counts = st.seen.repeats.get(eid)
    return bool(counts and counts[4])


DUPLICATE_COMPLETED = ("episode {} already has a completed record earlier in this file; ShopSimRL refuses a "
                       "second one (unique_traces: duplicate completed trace): the first is kept, this line is not "
                       "stored")


def duplicate_completed(ctx: UnitContext, fid: dict, eid: str, line: int, offset: int) -> None:
    """A second completed record of ``eid``: one ``ingest_errors`` row, counted as a dropped record of it."""
    ctx.error(line, offset, "duplicate_completed", DUPLICATE_COMPLETED.format(eid))
    counts = fid.setdefault(eid, [0, 0, 0])
    counts[0] += 1
    counts[2] += 1


def _parse(ctx: UnitContext, st: _State, lines, offset_base: int = 0):
    since_flush = since_bytes = 0
    for line_no, rel_offset, line, terminated in lines:
        offset = rel_offset + offset_base
        st.any_line = True
        ctx.records += 1
        if type(line) is TooLarge:  # never read: no episode to attach it to, a dropped record of the file
            ctx.too_large(line_no, offset, line, terminated)
            st.file_total += 1
            st.file_dropped += 1
            continue
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
            peek = _peek_store(line) if terminated else None
            if peek is not None:
                eid = peek[0]
                st.fid.setdefault(eid, [0, 0, 0])
                st.fid[eid][0] += 1
                st.fid[eid][2] += 1
                attempt = _next_attempt(st, eid)
                _emit_rejected(ctx, eid, attempt, peek[1], e)
                ctx.attempts += 1
            else:
                st.file_total += 1
                st.file_dropped += 1
            continue
        done = is_completed(rec)
        if done and _completed_before(st, eid):
            duplicate_completed(ctx, st.fid, eid, line_no, offset)
            continue
        attempt = _next_attempt(st, eid)
        goals = st.goals[0]
        _emit(ctx, st, rec, eid, attempt, task_id, sample_id)
        if done:
            st.done[eid] = (attempt, line_no, offset, st.goals[0] - goals)
        fid = st.fid.setdefault(eid, [0, 0, 0])
        fid[0] += 1
        fid[1] += 1
        ctx.attempts += 1
        since_flush += 1
        since_bytes += len(line)
        if since_flush >= ctx.flush_every or since_bytes >= ctx.flush_bytes:
            since_flush = since_bytes = 0
            yield


def _finish(ctx: UnitContext, st: _State) -> None:
    """The end of a file read in one chunk: its ``import_fidelity`` rows (per episode, then the file's)."""
    if not st.any_line:
        ctx.error(None, 0, "empty_file", "the file holds no records")
    ctx.episodes = len(st.attempts)
    for eid, (total, conv, dropped) in st.fid.items():
        ctx.fidelity(eid, total, conv, 0, dropped)
    if st.file_total or not st.any_line:
        ctx.fidelity("file", st.file_total, 0, 0, st.file_dropped)
    _provenance_note(ctx, st.run_prov, st.goals[0])


def finish_indexed(ctx: UnitContext, seen: EpisodeIndex, any_line, file_total, file_dropped, run_prov,
                   goals) -> None:
    """``_finish`` for a file read in chunks (either path): the ``import_fidelity`` rows (one per episode, then the
    file's) go to one Parquet file in the warehouse's staging directory, written a row group at a time."""
    if not any_line:
        ctx.error(None, 0, "empty_file", "the file holds no records")
    ctx.episodes = len(seen)
    buf = ctx.sink.buffer("import_fidelity")

    def tables():
        for units, totals, converted, dropped in seen.fidelity_tables():
            for row in zip(units, totals, converted, dropped, strict=True):
                ctx.fidelity(row[0], row[1], row[2], 0, row[3])
            yield buf.flush(ctx.load_id)
        if file_total or not any_line:
            ctx.fidelity("file", file_total, 0, 0, file_dropped)
            yield buf.flush(ctx.load_id)

    parts = (t for t in tables() if t is not None)
    if ctx.staging_dir is None:
        ctx.ready.extend(("import_fidelity", t) for t in parts)
    elif (f := stage_parquet_tables(ctx.staging_dir, TABLES["import_fidelity"].arrow_schema, parts,
                                    INGEST_ZSTD_LEVEL, prefix=ctx.load_id)) is not None:
        ctx.ready.append(("import_fidelity", f))
    _provenance_note(ctx, run_prov, goals)


def _provenance_note(ctx: UnitContext, run_prov, goals: int) -> None:
    prov = ctx.provenance.setdefault("v4", {})
    prov["record_provenance"] = run_prov
    prov["private_goals_stripped"] = goals


def _emit_rejected(ctx: UnitContext, eid: str, attempt: int, rec: dict, e: RecordError) -> None:
    """A rejected line the store would still resume from: a ``failed`` attempt (error_stage ``ingest``) so that the
    ``episodes`` view's final attempt is the store's (its content is not read; the ingest_errors row says why)."""
    job = rec.get("job") if isinstance(rec.get("job"), dict) else {}

    def i(v, bits=63):
        return v if isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**bits else None

    key = {"episode_id": eid, "attempt": attempt}
    msg = cap(f"the record was rejected ({e.error_class}: {e.message}); its line is in ingest_errors")
    ctx.sink.add("failures", {**key, "stage": "ingest", "exception_type": e.error_class, "message": msg,
                              "traceback": None, "occurred_at": None})
    ctx.sink.add("episodes", {**key, **ctx.episode_common(), "task_id": i(job.get("task_id")),
                              "sample_id": i(job.get("sample_id"), 31), "seed": i(job.get("seed")),
                              "split": job.get("split") if isinstance(job.get("split"), str) else None,
                              "status": "failed", "error_stage": "ingest", "error_type": e.error_class,
                              "error_message": msg, "source_extra": canonical({"rejected": e.error_class}).decode()})


def _sidecars(ctx: UnitContext) -> None:
    """manifest.json / summary.json -> runs.provenance; the plan's job count -> planned_episodes."""
    for p in ctx.companions:
        name = p.name.split(".")[0]
        try:
            ctx.provenance[name] = orjson.loads(p.read_bytes())
        except (orjson.JSONDecodeError, OSError) as e:
            ctx.error(None, None, "invalid_json", f"{p.name}: {e}; the run's traces still land, its {name} does not",
                      source_file=str(p), rejected=False)
    man = ctx.provenance.get("manifest")
    plan = man.get("plan") if isinstance(man, dict) else None
    name = plan.get("experiment") if isinstance(plan, dict) else None
    if ctx.experiment == ctx.source_format:  # no --source: the run's own name
        if isinstance(name, str) and name:
            ctx.experiment = name
        elif ctx.path.name.startswith("traces."):
            ctx.experiment = ctx.path.parent.name
    if isinstance(plan, dict) and isinstance(plan.get("jobs"), list):
        ctx.run_fields["planned_episodes"] = len(plan["jobs"])
    _sidecar_identity(ctx)


def _sidecar_identity(ctx: UnitContext) -> None:
    """The run identity from manifest.json (docs/gate.md); a gate run's mask assignments, compacted."""
    if "mask_assignments" in ctx.provenance:
        ctx.provenance["mask_assignments"] = identity.mask_assignments(ctx.provenance["mask_assignments"])
    man = ctx.provenance.get("manifest")
    if man is None:
        return
    fields, problem = identity.plan_identity(man)
    if problem:
        ctx.error(None, None, "manifest_not_used", problem, source_file=str(ctx.path.parent / "manifest.json"),
                  rejected=False)
    _set_identity(ctx, fields)


def _set_identity(ctx: UnitContext, fields: dict | None) -> None:
    if fields is not None:
        ctx.run_fields["identity"] = fields
        ctx.run_fields["fingerprint_fields"] = canonical(fields).decode()
        ctx.run_fields["fingerprint"] = identity.fingerprint(fields)


def _run_fields(ctx: UnitContext, st: _State, prov: dict, job: dict) -> None:
    """runs columns from a record's provenance; later records fill what earlier ones lacked (a reset failure
    has no environment version)."""
    rf = ctx.run_fields

    def put(k, v):
        if v is not None and rf.get(k) is None:
            rf[k] = v

    model = prov.get("model") if isinstance(prov.get("model"), dict) else {}
    env = prov.get("environment") if isinstance(prov.get("environment"), dict) else {}
    prompt = prov.get("prompt") if isinstance(prov.get("prompt"), dict) else {}
    skills = prov.get("skills") if isinstance(prov.get("skills"), dict) else {}
    runtime = prov.get("runtime") if isinstance(prov.get("runtime"), dict) else {}
    put("model_name", model.get("model"))
    put("checkpoint_id", model.get("checkpoint_id"))
    put("prompt_version", prompt.get("prompt_version"))
    put("prompt_hash", prompt.get("system_prompt_sha256"))
    bank = skills.get("bank") if isinstance(skills.get("bank"), dict) else {}  # AssignedSkillProvider's bank
    put("skill_bank_hash", skills.get("sha256") or skills.get("bank_sha256") or skills.get("curriculum_state_id")
        or bank.get("bank_sha256") or bank.get("pool_sha256"))
    put("environment_mode", env.get("base_url"))
    if env.get("adapter") == "shopsimulator_http":
        put("environment_dialect", "canonical")
        put("observation_fidelity", "canonical")
        put("primary_reward", "r_strict")  # shop_env: the top-level reward is r_strict (its healthz says so)
    put("environment_version", env.get("environment_version"))
    put("observation_version", env.get("observation_version"))
    lim = runtime.get("max_steps")
    put("action_limit", lim if isinstance(lim, int) and not isinstance(lim, bool) else None)
    put("split", job.get("split"))
    _set_identity(ctx, identity.with_provenance(rf.get("identity"), prov))
    st.need_fields = rf.get("environment_version") is None or rf.get("model_name") is None and "model" in prov


def _strip(d, counter: list):
    """``d`` without private-goal keys (counted when one was there)."""
    if isinstance(d, dict) and any(k in d for k in GOAL_KEYS):
        counter[0] += 1
        return {k: v for k, v in d.items() if k not in GOAL_KEYS}
    return d


def _ts(v: str | None, key: str, residual: dict):
    if v is None:
        return None
    try:
        d = datetime.fromisoformat(v[:-1] + "+00:00" if v.endswith("Z") else v)
    except ValueError:
        residual.setdefault("ts", {})[key] = v
        return None
    if d.tzinfo is None or d.isoformat() != v:
        residual.setdefault("ts", {})[key] = v  # the dump writes isoformat(): keep the original spelling
    return d


def _right_product(goal, asin, detail: dict):
    if isinstance(goal, dict) and goal.get("asin") is not None:
        return asin is not None and str(asin).casefold() == str(goal["asin"]).casefold()
    m = detail.get("target_asin_match")
    return m if isinstance(m, bool) else None


def _emit(ctx: UnitContext, st: _State, rec: dict, eid: str, attempt: int, task_id: int, sample_id: int) -> None:
    add = ctx.sink.add
    residual: dict = {}
    key = {"episode_id": eid, "attempt": attempt}
    if not rec.keys() <= TOP_KEYS:
        residual["extra"] = {k: rec[k] for k in rec.keys() - TOP_KEYS}
    if len(rec) != len(TOP_KEYS) or "extra" in residual:
        absent = [k for k in TOP_ORDER if k not in rec]
        if absent:
            residual["absent"] = absent
    job = rec["job"]
    if len(job) != 4 or not job.keys() <= {"task_id", "sample_id", "seed", "split"}:
        residual["job"] = job
    prov = rec.get("provenance")
    if not st.have_prov:
        st.have_prov, st.run_prov = True, prov
    if prov is not st.run_prov and prov != st.run_prov:
        residual["provenance"] = prov
    elif st.plain is not None:
        st.plain.append(f"{eid}#{attempt}")
    if st.need_fields and isinstance(prov, dict):
        _run_fields(ctx, st, prov, job)
    model_prov = prov.get("model") if isinstance(prov, dict) and isinstance(prov.get("model"), dict) else {}
    model_name = model_prov.get("model")
    sampling = model_prov.get("sampling") if isinstance(model_prov.get("sampling"), dict) else {}
    seed = job.get("seed")
    send_seed = sampling.get("send_seed") is True and isinstance(seed, int)

    reset = _strip(rec.get("reset"), st.goals)
    reset_d = reset or {}
    conv = rec.get("conversation") or []
    steps = rec.get("steps") or []
    final = rec.get("final")
    goal = final.get("goal") if isinstance(final, dict) else None
    final = _strip(final, st.goals)
    err = rec.get("error")

    # messages (hot path: tuples in the table's column order)
    msg_rows = st.t_messages
    for i, m in enumerate(conv):
        get = m.get
        role, content, tc, tcid = get("role"), get("content"), get("tool_calls"), get("tool_call_id")
        ks = m.keys()
        if type(role) is str and type(content) in STRN and (
                ks == MSG_RC or ks == MSG_RCT and type(tc) is list or ks == MSG_RCI and type(tcid) is str):
            msg_rows.append((eid, attempt, "main", i, role, content, None, None if tc is None else _jb(tc), tcid, None))
            continue
        odd = not ks <= MSG_COLS or "content" not in m or "role" not in m \
            or any(k in m and m[k] is None for k in MSG_OPT) or not (content is None or isinstance(content, str)) \
            or not (tc is None or isinstance(tc, list))
        if odd:
            residual.setdefault("messages", {})[str(i)] = m  # verbatim: the dump takes it as it was
        msg_rows.append((eid, attempt, "main", i, role if isinstance(role, str) else None,
                         content if isinstance(content, str) or content is None else jdump(content),
                         get("reasoning_content") if isinstance(get("reasoning_content"), str) else None,
                         None if tc is None else _jb(tc), tcid if isinstance(tcid, str) else None,
                         get("name") if isinstance(get("name"), str) else None))

    # steps, actions, observations, tools
    tools_seen: set[str] = set()
    n_proto = n_actions = n_invalid = 0
    tin = tout = None
    cache = st.tool_hash_cache
    state = reset_d.get("observation_state")
    state_b = _jb(state)
    expect_obs = conv[1].get("content") if len(conv) > 1 and conv[1].get("role") == "user" else None
    n_msgs = 2 if len(conv) >= 2 else len(conv)
    last_env = None
    t_steps, t_actions, t_obs, t_tools = st.t_steps, st.t_actions, st.t_obs, st.t_tools
    for i, s in enumerate(steps):
        si = str(i)
        sg = s.get
        pe, pf = sg("protocol_error"), sg("policy_failure")
        want = STEP_PE if pe is not None else STEP_PF if pf is not None else STEP_BASE
        if s.keys() != want:
            residual.setdefault("step_keys", {})[si] = sorted(s.keys())
            if not s.keys() <= STEP_ALL:
                residual.setdefault("step_extra", {})[si] = {k: s[k] for k in s.keys() - STEP_ALL}
        if sg("step_index") != i + 1:
            residual.setdefault("step_index", {})[si] = sg("step_index")
        obs_text = sg("observation")
        if obs_text != expect_obs:
            residual.setdefault("observation", {})[si] = obs_text
        model = sg("model")
        if model is None:
            residual.setdefault("model_null", []).append(i)
            model = {}
        mk = model.keys()
        if mk != MODEL_SET:
            residual.setdefault("model_keys", {})[si] = list(mk)
        meta = {}
        if "usage" in model:
            meta["usage"] = model["usage"]
        if "metadata" in model:
            meta["metadata"] = model["metadata"]
        if not mk <= MODEL_SET:
            meta["model_extra"] = {k: model[k] for k in mk - MODEL_SET}
        usage = model.get("usage") or {}
        pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if isinstance(pt, int):
            tin = (tin or 0) + pt
        else:
            pt = None
        if isinstance(ct, int):
            tout = (tout or 0) + ct
        else:
            ct = None
        # tools: one cache entry per offered list (runtimes repeat the same lists): hashes, rows, set hash
        tl = sg("tools")
        set_hash = hashes_json = None
        if tl is not None:
            raw = orjson.dumps(tl)
            hit = cache.get(raw)
            if hit is None:
                rows, plain = [], True
                for t in tl:
                    fn = t.get("function") if isinstance(t, dict) and isinstance(t.get("function"), dict) else {}
                    if not (isinstance(t, dict) and t.keys() == {"type", "function"} and t["type"] == "function"
                            and fn.keys() == {"name", "description", "parameters"}):
                        plain = False
                    name, desc, params = fn.get("name"), fn.get("description"), fn.get("parameters")
                    rows.append((tool_schema_hash(name, desc, params), name, desc, jdump(params)))
                hs = [r[0] for r in rows]
                hit = (rows, tools_set_hash(hs), _jb(hs), plain)
                if len(cache) > 4096:
                    cache.clear()
                cache[raw] = hit
            for h, name, desc, params_s in hit[0]:
                if h not in tools_seen:
                    tools_seen.add(h)
                    t_tools.append((eid, attempt, "main", name, desc, params_s, "execution", h))
            set_hash, hashes_json = hit[1], hit[2]
            if not hit[3]:
                residual.setdefault("tools", {})[si] = tl
        elif "tools" in s:
            residual.setdefault("tools", {})[si] = None
        # protocol error / policy failure, checked against what the dump rebuilds from the columns
        fb = sg("protocol_feedback")
        pe_code = pf_code = None
        mpe = model.get("protocol_error")
        if pe is not None or mpe is not None:
            n_proto += 1
            p = pe if pe is not None else mpe
            pe_code = p.get("code") if isinstance(p, dict) else None
            rebuilt = ({"code": fb.get("code"), "message": fb.get("message")} if isinstance(fb, dict) else None)
            if pe != rebuilt or ("protocol_error" in model and mpe != pe):
                residual.setdefault("protocol_error", {})[si] = {"step": pe, "model": mpe}
            if "protocol_feedback" in s and not isinstance(fb, dict):
                residual.setdefault("protocol_feedback", {})[si] = fb
        mpf = model.get("policy_failure")
        if pf is not None or mpf is not None:
            p = pf if pf is not None else mpf
            pf_code = p.get("code") if isinstance(p, dict) else None
            if pf != {"code": pf_code} or ("policy_failure" in model and mpf != pf):
                residual.setdefault("policy_failure", {})[si] = {"step": pf, "model": mpf}
        lat = model.get("latency_ms")
        t_steps.append((
            eid, attempt, "main", i, i, state.get("page_type") if isinstance(state, dict) else None, state_b,
            n_msgs, set_hash, hashes_json, model.get("reasoning"), model.get("content"),
            model.get("finish_reason"), pe_code, _jb(fb) if isinstance(fb, dict) else None, pf_code, None,
            _jb(model.get("raw_response")), model.get("response_id"), model_name,
            seed + i if send_seed else None, pt, ct, lat, None, _jb(meta) if meta else None))
        # actions: one per tool call; the executed call carries the action and the environment's verdict
        calls = model.get("tool_calls") or []
        env = _strip(sg("environment"), st.goals)
        action = sg("action")
        fbk = env.get("action_feedback") if isinstance(env, dict) else None
        fbk = fbk if isinstance(fbk, dict) else {}
        if calls and not all(isinstance(c, dict) and c.keys() == CALL_KEYS and isinstance(c["raw_arguments"], str)
                             and _args(c["raw_arguments"]) == c["arguments"] for c in calls):
            residual.setdefault("tool_calls", {})[si] = calls
        if action is not None and not calls:
            residual.setdefault("action", {})[si] = action
        first_id = None
        for j, c in enumerate(calls):
            cid = c.get("call_id") if isinstance(c.get("call_id"), str) else None
            if j == 0:
                first_id = cid
            raw_args = c.get("raw_arguments")
            if not isinstance(raw_args, str):
                raw_args = jdump(c.get("arguments"))
            if pe_code is not None:
                valid, code, msg = False, pe_code, (pe or mpe or {}).get("message")
            elif env is not None:
                valid, code, msg = fbk.get("valid"), fbk.get("reason"), fbk.get("message")
            else:
                valid = code = msg = None
            t_actions.append((eid, attempt, "main", i, j, cid, c.get("name") if isinstance(c.get("name"), str) else None,
                              raw_args, action if j == 0 else None, "tool_use", "execution", valid, code, msg))
        if env is not None:
            n_actions += 1
            valid = fbk.get("valid")
            if valid is False:
                n_invalid += 1
            estate = env.get("observation_state")
            otext = env.get("observation")
            payload = {k: v for k, v in env.items() if not (k == "observation" and otext is not None
                                                            or k == "observation_state" and estate is not None)}
            reward = env.get("reward")
            state_b = _jb(estate) if estate is not None else state_b
            t_obs.append((eid, attempt, "main", i, first_id, "environment", otext, _jb(estate),
                          estate.get("page_type") if isinstance(estate, dict) else None,
                          (valid is False) if fbk else None, None if reward is None else float(reward),
                          _jb(payload), env.get("done") if isinstance(env.get("done"), bool) else None))
            if estate is not None:
                state = estate
            if otext is not None:
                expect_obs = otext
            n_msgs += 2
        elif pe_code is not None or "protocol_error" in s:
            t_obs.append((eid, attempt, "main", i, first_id, "error", jdump(fb) if fb is not None else None, None,
                          None, True, None, None, None))
            if calls:
                n_msgs += 1 + len(calls)
            else:
                n_msgs += (1 if (model.get("content") or "").strip() else 0) + 1
        last_env = env
    # final: the last step's answer, or the answer to a runtime terminate
    if final is not None:
        if not (steps and last_env is not None and last_env == final):
            if steps:
                i = len(steps) - 1
                reason = final.get("termination_reason")
                t_actions.append((eid, attempt, "main", i, len((steps[-1].get("model") or {}).get("tool_calls") or []),
                                  None, None, None, f"terminate[{reason}]", "terminate", None, None, None, None))
                ftext, fstate = final.get("observation"), final.get("observation_state")
                t_obs.append((eid, attempt, "main", i, None, "terminal", ftext if isinstance(ftext, str) else None,
                              _jb(fstate) if isinstance(fstate, dict) else None,
                              fstate.get("page_type") if isinstance(fstate, dict) else None, None,
                              float(final["reward"]) if isinstance(final.get("reward"), NUM) else None,
                              _jb({k: v for k, v in final.items() if not (k == "observation" and isinstance(ftext, str)
                                   or k == "observation_state" and isinstance(fstate, dict))}),
                              final.get("done") if isinstance(final.get("done"), bool) else None))
            else:
                residual["final"] = final
    elif steps and isinstance(last_env, dict) and last_env.get("done") is True and "final" in rec:
        residual["final_null"] = True
    # skills
    skill_ids = []
    for j, sk in enumerate(rec.get("selected_skills") or []):
        if sk.keys() != SKILL_KEYS:
            residual.setdefault("skills", {})[str(j)] = sk
        sid = sk.get("skill_id")
        skill_ids.append(sid)
        add("skills_selected", {**key, "skill_id": sid if isinstance(sid, str) else jdump(sid),
                                "skill_version": sk.get("version") if isinstance(sk.get("version"), str) else jdump(sk.get("version")),
                                "scope": None, "content_hash": sk.get("content_sha256"),
                                "content": sk.get("content") if isinstance(sk.get("content"), str) else jdump(sk.get("content")),
                                "metadata": jdump(sk.get("metadata"))})
    if "selected_skills" in rec and rec["selected_skills"] is None:
        residual["skills_null"] = True
    # outcome
    fin = final or {}
    detail = fin.get("reward_detail")
    detail_d = detail if isinstance(detail, dict) else {}
    purchase = fin.get("purchase")
    asin = purchase.get("asin") if isinstance(purchase, dict) else None
    rs = {k: float(v) if isinstance(v, NUM) and not isinstance(v, bool) else None for k in R_COLS
          for v in (detail_d.get(k),)}
    has_r = any(v is not None for v in rs.values())
    add("agents", {**key, "agent_id": "main", "parent_agent_id": None, "agent_role": "main", "agent_type": None,
                   "spawned_by_call_id": None, "depth": 0, "model": model_name})
    if err is not None:
        if not (err.keys() == ERROR_KEYS or err.keys() == ERROR_KEYS - {"traceback"}) \
                or any(err.get(k) is None for k in err):
            residual["error"] = err
        add("failures", {**key, "stage": _s(err.get("stage")), "exception_type": _s(err.get("type")),
                         "message": _s(err.get("message")), "traceback": _s(err.get("traceback")),
                         "occurred_at": rec.get("ended_at")})
    if rec.get("conversation", 0) is None:
        residual["conversation_null"] = True
    if rec.get("steps", 0) is None:
        residual["steps_null"] = True
    dur = rec.get("duration_ms")
    dur_s = None if dur is None else dur / 1000
    if dur is not None and (dur_s * 1000 != dur or isinstance(dur, int)):
        residual["duration_ms"] = dur
    started, ended = _ts(rec.get("started_at"), "started_at", residual), _ts(rec.get("ended_at"), "ended_at", residual)
    persona = reset_d.get("user_persona")
    add("episodes", {**key, **ctx.episode_common(), "task_id": task_id, "sample_id": sample_id,
                     "seed": seed, "split": job.get("split"), "status": rec["status"],
                     # the original store calls a completed record complete only when final.done is true
                     "done": (fin.get("done") is True) if rec["status"] == "completed" else (
                         fin.get("done") if isinstance(fin.get("done"), bool) else None),
                     "reward": float(fin["reward"]) if isinstance(fin.get("reward"), NUM) else None,
                     **rs, "reward_derived": False if has_r else None,
                     "right_product": _right_product(goal, asin, detail_d) if final is not None else None,
                     "purchase_asin": asin if isinstance(asin, str) else None, "reward_detail": jdump(detail),
                     "termination_reason": _s(fin.get("termination_reason")), "model_steps": len(steps),
                     "protocol_errors": n_proto, "total_actions": n_actions, "invalid_actions": n_invalid,
                     "tokens_in": tin, "tokens_out": tout, "instruction": _s(reset_d.get("task_instruction")),
                     "persona": persona if isinstance(persona, str) or persona is None else jdump(persona),
                     "prompt_hash": (prov.get("prompt") or {}).get("system_prompt_sha256")
                     if isinstance(prov, dict) and isinstance(prov.get("prompt"), dict) else None,
                     "skill_ids": jdump(skill_ids), "error_stage": _s((err or {}).get("stage")),
                     "error_type": _s((err or {}).get("type")), "error_message": _s((err or {}).get("message")),
                     "started_at": started, "finished_at": ended, "duration_s": dur_s,
                     "reset_payload": jdump(reset), "source_extra": canonical(residual).decode() if residual else None})


def _s(v):
    return v if isinstance(v, str) or v is None else jdump(v)


def _args(raw: str):
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _NOT_JSON


_NOT_JSON = object()
