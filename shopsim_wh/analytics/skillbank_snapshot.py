"""Immutable SkillBank snapshots of reviewed candidates, and the gate's selected bank with its proposal ledger.

``snapshot`` writes the accepted candidates of a round that have no gold-firewall finding (view
``skill_candidate_state``) as a ``shopsimrl-skillbank-v1`` file usable as ``skills.path``: each skill carries its
evidence refs, its review and its firewall result in ``metadata``; the bank's sha256 is ShopSimRL's fingerprint of
the whole parsed file. An accepted candidate with a finding is left out and named in the summary. A file is never
overwritten (it is linked into place only if the name is free, then made read-only). ``select`` reads a
``strictly-positive-top-k`` gate decision over a masked run of such a snapshot and writes
``selected_skillbank.json`` (the kept skills, with their coefficients and ranks) and ``proposal_ledger.jsonl``
(every candidate of the round and its fate) in ShopSimRL's formats. Both land in ``skillbanks`` /
``skillbank_skills`` (partition run_id = the round).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from .. import __version__
from ..rollout.jobs import sha256_json
from .skill_candidates import SkillLoopError, _commit, _rows

SKILLBANK_SCHEMA = "shopsimrl-skillbank-v1"
FIREWALL_CHECKS = ("mentions_asin", "contains_long_identifier", "contains_task_id", "copies_instance_product_title",
                   "copies_instance_brand", "copies_gold_option", "contains_heldout_task_id")


def bank_sha256(doc: dict) -> str:
    """ShopSimRL's ``bank_sha256``: the fingerprint (canonical JSON) of the whole parsed bank file."""
    return sha256_json(doc)


