"""The run identity of an ingested ShopSimRL run: what ``runs.fingerprint_fields`` holds (docs/gate.md, "Run identity
of an ingested ShopSimRL run").

The keys are ShopSimRL's own plan sections, not the runner's vocabulary (``model_name``, ``sampling``, ...): the
gate and compare check them with ShopSimRL's alignment rules (``scripts/compare_shopsimrl_runs.py``,
``shopsimrl/paired_validation.py``), which compare whole identity objects, so translating them into runner keys
would only lose detail. ``identity_source`` says which vocabulary and where the fields came from:

* ``shopsimrl-manifest``: ``manifest.json``'s semantic plan (its ``plan_fingerprint`` verified): ``model``,
  ``prompt``, ``runtime``, ``environment``, ``task_split``, ``skills``, ``pipeline_version``, ``model_id``, the
  plan's ``jobs`` (count and the sha256 of their sorted keys) and ``send_seed``; plus ``observed``: the first
  record's ``provenance`` sections (the trace-level check), when the records carry one;
* ``shopsimrl-provenance`` (no usable manifest): the first record's ``provenance`` sections ``model``,
  ``environment``, ``prompt``, ``runtime``, ``skills`` and ``send_seed``; the jobs are the run's own records,
  read from the warehouse when a check runs.

Sections are stored whole (``model.transport``, ``runtime.concurrency``, ``task_split.source_path`` included); the
checks leave out what ShopSimRL's leave out.
"""

from __future__ import annotations

import hashlib
import json

SOURCE_MANIFEST = "shopsimrl-manifest"
SOURCE_PROVENANCE = "shopsimrl-provenance"
SOURCES = (SOURCE_MANIFEST, SOURCE_PROVENANCE)
SECTIONS = ("model", "environment", "prompt", "runtime")
JOB_FIELDS = ("split", "task_id", "sample_id")


def shopsimrl_fingerprint(value) -> str:
    """ShopSimRL's ``schemas.fingerprint``: sha256 of the sorted-key, compact JSON (non-ASCII kept)."""
    return hashlib.sha256(json.dumps(value, ensure_ascii=False, sort_keys=True,
                                     separators=(",", ":")).encode()).hexdigest()


def send_seed(model) -> bool:
    """Whether the model was sent the job's seed (ShopSimRL's default: yes); the seed is then part of a job's key."""
    sampling = model.get("sampling") if isinstance(model, dict) else None
    return bool(sampling.get("send_seed", True)) if isinstance(sampling, dict) else True


def job_key_fields(with_seed: bool) -> list[str]:
    return [*JOB_FIELDS, "seed"] if with_seed else list(JOB_FIELDS)


def jobs_identity(keys: list[tuple], with_seed: bool) -> dict:
    """``{"count", "key_fields", "sha256"}`` of a job list (``keys``: tuples in :func:`job_key_fields` order)."""
    return {"count": len(keys), "key_fields": job_key_fields(with_seed),
            "sha256": shopsimrl_fingerprint(sorted(list(k) for k in keys))}


def fingerprint(fields: dict) -> str:
    """``runs.fingerprint`` of an identity (the runner's length: 32 hex digits)."""
    return shopsimrl_fingerprint(fields)[:32]


def plan_identity(manifest) -> tuple[dict | None, str | None]:
    """(fields, None) from a ``shopsimrl-run-manifest-v1``; (None, why) when its plan cannot be trusted."""
    plan = manifest.get("plan") if isinstance(manifest, dict) else None
    if not isinstance(plan, dict):
        return None, "manifest.json has no semantic plan"
    if manifest.get("plan_fingerprint") != shopsimrl_fingerprint(plan):
        return None, ("manifest.json's plan_fingerprint does not match its plan (edited after the run?), so the run's "
                      "identity comes from its records' provenance")
    jobs = plan.get("jobs")
    with_seed = send_seed(plan.get("model"))
    fields = job_key_fields(with_seed)
    if not isinstance(jobs, list) or not jobs or not all(isinstance(j, dict) and all(k in j for k in fields)
                                                         for j in jobs):
        return None, f"manifest.json's plan has no job list with {', '.join(fields)} on every job"
    out = {"identity_source": SOURCE_MANIFEST, "plan_fingerprint": manifest["plan_fingerprint"],
           "pipeline_version": plan.get("pipeline_version"), "model_id": plan.get("model_id"),
           **{k: plan.get(k) for k in (*SECTIONS, "task_split", "skills")},
           "send_seed": with_seed, "jobs": jobs_identity([tuple(j[k] for k in fields) for j in jobs], with_seed)}
    return out, None


def with_provenance(fields: dict | None, prov) -> dict | None:
    """``fields`` (a manifest identity, or None) completed by one record's ``provenance``; None when neither holds
    anything (a record without provenance leaves the identity as it was)."""
    if not isinstance(prov, dict):
        return fields
    secs = {k: prov[k] for k in SECTIONS if isinstance(prov.get(k), dict) and prov[k]}
    if not secs:
        return fields
    if fields is not None and fields.get("identity_source") == SOURCE_MANIFEST:
        return {**fields, "observed": secs}
    return {"identity_source": SOURCE_PROVENANCE, **secs, "skills": prov.get("skills"),
            "send_seed": send_seed(secs.get("model"))}


def mask_assignments(doc) -> dict | None:
    """The compact form of a gate run's ``mask_assignments.json`` kept in ``runs.provenance``: per episode the skill
    ids its mask included, in ShopSimRL's order (None when the file holds no assignments)."""
    rows = doc.get("assignments") if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        return None
    included = {r["episode_id"]: r.get("included_chunk_ids") for r in rows
                if isinstance(r, dict) and isinstance(r.get("episode_id"), str)}
    return {**{k: doc.get(k) for k in ("schema_version", "mask_seed", "pool_sha256", "assignment_sha256", "columns")},
            "included": included}
