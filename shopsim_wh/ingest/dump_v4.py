"""The ``shopsimrl-episode-v4`` writer: warehouse rows back into the ShopSimRL runtime's record and run directory.

Built from the columns, so runner episodes dump too; ``episodes.source_extra`` (ingested records) restores what no
column holds (see v4.py), which makes an ingested record dump back JSON-equal to its input minus every private
``goal`` field (never stored). What the writer reads, per part of the record:

* ``reset`` = ``episodes.reset_payload``; ``conversation`` = ``messages``; ``selected_skills`` = ``skills_selected``
  in ``episodes.skill_ids`` order; ``error`` = ``failures``; ``job`` = task_id / sample_id / seed / split.
* a step = ``steps`` row (``step_index = step_idx + 1``): model content / reasoning / finish_reason / response_id /
  latency / raw_response, ``metadata.usage`` (else usage from tokens_in / tokens_out), ``metadata.metadata``;
  ``tool_calls`` = the step's ``tool_use`` actions (arguments parsed from the raw text); ``environment`` = the
  ``environment`` observation's ``payload`` with ``content`` as ``observation`` and ``observation_state``;
  ``tools`` = the ``tools`` rows in ``steps.tool_schema_hashes`` order; the step's ``observation`` text = the
  first user message, then the previous environment answer's text.
* ``final`` = the ``terminal`` observation's payload, else the last step's environment answer when it is done,
  else (runner rows without either) one built from the episode's outcome columns.
* ``provenance`` = the record's own (source_extra), else the run's first record's (``runs.provenance.v4``), else
  one built from the ``runs`` columns, with the server URLs the runner recorded (``runs.provenance`` model /
  environment ``base_url``, else ``runs.config``; ``embedded`` for the in-process server; never credentials).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path
from statistics import fmean

import orjson

from .. import __version__
from .stored import _Episode, _iso, _loads

V4 = "shopsimrl-episode-v4"
MODEL_ORDER = ("content", "reasoning", "tool_calls", "finish_reason", "usage", "response_id", "metadata", "latency_ms",
               "protocol_error", "policy_failure", "raw_response")


def _tool_json(t: dict) -> dict:
    return {"type": "function", "function": {"name": t["name"], "description": t["description"],
                                             "parameters": _loads(t["parameters"])}}


def _args(raw):
    if raw is None:
        return {}
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {"_raw_arguments": raw}


def _feedback(text):
    """steps.protocol_feedback: the feedback object as JSON (ingest) or the text the runner sent."""
    if text is None:
        return None
    try:
        v = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    return v


def _env(o: dict | None) -> dict | None:
    if o is None:
        return None
    d = _loads(o["payload"]) or {}
    if o["content"] is not None:
        d["observation"] = o["content"]
    if o["observation_state"] is not None:
        d["observation_state"] = _loads(o["observation_state"])
    if not o["payload"]:  # runner rows without payload: the columns are all there is
        d.setdefault("reward", o["reward"])
        d.setdefault("done", o["done"])
    return d


def _messages(ep: _Episode, res: dict) -> list[dict]:
    verbatim = res.get("messages") or {}
    out = []
    for m in ep.of(ep.messages, "main"):
        v = verbatim.get(str(m["msg_idx"]))
        if v is not None:
            out.append(v)
            continue
        d = {"role": m["role"], "content": m["content"]}
        for k in ("reasoning_content", "tool_call_id", "name"):
            if m[k] is not None:
                d[k] = m[k]
        if m["tool_calls"] is not None:
            d["tool_calls"] = _loads(m["tool_calls"])
        out.append(d)
    return out


def _step(ep: _Episode, s: dict, res: dict, by_hash: dict, expect_obs, model_name) -> dict:
    i = s["step_idx"]
    si = str(i)
    acts = ep.of(ep.actions, "main", i)
    calls_rows = [a for a in acts if a["action_type"] == "tool_use"]
    obs = ep.of(ep.observations, "main", i)
    env_row = next((o for o in obs if o["observation_type"] == "environment"), None)
    meta = _loads(s["metadata"]) or {}
    fb = _feedback(s["protocol_feedback"])
    fb_d = fb if isinstance(fb, dict) else {}
    pe = pf = mpe = mpf = None
    if si in (res.get("protocol_error") or {}):
        pe, mpe = res["protocol_error"][si]["step"], res["protocol_error"][si]["model"]
    elif s["protocol_error"] is not None:
        pe = mpe = {"code": fb_d.get("code", s["protocol_error"]), "message": fb_d.get(
            "message", calls_rows[0]["feedback_message"] if calls_rows else None)}
    if si in (res.get("policy_failure") or {}):
        pf, mpf = res["policy_failure"][si]["step"], res["policy_failure"][si]["model"]
    elif s["policy_failure"] is not None:
        pf = mpf = {"code": s["policy_failure"]}
    if si in (res.get("tool_calls") or {}):
        calls = res["tool_calls"][si]
    else:
        calls = [{"call_id": a["call_id"], "name": a["tool_name"], "arguments": _args(a["arguments"]),
                  "raw_arguments": a["arguments"]} for a in calls_rows]
    usage = meta.get("usage")
    if usage is None and "usage" not in meta:
        usage = {k: v for k, v in (("prompt_tokens", s["tokens_in"]), ("completion_tokens", s["tokens_out"]))
                 if v is not None}
    model = {"content": s["content"], "reasoning": s["reasoning"], "tool_calls": calls,
             "finish_reason": s["finish_reason"], "usage": usage, "response_id": s["response_id"],
             "metadata": meta.get("metadata", {}), "latency_ms": s["latency_ms"], "protocol_error": mpe,
             "policy_failure": mpf, "raw_response": _loads(s["raw_response"])}
    model.update(meta.get("model_extra") or {})
    keys = (res.get("model_keys") or {}).get(si)
    if keys is not None:
        model = {k: model.get(k) for k in keys}
    if i in (res.get("model_null") or []):
        model = None
    if si in (res.get("tools") or {}):
        tools = res["tools"][si]
    else:
        hashes = _loads(s["tool_schema_hashes"]) or []
        tools = [_tool_json(by_hash[h]) for h in hashes if h in by_hash]
    action = next((a["action"] for a in calls_rows if a["action"] is not None), None)
    action = (res.get("action") or {}).get(si, action)
    step = {"step_index": (res.get("step_index") or {}).get(si, i + 1),
            "observation": (res.get("observation") or {}).get(si, expect_obs), "tools": tools, "model": model}
    if pe is not None:
        step["protocol_error"] = pe
        step["protocol_feedback"] = fb
    if pf is not None:
        step["policy_failure"] = pf
    step["action"] = action
    step["environment"] = _env(env_row)
    keys = (res.get("step_keys") or {}).get(si)
    if keys is not None:
        extra = (res.get("step_extra") or {}).get(si, {})
        step = {k: extra[k] if k in extra else step.get(k) for k in keys}
    return step


def _final(ep: _Episode, res: dict, steps: list[dict]):
    if "final" in res:
        return res["final"]
    term = next((o for o in ep.observations if o["observation_type"] == "terminal"), None)
    if term is not None:
        return _env(term)
    if res.get("final_null"):
        return None
    last = steps[-1].get("environment") if steps else None
    if isinstance(last, dict) and last.get("done") is True:
        return dict(last)
    e = ep.episode
    if e["done"] is None and e["reward"] is None:
        return None
    return {"done": e["done"], "reward": e["reward"], "reward_detail": _loads(e["reward_detail"]) or {},
            "purchase": {"asin": e["purchase_asin"]} if e["purchase_asin"] else {},
            "termination_reason": e["termination_reason"]}


def _provenance(ep: _Episode, res: dict):
    if "provenance" in res:
        return res["provenance"]
    v4 = ep.run_prov.get("v4") if isinstance(ep.run_prov, dict) else None
    if isinstance(v4, dict) and "record_provenance" in v4:
        return v4["record_provenance"]
    r = ep.run or {}
    cfg = _loads(r.get("config")) or {}
    model_cfg = cfg.get("model") if isinstance(cfg.get("model"), dict) else {}
    env_cfg = cfg.get("environment") if isinstance(cfg.get("environment"), dict) else {}
    # the base URLs the runner recorded (runs.provenance, credentials stripped), else the config's
    from ..core.config import public_url

    rp = ep.run_prov if isinstance(ep.run_prov, dict) else {}
    run_model, run_env = (p if isinstance(p, dict) else {} for p in (rp.get("model"), rp.get("environment")))
    model_url, env_url = run_model.get("base_url", model_cfg.get("base_url")), run_env.get("base_url", env_cfg.get("url"))
    flat = {**model_cfg, **(model_cfg.get("sampling") if isinstance(model_cfg.get("sampling"), dict) else {})}
    sampling = {k: flat[k] for k in ("temperature", "max_tokens", "top_p", "send_seed", "tool_choice", "extra_body")
                if k in flat}  # the config's model.sampling.* (older configs: model.*), as the SQL export reads it
    return {"model": {"provider": "openai_compatible", "model": r.get("model_name"),
                      "base_url": model_url and public_url(model_url), "checkpoint_id": r.get("checkpoint_id"),
                      "sampling": sampling},
            "environment": {"adapter": "shopsimulator_http",
                            "base_url": public_url(env_url) if env_url else r.get("environment_mode"),
                            "persona": ep.episode.get("persona") is not None, "interaction_mode": "single_turn",
                            "environment_version": r.get("environment_version"),
                            "observation_version": r.get("observation_version")},
            "prompt": {"prompt_version": r.get("prompt_version"), "system_prompt_sha256": ep.episode.get("prompt_hash")},
            "skills": {"provider": "none"} if not r.get("skill_bank_hash") else
            {"provider": "shopsim-wh-skill-bank", "sha256": r.get("skill_bank_hash")},
            "runtime": {"max_steps": r.get("action_limit"), "action_protocol": "openai-function-tools-repair-v3",
                        "adapter": f"shopsim-wh {__version__}"}}


def to_v4(ep: _Episode) -> dict:
    """One stored attempt as a ``shopsimrl-episode-v4`` record (see the module docstring)."""
    e = ep.episode
    res = _loads(e.get("source_extra")) or {}
    conv = _messages(ep, res)
    by_hash = {t["schema_hash"]: t for t in ep.of(ep.tools, "main")}
    prov = _provenance(ep, res)
    model_name = (prov.get("model") or {}).get("model") if isinstance(prov, dict) and isinstance(prov.get("model"), dict) else None
    steps = []
    expect = conv[1].get("content") if len(conv) > 1 and isinstance(conv[1], dict) and conv[1].get("role") == "user" else None
    for s in ep.of(ep.steps, "main"):
        step = _step(ep, s, res, by_hash, expect, model_name)
        env = step.get("environment")
        if isinstance(env, dict) and isinstance(env.get("observation"), str):
            expect = env["observation"]
        steps.append(step)
    skills_by_id = {sk["skill_id"]: sk for sk in ep.skills}
    verbatim = res.get("skills") or {}
    skills = []
    for j, sid in enumerate(_loads(e["skill_ids"]) or []):
        if str(j) in verbatim:
            skills.append(verbatim[str(j)])
            continue
        sk = skills_by_id.get(sid)
        if sk is not None:
            skills.append({"skill_id": sk["skill_id"], "content": sk["content"], "version": sk["skill_version"],
                           "metadata": _loads(sk["metadata"]), "content_sha256": sk["content_hash"]})
    err = res.get("error")
    if err is None and ep.failures:
        f = ep.failures[0]
        err = {"stage": f["stage"], "type": f["exception_type"], "message": f["message"]}
        if f["traceback"] is not None:
            err["traceback"] = f["traceback"]
    ts = res.get("ts") or {}
    dur = res.get("duration_ms", None if e["duration_s"] is None else e["duration_s"] * 1000)
    rec = {"schema_version": V4, "episode_id": _episode_id(ep.eid, e), "status": e["status"],
           "job": res.get("job") or {"task_id": e["task_id"], "sample_id": e["sample_id"], "seed": e["seed"],
                                     "split": e["split"]},
           "provenance": prov, "started_at": ts.get("started_at", _iso(e["started_at"])),
           "ended_at": ts.get("ended_at", _iso(e["finished_at"])), "duration_ms": dur,
           "reset": _loads(e["reset_payload"]), "selected_skills": None if res.get("skills_null") else skills,
           "conversation": None if res.get("conversation_null") else conv,
           "steps": None if res.get("steps_null") else steps, "final": _final(ep, res, steps), "error": err}
    for k in res.get("absent") or ():
        rec.pop(k, None)
    rec.update(res.get("extra") or {})
    return rec


def _episode_id(eid: str, e: dict) -> str:
    """The runtime's zero-padded id (``EpisodeJob.episode_id``) for a shop episode stored under another spelling
    (runner rows written before ids were padded), so the ShopSimRL store finds the job's line."""
    if eid.startswith("task-") and "__sample-" in eid and isinstance(e.get("task_id"), int) \
            and isinstance(e.get("sample_id"), int):
        return f"task-{e['task_id']:06d}__sample-{e['sample_id']:03d}"
    return eid