def write_once(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` only if nothing is there (atomically: a temporary file linked into place), then
    make it read-only. An existing file is an error, never replaced."""
    path = Path(path)
    if path.exists() or path.is_symlink():
        raise SkillLoopError(f"{path} exists; snapshots are immutable and never overwritten: choose a new --out")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise SkillLoopError(f"{path} appeared while writing; snapshots are never overwritten: choose a new --out"
                                 ) from None
        os.chmod(path, 0o444)
    finally:
        os.unlink(tmp)


def _dump(doc: dict) -> str:
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"


def _round(con, round_: str | None) -> str:
    rounds = [r[0] for r in con.execute("SELECT DISTINCT run_id FROM skill_candidates ORDER BY 1").fetchall()]
    if round_ is None:
        if len(rounds) != 1:
            raise SkillLoopError(f"pass --round: this warehouse has candidates of {len(rounds)} round(s)"
                                 f"{' (' + ', '.join(rounds) + ')' if rounds else ''}"
                                 f"{'; mine some first: shopsim-wh skills mine' if not rounds else ''}")
        return rounds[0]
    if round_ not in rounds:
        raise SkillLoopError(f"no skill candidates in round {round_!r}; rounds: {', '.join(rounds) or '(none)'}")
    return round_


def _bank_rows(round_: str, doc: dict, path: Path, load_id: str, now: datetime) -> list[tuple[str, list[dict]]]:
    sha = bank_sha256(doc)
    bank = {"bank_sha256": sha, "bank_version": doc["bank_version"], "origin": "snapshot", "path": str(path),
            "skills": len(doc["skills"]), "metadata": json.dumps(doc["metadata"], ensure_ascii=False),
            "created_at": now, "load_id": load_id}
    skills = [{"bank_sha256": sha, "position": i, "skill_id": s["skill_id"], "skill_version": s["version"],
               "enabled": s["enabled"], "content": s["content"], "content_sha256": sha256_json(s["content"]),
               "candidate_id": s["metadata"].get("candidate_id"),
               "estimated_effect": s["metadata"].get("estimated_effect"),
               "contribution_rank": s["metadata"].get("contribution_rank"),
               "metadata": json.dumps(s["metadata"], ensure_ascii=False), "load_id": load_id}
              for i, s in enumerate(doc["skills"], 1)]
    return [("skillbanks", [bank]), ("skillbank_skills", skills)]


@dataclass
class SnapshotResult:
    path: str
    bank_sha256: str
    round: str
    skill_ids: list[str]
    left_out: list[dict] = field(default_factory=list)  # {candidate_id, state, reason}

    def to_dict(self) -> dict:
        return {"path": self.path, "bank_sha256": self.bank_sha256, "round": self.round, "skills": self.skill_ids,
                "left_out": self.left_out}

    def to_table(self) -> str:
        lines = [f"wrote {self.path} (shopsimrl-skillbank-v1, {len(self.skill_ids)} skill(s), round {self.round})",
                 f"bank_sha256 {self.bank_sha256}"]
        lines += [f"  skill {s}" for s in self.skill_ids]
        lines += [f"  left out {x['candidate_id']}: {x['reason']}" for x in self.left_out]
        return "\n".join(lines)


def snapshot(root, out: str | os.PathLike, round_: str | None = None) -> SnapshotResult:
    """Write the accepted, firewall-clean candidates of a round as an immutable SkillBank file (see the module)."""
    from ..engines.db import connect

    out = Path(out)
    if out.exists():
        raise SkillLoopError(f"{out} exists; snapshots are immutable and never overwritten: choose a new --out")
    con = connect(root)
    round_ = _round(con, round_)
    rows = _rows(con, "SELECT * FROM skill_candidate_state WHERE run_id = ? ORDER BY candidate_id", [round_])
    firewall = {(r["candidate_id"], r["finding"]): r["example"] for r in _rows(
        con, "SELECT candidate_id, finding, example FROM skill_firewall WHERE run_id = ?", [round_])}
    con.close()
    now = datetime.now(UTC)
    skills, left_out = [], []
    for r in rows:
        findings = list(r["findings"])
        if r["review_decision"] == "accept" and findings:
            left_out.append({"candidate_id": r["candidate_id"], "state": "blocked",
                             "reason": "accepted, but the gold firewall found "
                                       + ", ".join(f"{f} ({firewall.get((r['candidate_id'], f))!r})" for f in findings)
                                       + ": never in a snapshot"})
            continue
        if r["state"] != "accepted":
            if r["state"] == "pending":
                left_out.append({"candidate_id": r["candidate_id"], "state": "pending", "reason": "not reviewed"})
            continue
        meta = {"candidate_id": r["candidate_id"], "title": r["title"], "failure_mechanism": r["mechanism"],
                "operation": r["operation"], "target_chunk_id": r["target_chunk_id"], "round_id": round_,
                "builder": r["builder"],
                "evidence": {"positive_refs": json.loads(r["positive_refs"] or "[]"),
                             "negative_refs": json.loads(r["negative_refs"] or "[]")},
                "review": {"review_id": r["review_id"], "decision": r["review_decision"], "reason": r["review_reason"],
                           "reviewer": r["reviewer"], "reviewed_at": r["reviewed_at"].isoformat()},
                "firewall": {"checks": list(FIREWALL_CHECKS), "findings": []}}
        skill = {"skill_id": r["candidate_id"], "id": r["candidate_id"], "version": "candidate", "enabled": True,
                 "content": r["content"], "metadata": meta, "content_sha256": sha256_json(r["content"])}
        if r["operation"] == "REWRITE":
            skill["rewrites"] = r["target_chunk_id"]  # shopsim-wh's online mask: the rewrite shares its target's slot
        skills.append(skill)
    if not skills:
        raise SkillLoopError(f"round {round_} has no accepted candidate without a firewall finding; review some first "
                             f"(shopsim-wh skills list --round {round_}; shopsim-wh skills review ID --accept --reason ...)")
    ids = [s["skill_id"] for s in skills]
    version = f"{round_}-snapshot-{sha256_json(ids)[:12]}"
    doc = {"schema_version": SKILLBANK_SCHEMA, "bank_version": version, "version": version,
           "metadata": {"round_id": round_, "origin": "shopsim-wh skills snapshot", "created_at": now.isoformat(),
                        "candidate_ids": ids, "left_out": left_out, "tool_version": __version__},
           "skills": skills}
    write_once(out, _dump(doc))
    load_id = uuid.uuid4().hex
    _commit(root, round_, _bank_rows(round_, doc, out.resolve(), load_id, now), "skills snapshot", load_id, now)
    return SnapshotResult(str(out), bank_sha256(doc), round_, ids, left_out)


# ------------------------------------------------------------------------------------------ select

@dataclass
class SelectResult:
    out_dir: str
    bank_sha256: str
    ledger_sha256: str
    gate_id: str
    round: str
    selected: list[str]
    fates: dict[str, str]

    def to_dict(self) -> dict:
        return {"out_dir": self.out_dir, "selected_skillbank_sha256": self.bank_sha256,
                "proposal_ledger_sha256": self.ledger_sha256, "gate_id": self.gate_id, "round": self.round,
                "selected_intervention_ids": self.selected, "fates": self.fates}

    def to_table(self) -> str:
        lines = [f"gate {self.gate_id}: {len(self.selected)} skill(s) selected -> "
                 f"{self.out_dir}/selected_skillbank.json", f"selected_skillbank_sha256 {self.bank_sha256}",
                 f"proposal ledger {self.out_dir}/proposal_ledger.jsonl ({len(self.fates)} candidate(s) of "
                 f"{self.round}; sha256 {self.ledger_sha256})"]
        lines += [f"  {cid}  {fate}" for cid, fate in self.fates.items()]
        return "\n".join(lines)


def _gate_row(con, treatment: str, gate_id: str | None) -> dict:
    rows = _rows(con, """
        SELECT * FROM gate_results WHERE rule = 'strictly-positive-top-k' AND (? IS NULL OR gate_id = ?)
          AND (? IS NULL OR treatment_run = ? OR treatment_run IN (SELECT run_id FROM runs WHERE experiment = ?))
        ORDER BY decided_at DESC LIMIT 1""", [gate_id, gate_id, treatment, treatment, treatment])
    if not rows:
        raise SkillLoopError(f"no strictly-positive-top-k gate decision for {gate_id or treatment!r}; run "
                             "shopsim-wh gate --bare BARE --treatment TREATMENT --rule strictly-positive-top-k first")
    return rows[0]


def _treatment_bank(con, run_id: str) -> tuple[dict, Path]:
    cfg = con.execute("SELECT config, skill_bank_hash FROM runs WHERE run_id = ?", [run_id]).fetchone()
    path = (json.loads(cfg[0] or "{}").get("skills") or {}).get("path") if cfg else None
    if not path:
        raise SkillLoopError(f"run {run_id} names no skill bank (skills.path) in its config")
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise SkillLoopError(f"the skill bank of run {run_id} ({path}) cannot be read: {exc}") from None
    if hashlib.sha256(raw).hexdigest()[:16] != cfg[1]:
        raise SkillLoopError(f"{path} is not the bank run {run_id} played (its hash differs from runs.skill_bank_hash)")
    return json.loads(raw), Path(path)


def _ledger_line(r: dict, checkpoint: str | None, fate: tuple[str, float | None, int | None, str | None],
                 event: dict | None) -> dict:
    result, effect, rank, notes = fate
    line = {"candidate_id": r["candidate_id"], "operation": r["operation"], "target_chunk_id": r["target_chunk_id"],
            "source_card_ids": [], "failure_mechanism": r["mechanism"], "proposal_checkpoint": checkpoint,
            "stage": "online", "consolidation_cluster_id": "cluster-" + r["candidate_id"].removeprefix("online-"),
            "replacement_family_id": r["target_chunk_id"] if r["operation"] == "REWRITE" else None,
            "content": r["content"], "validation_result": result, "estimated_effect": effect,
            "contribution_rank": rank, "notes": notes,
            "evidence_refs": {"positive": json.loads(r["positive_refs"] or "[]"),
                              "negative": json.loads(r["negative_refs"] or "[]")},
            "review": None if r["review_id"] is None else {
                "decision": r["review_decision"], "reason": r["review_reason"], "reviewer": r["reviewer"],
                "reviewed_at": r["reviewed_at"].isoformat()},
            "firewall_findings": list(r["findings"])}
    if event:
        line.update(event)
        line["validation_history"] = [event]
    return line


def select(root, out_dir: str | os.PathLike, treatment: str | None = None, gate_id: str | None = None) -> SelectResult:
    """Write the gate's selected SkillBank and the round's proposal ledger into ``out_dir`` (see the module)."""
    from ..engines.db import connect

    if not treatment and not gate_id:
        raise SkillLoopError("name the decision: --treatment RUN (its latest strictly-positive-top-k gate) or --gate ID")
    out_dir = Path(out_dir)
    for name in ("selected_skillbank.json", "proposal_ledger.jsonl"):
        if (out_dir / name).exists():
            raise SkillLoopError(f"{out_dir / name} exists; selections are never overwritten: choose a new --out")
    con = connect(root)
    g = _gate_row(con, treatment, gate_id)
    source, source_path = _treatment_bank(con, g["treatment_run"])
    source_sha = bank_sha256(source)
    round_ = (source.get("metadata") or {}).get("round_id")
    known = con.execute("SELECT run_id FROM skillbanks WHERE bank_sha256 = ?", [source_sha]).fetchone()
    if known is None or not round_:
        raise SkillLoopError(f"the bank run {g['treatment_run']} played ({source_path}) is not a snapshot of this "
                             "warehouse (shopsim-wh skills snapshot writes one)")
    rows = _rows(con, "SELECT * FROM skill_candidate_state WHERE run_id = ? ORDER BY candidate_id", [round_])
    checkpoint = g["treatment_checkpoint_id"]
    con.close()
    coefs = {c["name"]: c for c in json.loads(g["coefficients"])}
    result_doc = json.loads(g["result"])
    selected = set(json.loads(g["selected"]))
    in_bank = {s["skill_id"]: s for s in source["skills"]}
    now = datetime.now(UTC)
    skills, fates, lines = [], {}, []
    for s in source["skills"]:  # the bank's (injection) order
        c = coefs.get(s["skill_id"])
        if s["skill_id"] in selected and c is not None:
            skills.append({**{k: v for k, v in s.items() if k != "content_sha256"},
                           "metadata": {**s["metadata"], "validation_result": "selected",
                                        "estimated_effect": c["beta"], "contribution_rank": c["rank"],
                                        "selected_intervention_id": s["skill_id"]}})
    for r in rows:
        cid = r["candidate_id"]
        c, event = coefs.get(cid), None
        if cid in in_bank and c is not None:
            fate = (c["status"], c["beta"], c["rank"], None)
            event = {"proposal_checkpoint": checkpoint, "evaluation_checkpoint": checkpoint,
                     "validation_estimator": result_doc.get("estimator", {}).get("name"), "intervention_id": cid,
                     "validation_result": c["status"], "estimated_effect": c["beta"], "contribution_rank": c["rank"],
                     "gate_id": g["gate_id"], "bare_run": g["bare_run"], "treatment_run": g["treatment_run"],
                     "skillbank_sha256": source_sha}
        elif cid in in_bank:
            fate = ("not_gated", None, None, "in the bank, but no paired treatment episode injected it")
        elif r["state"] == "blocked":
            fate = ("gold_firewall_violation", None, None, "firewall: " + ", ".join(r["findings"]))
        elif r["state"] == "rejected":
            fate = ("rejected", None, None, f"review: {r['review_reason']}")
        elif r["state"] == "accepted":
            fate = ("not_in_bank", None, None, "accepted after the gated snapshot was written")
        else:
            fate = ("not_reviewed", None, None, None)
        fates[cid] = fate[0]
        lines.append(_ledger_line(r, checkpoint, fate, event))
    ids = [s["skill_id"] for s in skills]
    doc = {"schema_version": SKILLBANK_SCHEMA, "bank_version": f"{round_}-selected-v1",
           "version": f"{round_}-selected-{sha256_json(ids)[:12]}",
           "metadata": {"round_id": round_, "origin": "shopsim-wh skills select", "gate_id": g["gate_id"],
                        "source_skillbank_sha256": source_sha, "active_skill_budget": g["budget"],
                        "selected_count": len(ids), "selected_intervention_ids": ids,
                        "estimator": result_doc.get("estimator"), "bare_run": g["bare_run"],
                        "treatment_run": g["treatment_run"], "bare_baseline": json.loads(g["bare_score"] or "{}"),
                        "created_at": now.isoformat()},
           "skills": skills}
    ledger = "".join(json.dumps(x, ensure_ascii=False, separators=(",", ":")) + "\n" for x in lines)
    if skills:
        write_once(out_dir / "selected_skillbank.json", _dump(doc))
    write_once(out_dir / "proposal_ledger.jsonl", ledger)
    load_id = uuid.uuid4().hex
    if skills:
        _commit(root, round_, _bank_rows(round_, doc, (out_dir / "selected_skillbank.json").resolve(), load_id, now),
                "skills select", load_id, now)
    return SelectResult(str(out_dir), bank_sha256(doc) if skills else "", hashlib.sha256(ledger.encode()).hexdigest(),
                        g["gate_id"], round_, ids, fates)
