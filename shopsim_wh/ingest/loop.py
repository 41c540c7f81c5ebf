"""Ingest of ShopSimRL's Trace2Skill round artifacts (issue 30): a round directory in, joinable tables out.

A *round directory* is what ShopSimRL's skill-improvement loop leaves per round (docs/loop.md): the published
``artifacts/round-NNN/`` (``analysis/`` and ``gate/``), ``artifacts/cold-start/``, or a run's local Trace2Skill output
(``evidence_cards.jsonl``, ``cluster_batches.jsonl``, ``initial_skill_draft.json``, a gate's ``mask_assignments.json``
...). :func:`split_paths` finds them among the paths ``shopsim-wh ingest`` was given (by the directory's shape, or all
of them with ``--format shopsimrl-trace2skill``); :func:`ingest_units` lands each one in one atomic commit under
partition ``run_id = <round>``, one ``loop_artifacts`` row per file. A file whose bytes the round already holds adds
nothing (``already_present``); a file of a kind the round holds with other bytes is refused (artifacts are
immutable once ingested: ``runs rm`` the round first). A file that breaks its format fails its whole round, with
the file and field named, and nothing of the round is written.

Gold never lands: of a failure card's ``privileged_audit`` only the non-gold keys are kept (not ``gold_asin`` nor
``chosen_asin``), and neither the audit transcript nor the trials' purchases are read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ..core.errors import IngestError
from ..core.names import check_name
from ..core.schema import to_arrow
from ..rollout.jobs import sha256_json
from ._io import sha256_files
from ._rows import jdump

FORMAT = "shopsimrl-trace2skill"
ROUND_NAME = re.compile(r"^(round-\d+|cold-start)$")
PHASE_DIRS = ("analysis", "gate")
# files that make a directory a round directory (directly or in analysis/ or gate/)
STRONG = frozenset({
    "evidence_cards.jsonl", "failure_cards.jsonl", "cluster_batches.jsonl", "initial_skill_draft.json",
    "initial_skillbank.json", "selected_skillbank.json", "candidate_pool.json", "proposal_ledger.jsonl",
    "contributions.json", "trace2skill_manifest.json", "online_gate_manifest.json", "analysis_summary.json",
    "recovery_manifest.json",
})
# kept whole in loop_artifacts.header (summaries, manifests, curricula: no gold in them)
HEADER_ONLY = frozenset({"analysis_summary.json", "summary.json", "online_gate_manifest.json", "curriculum.json",
                         "recovery_manifest.json", "trace2skill_manifest.json"})
FILE_ONLY = frozenset({"selected_skill.md", "initial_skill_draft.md"})
NON_GOLD_AUDIT = ("failure_surface", "earliest_divergence", "oracle_comparison", "replay_evidence", "minimal_repair",
                  "repair_validation_result")
COMPONENTS = ("r_att", "r_loose", "r_option", "r_price", "r_strict", "r_success", "r_type")


class LoopArtifactError(IngestError):
    """A round artifact that breaks its format (the message names the file and the field)."""


@dataclass
class LoopUnit:
    """One round directory: its root, the artifact files of it to ingest, the round (partition run_id)."""

    root: Path
    files: list[Path]
    round_id: str | None = None


@dataclass
class Parsed:
    """One artifact file, read: its rows per table and its ``loop_artifacts`` fields."""

    path: Path
    kind: str
    sha: str
    rows: dict[str, list[dict]] = field(default_factory=dict)
    header: dict | None = None
    artifact_schema: str | None = None
    created_at: datetime | None = None
    declared: str | None = None
    recomputed: str | None = None
    doc: object = None  # the parsed JSON document (contributions need the round's manifest and the runs)

    def add(self, table: str, row: dict) -> None:
        self.rows.setdefault(table, []).append(row)


# ---- finding round directories -------------------------------------------------------------------------------


def _artifacts_in(d: Path) -> list[Path]:
    """The loop artifact files directly in ``d`` and in its ``analysis/`` and ``gate/``."""
    out = []
    for sub in (d, *(d / p for p in PHASE_DIRS)):
        if sub.is_dir():
            out += [f for f in sorted(sub.iterdir()) if f.is_file() and _known(f.name)]
    return out


def _known(name: str) -> bool:
    return name in STRONG or name in HEADER_ONLY or name in FILE_ONLY or name == "mask_assignments.json"


def is_round_dir(d: Path) -> bool:
    return d.is_dir() and any(f.name in STRONG for f in _artifacts_in(d))


def _roots_under(d: Path) -> list[Path]:
    if is_round_dir(d):
        return [d]
    out = []
    for sub in sorted(d.iterdir()):
        if sub.is_dir() and not sub.name.startswith((".", "_")):
            out += _roots_under(sub)
    return out


def _unit_for(root: Path, files: list[Path]) -> LoopUnit:
    """A round directory's unit; ``root`` may be a round's ``analysis/`` or ``gate/`` (the round is its parent)."""
    if root.name in PHASE_DIRS and ROUND_NAME.match(root.parent.name):
        return LoopUnit(root.parent, files, root.parent.name)
    return LoopUnit(root, files, root.name if ROUND_NAME.match(root.name) else None)


def split_paths(paths, fmt: str = "auto") -> tuple[list[LoopUnit], list[str]]:
    """(round-directory units, the remaining paths for the trace readers).

    With ``fmt == FORMAT`` every path is a round directory (or one artifact file of one). With ``auto`` a directory
    holding round directories gives those, and what else it holds (e.g. a gate's ``traces.jsonl``) is passed on as
    files; paths without any round directory are passed on unchanged. Other formats: nothing is taken."""
    import glob

    from ._io import expand_paths

    if fmt not in ("auto", FORMAT):
        return [], list(paths)
    units: list[LoopUnit] = []
    rest: list[str] = []
    for raw in paths:
        s = str(raw)
        matches = [Path(m) for m in sorted(glob.glob(s, recursive=True))] if glob.has_magic(s) else [Path(s)]
        for p in matches:
            p = p.resolve() if p.exists() else p
            if p.is_file() and (fmt == FORMAT or (_known(p.name) and is_round_dir(p.parent))):
                units.append(_unit_for(p.parent, [p]))
                continue
            if not p.is_dir():
                rest.append(str(p) if matches != [Path(s)] else s)
                continue
            roots = [p] if fmt == FORMAT else _roots_under(p)
            if fmt == FORMAT and not is_round_dir(p):
                raise LoopArtifactError(
                    f"{p}: not a ShopSimRL round directory (no {', '.join(sorted(STRONG))} in it, in analysis/ or in "
                    "gate/); pass a round directory such as artifacts/round-000, or drop --format")
            if not roots:
                rest.append(str(p))
                continue
            claimed: set[Path] = set()
            for r in roots:
                files = _artifacts_in(r)
                claimed.update(files)
                units.append(_unit_for(r, files))
            rest += [str(f) for f in expand_paths([p]) if f not in claimed]
    return _merge(units), rest


def _merge(units: list[LoopUnit]) -> list[LoopUnit]:
    """Units of the same root (one file at a time, or the round and its gate/) become one."""
    by_root: dict[Path, LoopUnit] = {}
    for u in units:
        have = by_root.setdefault(u.root, LoopUnit(u.root, [], u.round_id))
        have.files += [f for f in u.files if f not in have.files]
    return list(by_root.values())


# ---- reading one file ----------------------------------------------------------------------------------------


def _fail(path: Path, where: str, problem: str) -> LoopArtifactError:
    return LoopArtifactError(f"{path}: {where}: {problem}; fix or remove the file and ingest the round again "
                             "(nothing of this round was written)")


def _load_json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _fail(path, "the document", f"not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise _fail(path, "the document", f"a JSON object is expected, not {type(doc).__name__}")
    return doc


def _load_jsonl(path: Path) -> list[tuple[int, dict]]:
    out = []
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise _fail(path, f"line {n}", f"not JSON ({e})") from None
            if not isinstance(rec, dict):
                raise _fail(path, f"line {n}", "a JSON object is expected")
            out.append((n, rec))
    return out


class _Doc:
    """Typed field access on one object of a file; a wrong field raises naming the file, the place and the field."""

    def __init__(self, path: Path, where: str, obj: dict):
        self.path, self.where, self.obj = path, where, obj

    def _get(self, key: str, types: tuple, required: bool, what: str):
        v = self.obj.get(key)
        if v is None:
            if required:
                raise _fail(self.path, f"{self.where} field {key!r}", f"missing (expected {what})")
            return None
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            raise _fail(self.path, f"{self.where} field {key!r}", f"expected {what}, got {type(v).__name__} {v!r:.60}")
        return v

    def s(self, key: str, required: bool = False) -> str | None:
        return self._get(key, (str,), required, "a string")

    def i(self, key: str, required: bool = False) -> int | None:
        return self._get(key, (int,), required, "an integer")

    def f(self, key: str, required: bool = False) -> float | None:
        v = self._get(key, (int, float), required, "a number")
        return None if v is None else float(v)

    def b(self, key: str) -> bool | None:
        return self._get(key, (bool,), False, "true or false")

    def lst(self, key: str, required: bool = False) -> list | None:
        return self._get(key, (list,), required, "a list")

    def obj_(self, key: str, required: bool = False) -> dict | None:
        return self._get(key, (dict,), required, "an object")

    def strs(self, key: str, required: bool = False) -> list[str] | None:
        v = self.lst(key, required)
        if v is not None and not all(isinstance(x, str) for x in v):
            raise _fail(self.path, f"{self.where} field {key!r}", "expected a list of strings")
        return v

    def ts(self, key: str = "created_at") -> datetime | None:
        v = self.s(key)
        if v is None:
            return None
        try:
            t = datetime.fromisoformat(v)
        except ValueError:
            raise _fail(self.path, f"{self.where} field {key!r}", f"not an ISO-8601 time: {v!r:.60}") from None
        return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC)

    def items(self, key: str, required: bool = True) -> list[_Doc]:
        v = self.lst(key, required) or []
        out = []
        for n, x in enumerate(v):
            if not isinstance(x, dict):
                raise _fail(self.path, f"{self.where} field {key!r}[{n}]", "expected an object")
            out.append(_Doc(self.path, f"{self.where}{key}[{n}]".lstrip(), x))
        return out


def _cards(p: Parsed) -> None:
    for line, rec in _load_jsonl(p.path):
        d = _Doc(p.path, f"line {line}", rec)
        traj = d.s("source_trajectory_id", True)
        status = d.s("status")
        card_id = d.s("card_id", status != "ANALYST_ERROR") or f"analyst-error-{traj}"
        channel = d.s("channel") or ("failure" if status == "ANALYST_ERROR" else None)
        if channel not in ("success", "failure"):
            raise _fail(p.path, f"line {line} field 'channel'", f"expected 'success' or 'failure', got {channel!r}")
        row = {"card_id": card_id, "source_trajectory_id": traj, "channel": channel, "stage": d.s("stage"),
               "status": status, "related_chunk_ids": jdump(d.strs("related_chunk_ids")),
               "firewall_findings": jdump(d.strs("firewall_findings")),
               "forced_no_proposal_reason": d.s("forced_no_proposal_reason"),
               "eligible_for_consolidation": d.b("eligible_for_consolidation"), "empty": bool(d.b("empty")),
               "error": jdump(d.obj_("error")), "input_fingerprint": d.s("input_fingerprint"),
               "card_schema": d.s("schema_version"), "created_at": d.ts(), "line": line}
        if channel == "success":
            row.update(mechanism=d.s("mechanism"), applicable_when=d.s("applicable_when"),
                       observed_evidence=d.s("observed_evidence"), decisive_behavior=d.s("decisive_behavior"),
                       lesson=d.s("generalizable_lesson"), confidence=d.f("confidence"))
        else:
            da = d.obj_("deployable_abstraction")
            if da is not None:
                a = _Doc(p.path, f"line {line} deployable_abstraction", da)
                row.update(mechanism=a.s("failure_mechanism"), applicable_when=a.s("applicable_when"),
                           lesson=a.s("corrective_procedure"), target_chunk_id=a.s("target_chunk_id") or None,
                           deployable_abstraction=jdump(da))
            audit = d.obj_("privileged_audit")
            if audit is not None:  # the non-gold keys only: gold_asin / chosen_asin never land
                row["audit"] = jdump({k: audit[k] for k in NON_GOLD_AUDIT if k in audit})
            row.update(audit_actions=len(d.lst("audit_action_summary") or []) if "audit_action_summary" in rec else None,
                       terminal_trials=len(d.lst("terminal_trials") or []) if "terminal_trials" in rec else None,
                       successful_counterfactual_trials=d.i("successful_counterfactual_trials"),
                       grounded_live_actions=d.i("grounded_live_actions"))
        p.add("evidence_cards", row)


def _clusters(p: Parsed) -> None:
    for line, rec in _load_jsonl(p.path):
        d = _Doc(p.path, f"line {line}", rec)
        batch = d.s("batch_id", True)
        only = d.strs("evidence_only_card_ids") or []
        for c in d.items("clusters"):
            cards = c.strs("evidence_card_ids", True)
            p.add("evidence_clusters", {
                "cluster_id": c.s("cluster_id", True), "batch_id": c.s("batch_id") or batch,
                "channel": c.s("channel") or d.s("channel"), "workflow_stage": c.s("workflow_stage"),
                "mechanism": c.s("mechanism"), "applicable_when": c.s("applicable_when"),
                "procedure": c.s("procedure"), "verification": c.s("verification"),
                "common_failure": c.s("common_failure"), "evidence_card_ids": jdump(cards), "cards": len(cards),
                "batch_evidence_only_card_ids": jdump(only), "batch_input_fingerprint": d.s("input_fingerprint"),
                "cluster_schema": c.s("schema_version"), "created_at": d.ts(), "line": line})


def render_chunk(title: str, applicable_when: str, procedure: list[str], verification: str, avoid: str) -> str:
    """ShopSimRL's rendering of a chunk as skill text (labels in English)."""
    steps = "\n".join(f"  {n}. {s}" for n, s in enumerate(procedure, 1))
    return (f"### {title}\n\n- Applies when: {applicable_when}\n- Procedure:\n{steps}\n- Verify: {verification}\n"
            f"- Avoid: {avoid}")


def _draft(p: Parsed) -> None:
    doc = _Doc(p.path, "", p.doc)
    draft_sha = sha256_json(p.doc)
    for c in doc.items("chunks"):
        steps = c.strs("procedure", True)
        content = render_chunk(c.s("title", True), c.s("applicable_when") or "", steps, c.s("verification") or "",
                               c.s("common_failure") or "")
        p.add("skill_chunks", {
            "chunk_id": c.s("chunk_id", True), "position": c.i("order", True), "title": c.s("title"),
            "workflow_stage": c.s("workflow_stage"), "applicable_when": c.s("applicable_when"),
            "procedure": jdump(steps), "verification": c.s("verification"), "common_failure": c.s("common_failure"),
            "evidence_cluster_ids": jdump(c.strs("evidence_cluster_ids", True)), "content": content,
            "content_sha256": sha256_json(content), "skill_title": doc.s("skill_title"), "draft_sha256": draft_sha,
            "created_at": doc.ts()})
    p.header = {k: v for k, v in p.doc.items() if k != "chunks"}


def _bank(p: Parsed, ctx: _Context) -> None:
    doc = _Doc(p.path, "", p.doc)
    if doc.s("schema_version", True) != "shopsimrl-skillbank-v1":
        raise _fail(p.path, "field 'schema_version'", f"expected 'shopsimrl-skillbank-v1', got {doc.s('schema_version')!r}")
    skills = doc.items("skills")
    p.declared = bank_sha = sha256_json(p.doc)  # ShopSimRL's bank_sha256: the fingerprint of the whole parsed file
    p.header = {k: v for k, v in p.doc.items() if k != "skills"}
    rows = []
    for n, s in enumerate(skills, 1):
        meta = s.obj_("metadata") or {}
        m = _Doc(p.path, f"{s.where} metadata", meta)
        content = s.s("content", True)
        rows.append({"bank_sha256": bank_sha, "position": n, "skill_id": s.s("skill_id", True),
                     "skill_version": s.s("version"), "enabled": s.b("enabled") is not False, "content": content,
                     "content_sha256": s.s("content_sha256") or sha256_json(content),
                     "candidate_id": m.s("selected_intervention_id"), "estimated_effect": m.f("estimated_effect"),
                     "contribution_rank": m.i("contribution_rank"), "metadata": jdump(meta)})
    if bank_sha in ctx.banks:  # one row per snapshot in the warehouse: a bank held already is not added again
        return
    ctx.banks.add(bank_sha)
    p.add("skillbanks", {"bank_sha256": bank_sha, "bank_version": doc.s("bank_version"), "origin": "ingested",
                         "path": str(p.path), "skills": len(rows), "metadata": jdump(doc.obj_("metadata")),
                         "created_at": ctx.now})
    for r in rows:
        p.add("skillbank_skills", r)


def _pool(p: Parsed) -> None:
    doc = _Doc(p.path, "", p.doc)
    pool_sha = doc.s("pool_sha256", True)
    p.declared = pool_sha
    p.recomputed = sha256_json({k: v for k, v in p.doc.items() if k not in ("created_at", "pool_sha256")})
    p.header = {k: v for k, v in p.doc.items() if k not in ("current_skills", "candidates")}
    common = {"pool_sha256": pool_sha, "proposal_checkpoint": doc.s("proposal_checkpoint"),
              "current_skillbank_sha256": doc.s("current_skillbank_sha256"), "pool_created_at": doc.ts()}
    entries = [("current", s) for s in doc.items("current_skills")] + [("candidate", c) for c in doc.items("candidates")]
    for n, (entry, e) in enumerate(entries, 1):
        meta = e.obj_("metadata") or {}
        m = _Doc(p.path, f"{e.where} metadata", meta)
        row = {**common, "position": n, "entry": entry, "content": e.s("content", True), "metadata": jdump(meta)}
        if entry == "current":
            row.update(skill_id=e.s("skill_id", True), skill_version=e.s("version"))
        else:
            row.update(skill_id=e.s("candidate_id", True), operation=e.s("operation", True),
                       target_chunk_id=e.s("target_chunk_id") or None, title=m.s("title"),
                       failure_mechanism=m.s("failure_mechanism"),
                       evidence_card_ids=jdump(m.strs("evidence_card_ids")),
                       consolidation_cluster_id=m.s("consolidation_cluster_id"))
        p.add("candidate_pools", row)


_LEDGER_COLUMNS = ("candidate_id", "operation", "target_chunk_id", "source_card_ids", "failure_mechanism",
                   "proposal_checkpoint", "stage", "consolidation_cluster_id", "replacement_family_id", "content",
                   "validation_result", "estimated_effect", "contribution_rank", "intervention_id",
                   "evaluation_checkpoint", "validation_estimator", "bare_validation_observations_sha256",
                   "pool_sha256", "assignment_sha256", "active_chunk_id", "validation_history", "notes")


def ledger_phase(path: Path, records: list[tuple[int, dict]]) -> str:
    """``analysis`` / ``gate`` (the round's two ledgers) or ``cold_start``: the directory says, else the records."""
    if path.parent.name in PHASE_DIRS:
        return path.parent.name
    if records and all(r.get("stage") == "cold_start" for _, r in records):
        return "cold_start"
    return "gate" if any("validation_history" in r or "intervention_id" in r for _, r in records) else "analysis"


def _ledger(p: Parsed, records: list[tuple[int, dict]], phase: str) -> None:
    for line, rec in records:
        d = _Doc(p.path, f"line {line}", rec)
        cluster = rec.get("consolidation_cluster_id")
        if cluster is not None and not isinstance(cluster, str):
            d.strs("consolidation_cluster_id")
        notes = rec.get("notes")
        p.add("proposal_ledger", {
            "ledger": phase, "line": line, "candidate_id": d.s("candidate_id", True), "operation": d.s("operation"),
            "target_chunk_id": d.s("target_chunk_id"), "source_card_ids": jdump(d.strs("source_card_ids")),
            "failure_mechanism": d.s("failure_mechanism"), "proposal_checkpoint": d.s("proposal_checkpoint"),
            "stage": d.s("stage"),
            "consolidation_cluster_ids": jdump(None if cluster is None else [cluster] if isinstance(cluster, str)
                                               else cluster),
            "replacement_family_id": d.s("replacement_family_id"), "content": d.s("content"),
            "validation_result": d.s("validation_result"), "estimated_effect": d.f("estimated_effect"),
            "contribution_rank": d.i("contribution_rank"), "intervention_id": d.s("intervention_id"),
            "evaluation_checkpoint": d.s("evaluation_checkpoint"), "validation_estimator": d.s("validation_estimator"),
            "bare_validation_observations_sha256": d.s("bare_validation_observations_sha256"),
            "pool_sha256": d.s("pool_sha256"), "assignment_sha256": d.s("assignment_sha256"),
            "active_chunk_id": d.s("active_chunk_id"), "validation_history": jdump(d.lst("validation_history")),
            "notes": notes if isinstance(notes, str) or notes is None else jdump(notes),
            "extra": jdump({k: v for k, v in rec.items() if k not in _LEDGER_COLUMNS}) or None})


def _masks(p: Parsed) -> None:
    doc = _Doc(p.path, "", p.doc)
    schema = doc.s("schema_version", True)
    online = schema == "shopsimrl-online-skill-assignments-v1"
    if not online and schema != "shopsimrl-chunk-mask-assignments-v1":
        raise _fail(p.path, "field 'schema_version'", "expected 'shopsimrl-online-skill-assignments-v1' or "
                    f"'shopsimrl-chunk-mask-assignments-v1', got {schema!r}")
    p.declared = doc.s("assignment_sha256", True)
    if online:
        p.recomputed = sha256_json({k: p.doc.get(k) for k in ("mask_seed", "pool_sha256", "columns", "slots",
                                                              "assignments")})
    else:
        p.recomputed = sha256_json({k: v for k, v in p.doc.items()
                                    if k not in ("schema_version", "created_at", "assignment_sha256")})
    p.header = {k: v for k, v in p.doc.items() if k != "assignments"}
    for n, a in enumerate(doc.items("assignments"), 1):
        mask = a.lst("mask", True)
        if any(v not in (0, 1) or isinstance(v, bool) for v in mask):
            raise _fail(p.path, f"{a.where} field 'mask'", "expected a list of 0 and 1")
        p.add("mask_assignments", {
            "assignment_sha256": p.declared, "position": n, "episode_id": a.s("episode_id", True),
            "task_id": a.i("task_id"), "sample_id": a.i("sample_id"), "seed": a.i("seed"), "split": a.s("split"),
            "mask": jdump(mask), "included_chunk_ids": jdump(a.strs("included_chunk_ids")),
            "slot_states": jdump(a.obj_("slot_states")), "mask_rule": "online" if online else "gate-a",
            "mask_seed": doc.i("mask_seed"), "pool_sha256": doc.s("pool_sha256"), "draft_sha256": doc.s("draft_sha256")})


# ---- contributions.json -> gate_results + gate_observations --------------------------------------------------

RULE_TEXT = ("{rule} (ShopSimRL's gate, ingested): per logical slot the version with the largest reward coefficient "
             "wins (ties: the old version); keep the strictly positive winners, best first (ties by id), at most "
             "{budget}; pass iff at least one is kept")


def _contributions(p: Parsed, ctx: _Context, manifest: dict | None) -> None:
    doc = _Doc(p.path, "", p.doc)
    estimator = doc.obj_("estimator", True)
    est = _Doc(p.path, "estimator", estimator)
    rows = doc.items("contributions")
    _Doc(p.path, "estimates", doc.obj_("estimates", True)).obj_("reward", True)  # the primary fit must be there
    coefs = []
    for r in rows:
        name = r.s("intervention_id") or r.s("chunk_id", True)
        aux = r.obj_("auxiliary_coefficients") or {}
        coefs.append({"name": name, "beta": r.f("coefficient", True), "se": None, "t": None, "p": None,
                      "ci_low": None, "ci_high": None, "rank": r.i("rank"), "status": r.s("status", True),
                      "auxiliary": aux, "kind": r.s("kind"), "logical_chunk_id": r.s("logical_chunk_id"),
                      "operation": r.s("operation"), "order": r.i("order") or r.i("draft_order"),
                      "title": r.s("title")})
    selected = doc.strs("selected_intervention_ids") or doc.strs("selected_chunk_ids", True)
    budget = doc.i("active_skill_budget")
    n = doc.i("observations", True)
    planned = doc.i("requested_observations") or n
    bare = doc.obj_("bare_baseline") or {}
    b = _Doc(p.path, "bare_baseline", bare)
    gate_id = p.sha[:32]
    bare_run = ctx.run_by_plan.get(b.s("plan_fingerprint")) if b.s("plan_fingerprint") else None
    treat_run = ctx.run_by_assignment.get(doc.s("assignment_sha256")) if doc.s("assignment_sha256") else None
    treat_ckpt = None
    if isinstance(manifest, dict):
        model = (manifest.get("input") or {}).get("model") if isinstance(manifest.get("input"), dict) else None
        treat_ckpt = model.get("checkpoint_id") if isinstance(model, dict) else None
    winners = doc.obj_("replacement_winners") or {}
    notes = [f"ingested from ShopSimRL's {p.path.name} ({doc.s('schema_version')}), round {ctx.round_id}"]
    notes += [f"slot {slot}: the rewrite {w} won" for slot, w in winners.items() if w != slot]
    rule = est.s("selection_rule") or "strictly_positive_top_k"
    cols = [c["name"] for c in coefs]
    p.add("gate_results", {
        "gate_id": gate_id, "decided_at": doc.ts(), "rule": "strictly-positive-top-k",
        "rule_text": RULE_TEXT.format(rule=rule, budget=budget), "decision": "pass" if selected else "fail",
        "bare_run": bare_run and bare_run[0], "treatment_run": treat_run and treat_run[0],
        "bare_fingerprint": bare_run and bare_run[1], "treatment_fingerprint": treat_run and treat_run[1],
        "bare_checkpoint_id": b.s("checkpoint_id"), "treatment_checkpoint_id": treat_ckpt or (treat_run and treat_run[2]),
        "covariates": jdump(cols), "covariate_names": jdump(cols), "coefficients": json.dumps(coefs, allow_nan=False),
        "n_pairs": n, "planned": planned, "coverage": n / planned if planned else None, "budget": budget,
        "selected": jdump(selected), "allow_missing_checkpoint": False, "bare_score": jdump(bare or None),
        "arguments": jdump({"rule": "strictly-positive-top-k", "bare_run": bare_run and bare_run[0],
                            "treatment_run": treat_run and treat_run[0], "budget": budget, "columns": cols,
                            "allow_missing_checkpoint": False, "assume_aligned": False}),
        "result": jdump({**{k: v for k, v in p.doc.items() if k != "observations_table"},
                         "decision": "pass" if selected else "fail",
                         "source": {"file": str(p.path), "sha256": p.sha, "round": ctx.round_id}}),
        "notes": jdump(notes), "tool_version": ctx.tool_version})
    p.header = {k: v for k, v in p.doc.items() if k not in ("observations_table", "contributions", "estimates")}
    for i, o in enumerate(doc.items("observations_table", required=False), 1):
        mask = o.lst("mask")
        p.add("gate_observations", {
            "gate_id": gate_id, "position": i, "episode_id": o.s("episode_id", True), "split": o.s("split"),
            "task_id": o.i("task_id"), "sample_id": o.i("sample_id"), "mask": jdump(mask),
            "included_chunk_ids": jdump(o.strs("included_chunk_ids")), "reward": o.f("reward"),
            "bare_reward": o.f("bare_reward"), "delta_reward": o.f("delta_reward"),
            "reward_detail": jdump(o.obj_("reward_detail")), "bare_reward_detail": jdump(o.obj_("bare_reward_detail")),
            "delta_reward_detail": jdump(o.obj_("delta_reward_detail")),
            "assignment_sha256": doc.s("assignment_sha256"), "bare_plan_fingerprint": b.s("plan_fingerprint")})


# ---- one round -----------------------------------------------------------------------------------------------


@dataclass
class _Context:
    round_id: str
    now: datetime
    tool_version: str
    banks: set  # bank_sha256 already in the warehouse (or added by this ingest)
    run_by_plan: dict = field(default_factory=dict)  # ShopSimRL plan_fingerprint -> (run_id, fingerprint, ckpt)
    run_by_assignment: dict = field(default_factory=dict)  # assignment_sha256 -> (run_id, fingerprint, ckpt)


def kind_of(path: Path) -> str:
    if path.name == "proposal_ledger.jsonl":
        return f"proposal_ledger.jsonl#{ledger_phase(path, _load_jsonl(path))}"
    return path.name


_TABLE_READERS: dict[str, Callable] = {
    "evidence_cards.jsonl": _cards, "failure_cards.jsonl": _cards, "cluster_batches.jsonl": _clusters,
    "initial_skill_draft.json": _draft, "candidate_pool.json": _pool, "mask_assignments.json": _masks,
}


def parse_file(path: Path, ctx: _Context, manifest: dict | None) -> Parsed:
    p = Parsed(path, kind_of(path), sha256_files([path]))
    name = path.name
    if name.endswith(".md"):
        return p
    if name.endswith(".json"):
        p.doc = _load_json(path)
        d = _Doc(path, "", p.doc)
        p.artifact_schema, p.created_at = d.s("schema_version"), d.ts()
    if name == "proposal_ledger.jsonl":
        _ledger(p, _load_jsonl(path), p.kind.split("#", 1)[1])
    elif name in ("initial_skillbank.json", "selected_skillbank.json"):
        _bank(p, ctx)
    elif name == "contributions.json":
        _contributions(p, ctx, manifest)
    elif name in _TABLE_READERS:
        _TABLE_READERS[name](p)
    elif name in HEADER_ONLY:
        p.header = p.doc
    return p


def round_of(unit: LoopUnit, source: str | None) -> str:
    """The round a unit belongs to: its directory's name (``round-NNN``, ``cold-start``), ``--source``, or what its
    files say (a pool's or a selected bank's ``round_id``; a cold start's draft, cards or Gate A)."""
    if unit.round_id:
        return unit.round_id
    if source:
        return check_name(source, "round name (--source)")
    names = {f.name: f for f in unit.files}
    for name, get in (("candidate_pool.json", lambda d: d.get("round_id")),
                      ("selected_skillbank.json", lambda d: (d.get("metadata") or {}).get("round_id"))):
        if name in names:
            try:
                rid = get(json.loads(names[name].read_bytes()))
            except (ValueError, AttributeError):
                rid = None
            if isinstance(rid, str) and ROUND_NAME.match(rid):
                return rid
    if names.keys() & {"trace2skill_manifest.json", "initial_skill_draft.json", "evidence_cards.jsonl",
                       "cluster_batches.jsonl", "initial_skillbank.json"}:
        return "cold-start"
    raise LoopArtifactError(f"{unit.root}: cannot tell which round these artifacts belong to (the directory is not "
                            "named round-NNN or cold-start and no candidate_pool.json / selected_skillbank.json names "
                            "one); rename the directory or pass --source round-NNN")


def parse_unit(unit: LoopUnit, ctx: _Context) -> list[Parsed]:
    """Every file of a round, read (a broken one raises and nothing of the round is kept)."""
    manifest_path = next((f for f in unit.files if f.name == "online_gate_manifest.json"), None)
    manifest = _load_json(manifest_path) if manifest_path else None
    parsed = [parse_file(f, ctx, manifest) for f in sorted(unit.files)]
    kinds: dict[str, Path] = {}
    for p in parsed:
        if p.kind in kinds:
            raise LoopArtifactError(f"round {ctx.round_id}: two files of kind {p.kind}: {kinds[p.kind]} and {p.path}; "
                                    "a round holds one of each: ingest them as separate rounds (--source)")
        kinds[p.kind] = p.path
    return parsed


def artifact_rows(parsed: list[Parsed]) -> dict[str, list[dict]]:
    """Every table's rows of a round's files, with their lineage, plus one ``loop_artifacts`` row per file."""
    tables: dict[str, list[dict]] = {}
    for p in parsed:
        lineage = {"source_file": str(p.path), "file_sha256": p.sha}
        count = 0
        for table, rows in p.rows.items():
            extra = lineage if table not in ("gate_results", "skillbanks", "skillbank_skills") else {}
            tables.setdefault(table, []).extend({**r, **extra} for r in rows)
            count += len(rows)
        tables.setdefault("loop_artifacts", []).append({
            "kind": p.kind, "artifact_schema": p.artifact_schema, "artifact_created_at": p.created_at,
            "bytes": p.path.stat().st_size, "rows": count, "tables": jdump(sorted(p.rows)),
            "declared_sha256": p.declared if p.path.name != "selected_skillbank.json" and
            p.path.name != "initial_skillbank.json" else None,
            "recomputed_sha256": p.recomputed, "header": jdump(p.header), **lineage})
    return tables


def to_batches(round_id: str, tables: dict[str, list[dict]], load_id: str) -> list:
    return [(t, round_id, to_arrow(t, [{**r, "load_id": load_id} for r in rows])) for t, rows in tables.items() if rows]


# ---- the rounds of one ingest, into the warehouse ------------------------------------------------------------


@dataclass
class RoundResult:
    path: str
    round_id: str | None
    status: str  # landed | already_present | failed
    rows: int = 0
    files: int = 0
    message: str = ""


def _known_state(wh, snap) -> tuple[dict, set, dict, dict]:
    """(round -> {kind: sha}, bank shas, plan_fingerprint -> run, assignment_sha256 -> run) of the warehouse."""
    held: dict[str, dict[str, str]] = {}
    t = wh.read("loop_artifacts", ["kind", "file_sha256"], snap=snap)
    for run, kind, sha in zip(t.column("run_id").to_pylist(), t.column("kind").to_pylist(),
                              t.column("file_sha256").to_pylist(), strict=True):
        held.setdefault(run, {})[kind] = sha
    banks = set(wh.read("skillbanks", ["bank_sha256"], snap=snap).column("bank_sha256").to_pylist())
    by_plan: dict = {}
    by_assignment: dict = {}
    runs = wh.read("runs", ["fingerprint", "fingerprint_fields", "provenance", "checkpoint_id"], snap=snap)
    for row in runs.to_pylist():
        ident = (row["run_id"], row["fingerprint"], row["checkpoint_id"])
        for col, key, out in (("fingerprint_fields", ("plan_fingerprint",), by_plan),
                              ("provenance", ("mask_assignments", "assignment_sha256"), by_assignment)):
            try:
                v = json.loads(row[col]) if row[col] else None
                for k in key:
                    v = v.get(k) if isinstance(v, dict) else None
            except ValueError:
                v = None
            if isinstance(v, str):
                out[v] = ident
    return held, banks, by_plan, by_assignment


def ingest_rounds(w, units: list[LoopUnit], load_id: str, source: str | None, tool_version: str) -> list[RoundResult]:
    """Land every round unit with writer ``w``: one atomic commit per round; see the module docstring."""
    held, banks, by_plan, by_assignment = _known_state(w.wh, w.snap)
    now = datetime.now(UTC)
    out = []
    for unit in units:
        res = RoundResult(str(unit.root), None, "failed")
        out.append(res)
        try:
            res.round_id = round_id = round_of(unit, source)
            have = held.setdefault(round_id, {})
            new, present = [], 0
            for f in sorted(unit.files):
                kind, sha = kind_of(f), sha256_files([f])
                if have.get(kind) == sha:
                    present += 1
                elif kind in have:
                    raise LoopArtifactError(
                        f"{f}: round {round_id} already holds a {kind} with other bytes (sha256 {have[kind][:12]}..., "
                        f"this file {sha[:12]}...): a round's artifacts are immutable once ingested; to replace them "
                        f"run `shopsim-wh runs rm {round_id}` and ingest the round again")
                else:
                    new.append(f)
            if not new:
                res.status, res.files = "already_present", present
                res.message = (f"round {round_id}: every one of its {present} artifact file(s) is in the warehouse "
                               "already; nothing added")
                continue
            ctx = _Context(round_id, now, tool_version, set(banks), dict(by_plan), dict(by_assignment))
            parsed = parse_unit(LoopUnit(unit.root, new, round_id), ctx)
            tables = artifact_rows(parsed)
            w.commit(to_batches(round_id, tables, load_id))
            banks |= ctx.banks
            have.update({p.kind: p.sha for p in parsed})
            res.status, res.files = "landed", len(parsed)
            res.rows = sum(len(r) for t, r in tables.items() if t != "loop_artifacts")
            counts = ", ".join(f"{len(r)} {t}" for t, r in sorted(tables.items()) if t != "loop_artifacts")
            res.message = (f"round {round_id}: {len(parsed)} artifact file(s) landed ({counts or 'files only'})"
                           + (f"; {present} file(s) already in the warehouse" if present else ""))
        except (IngestError, OSError) as e:
            res.status, res.message = "failed", str(e)
    return out