# --- the run directory ---------------------------------------------------------------------------
def _fingerprint(value) -> str:
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _line(rec: dict) -> bytes:
    import json
    return (json.dumps(rec, ensure_ascii=False, allow_nan=False) + "\n").encode()


def is_complete(rec) -> bool:
    """The ShopSimRL store's rule: schema v4, status completed and ``final.done`` true."""
    return bool(isinstance(rec, dict) and rec.get("schema_version") == V4 and rec.get("status") == "completed"
                and isinstance(rec.get("final"), dict) and rec["final"].get("done") is True)


def _mean(v):
    return fmean(v) if v else None


def _sem(v):
    if len(v) < 2:
        return None
    m = fmean(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1) / len(v))


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def summarize(records, *, requested: int | None = None, created_at: str | None = None) -> dict:
    """``shopsimrl-eval-summary-v2`` of the latest record per episode (the same counts, means and rates as the
    ShopSimRL summarizer: completed records only, ``r_*`` components of ``reward_detail``, model steps,
    protocol / policy failures, invalid actions from ``environment.action_feedback``, tokens, durations)."""
    records = list(records)
    done = [r for r in records if is_complete(r)]
    failed = [r for r in records if not is_complete(r)]
    rewards, steps_n, durations = [], [], []
    comps: dict[str, list[float]] = defaultdict(list)
    terms: Counter = Counter()
    tokens: Counter = Counter()
    errors: Counter = Counter()
    model_steps = proto = policy = actions = invalid = 0
    for r in done:
        fin = r["final"]
        if isinstance(fin.get("reward"), (int, float)) and not isinstance(fin.get("reward"), bool):
            rewards.append(float(fin["reward"]))
        detail = fin.get("reward_detail") or {}
        if isinstance(detail, dict):
            for k, v in detail.items():
                if k.startswith("r_") and isinstance(v, (int, float)) and not isinstance(v, bool):
                    comps[k].append(float(v))
        steps = r.get("steps") or []
        steps_n.append(float(len(steps)))
        if isinstance(r.get("duration_ms"), (int, float)):
            durations.append(float(r["duration_ms"]))
        terms[str(fin.get("termination_reason", "unknown"))] += 1
        for s in steps:
            model_steps += 1
            proto += isinstance(s.get("protocol_error"), dict)
            policy += isinstance(s.get("policy_failure"), dict)
            env = s.get("environment")
            if isinstance(env, dict):
                actions += 1
                fb = env.get("action_feedback") or {}
                invalid += bool(isinstance(fb, dict) and fb and fb.get("valid") is False)
            usage = (s.get("model") or {}).get("usage") or {}
            if isinstance(usage, dict):
                for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
                    if _int(usage.get(k)):
                        tokens[k] += usage[k]
                det = usage.get("completion_tokens_details") or {}
                if isinstance(det, dict) and _int(det.get("reasoning_tokens")):
                    tokens["reasoning_tokens"] += det["reasoning_tokens"]
    for r in failed:
        errors[str((r.get("error") or {}).get("type", "unknown"))] += 1
    req = requested if requested is not None else len(records)
    return {"schema_version": "shopsimrl-eval-summary-v2",
            "created_at": created_at or datetime.now(UTC).isoformat(),
            "counts": {"requested": req, "trace_files": len(records), "completed": len(done), "failed": len(failed),
                       "scored": len(rewards), "coverage": len(done) / req if req else 0.0},
            "primary": {"reward_mean": _mean(rewards), "reward_sem": _sem(rewards),
                        "success_rate": _mean(comps.get("r_success", []))},
            "reward_components": {k: _mean(v) for k, v in sorted(comps.items())},
            "behavior": {"steps_mean": _mean(steps_n), "model_steps": model_steps, "protocol_errors": proto,
                         "protocol_error_rate": proto / model_steps if model_steps else None,
                         "policy_failures": policy, "policy_failure_rate": policy / model_steps if model_steps else None,
                         "invalid_action_rate": invalid / actions if actions else None, "invalid_actions": invalid,
                         "total_actions": actions, "termination_reasons": dict(sorted(terms.items()))},
            "cost": {"duration_ms_mean": _mean(durations), "tokens": dict(sorted(tokens.items()))},
            "errors": dict(sorted(errors.items()))}


def _manifest(eps: list[_Episode], records: list[dict]) -> dict:
    """The ingested manifest as it was, else one built from the run (a runner run): plan with its jobs."""
    run = eps[0].run if eps else {}
    prov = _loads(run.get("provenance")) or {} if run else {}
    if isinstance(prov.get("manifest"), dict):
        return prov["manifest"]
    jobs, seen = [], set()
    for r in records:
        j = r.get("job") or {}
        k = (j.get("split"), j.get("task_id"), j.get("sample_id"))
        if k not in seen:
            seen.add(k)
            jobs.append({"task_id": j.get("task_id"), "sample_id": j.get("sample_id"), "seed": j.get("seed"),
                         "split": j.get("split")})
    p = records[-1].get("provenance") or {} if records else {}
    plan = {"pipeline_version": f"shopsim-wh-{__version__}", "experiment": run.get("experiment"),
            "model_id": run.get("model_name"), "model": p.get("model"),
            "task_split": {"name": run.get("split"), "manifest_hash": run.get("split_manifest_hash")},
            "jobs": jobs, "environment": p.get("environment"), "runtime": p.get("runtime"),
            "prompt": p.get("prompt"), "skills": p.get("skills")}
    created = run.get("created_at")
    return {"schema_version": "shopsimrl-run-manifest-v1",
            "created_at": created.isoformat() if isinstance(created, datetime) else created,
            "plan_fingerprint": _fingerprint(plan), "plan": plan}


def write_run_dir(eps: list[_Episode], out: Path) -> Path:
    """``out/traces.jsonl`` (every attempt, attempts of one episode in order: the store's last-line-wins resume
    keeps the final attempt), ``out/manifest.json``, ``out/summary.json`` (the ingested one when there was one,
    else computed from the final attempts)."""
    out.mkdir(parents=True, exist_ok=True)
    records = [to_v4(ep) for ep in eps]
    with open(out / "traces.jsonl", "wb") as f:
        for r in records:
            f.write(_line(r))
    man = _manifest(eps, records)
    (out / "manifest.json").write_text(_pretty(man), encoding="utf-8")
    run = eps[0].run if eps else {}
    prov = _loads(run.get("provenance")) or {} if run else {}
    summary = prov.get("summary") if isinstance(prov.get("summary"), dict) else None
    if summary is None:
        latest = {}
        for r in records:
            latest[r["episode_id"]] = r
        jobs = (man.get("plan") or {}).get("jobs")
        summary = summarize([latest[k] for k in sorted(latest)], requested=len(jobs) if isinstance(jobs, list) else None)
    (out / "summary.json").write_text(_pretty(summary), encoding="utf-8")
    return out


def _pretty(obj) -> str:
    import json
    return json.dumps(obj, ensure_ascii=False, indent=2, allow_nan=False)
