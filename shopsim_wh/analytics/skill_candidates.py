"""Skill candidates of a loop round (docs/skills.md): mined from the error taxonomy, added by hand, reviewed.

``mine`` groups the labelled episodes of the given runs by failure mechanism (clusters of ``error_labels`` codes,
:data:`MECHANISMS`) and renders one candidate per mechanism from a rule template (``builder = "rules"``) or asks
a model to write it from the cluster's privacy-safe evidence (``builder = "llm"``, :mod:`shopsim_wh.rollout.skill_writer`),
with evidence refs into ``steps``:
``negative_refs`` (failure channel: the labelled step of episodes with the mechanism) and ``positive_refs``
(success channel: the last step of strict successes that did what the skill prescribes). Rows land in
``skill_candidates`` (partition run_id = the round) together with the val/test task ids of the runs' split
manifests (``skill_heldout_tasks``), which the gold firewall (view ``skill_firewall``) checks against.

A candidate's id is ShopSimRL's: ``online-`` + the first 16 hex of the fingerprint of {operation,
target_chunk_id, content}; mining the same text again in a round adds nothing. ``review`` appends a
``skill_reviews`` row (the latest review is the candidate's state).
"""

from __future__ import annotations

import getpass
import json
import os
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from .. import __version__
from ..core.errors import ShopsimError
from ..core.names import check_name
from ..rollout.jobs import sha256_json

OPERATIONS = ("ADD", "REWRITE")
BUILDERS = ("rules", "llm")
DEFAULT_ROUND = "round-000"
MAX_REFS = 25


class SkillLoopError(ShopsimError):
    """A skill-loop command cannot do what was asked (the message says what to do instead)."""


@dataclass(frozen=True)
class Template:
    """A rule template: the chunk fields ShopSimRL's compiler fills (title, applicable_when, procedure, ...)."""

    title: str
    applicable_when: str
    procedure: tuple[str, ...]
    verification: str
    common_failure: str


# failure mechanism -> (the taxonomy codes it clusters, the success condition of its positive evidence, template).
# The embedded scripted policy recognises "select every option" and "check the price" / "stay under the budget"
# (shopsim_wh/sim/policy.py): the options and budget templates say so, so they really help it; the others are
# sound advice it ignores (their gate coefficients are noise).
MECHANISMS: dict[str, tuple[tuple[str, ...], str, Template]] = {
    "option_miss": (("option_miss",), "e.r_option = 1", Template(
        "Select every option before buying",
        "the product page lists option axes (size, colour, pack, ...) and the request names the values it wants",
        ("On the product page, read every option axis and the value the request asks for.",
         "Select every option the request names, one click per axis, before you click Buy Now.",
         "For an axis the request does not name, keep the value the page preselects."),
        "the page reports every option axis as selected before you buy",
        "buying as soon as the right product is open, with options unselected or left at the first value")),
    "over_budget": (("over_budget",), "e.r_price = 1", Template(
        "Stay under the budget",
        "the request states a price limit (under a sum, at most a sum)",
        ("On the results page, check the price of every candidate against the limit before you open it.",
         "Skip items above the limit even when their title matches better.",
         "On the product page, check the price shown for the selected options again: stay under the budget."),
        "the price on the product page is below the stated limit when you click Buy Now",
        "opening and buying the best-matching item without looking at its price")),
    "wrong_product": (("wrong_product", "type_miss", "attribute_miss"), "e.right_product", Template(
        "Open the item that matches the request",
        "the results page lists several similar products",
        ("Compare each result's title words and key attributes with the product type and attributes requested.",
         "Open the result that matches the most requested attributes, not the first one listed.",
         "On the product page, confirm the type and attributes; go back to the results if they disagree."),
        "the opened product's type and key attributes are the requested ones",
        "clicking the first result because one word of its title matches")),
    "navigation": (("no_purchase", "action_limit", "repeated_action_loop", "search_churn", "invalid_action"),
                   "e.purchase_asin IS NOT NULL", Template(
        "Keep moving toward a purchase",
        "searches or clicks repeat without opening a product, or the turn budget runs low",
        ("Search once with the product type and its two most specific attributes.",
         "Open the best result instead of searching again with small variations.",
         "Click only values the page offers; never repeat an action that did not change the page."),
        "every action changes the page, and a purchase happens well before the turn limit",
        "re-searching with near-identical queries or clicking values the page does not offer")),
    "protocol": (("protocol_no_tool_call", "protocol_multiple_tool_calls", "protocol_invalid_arguments",
                  "protocol_unknown_tool", "protocol_tool_call_count", "protocol_mixed_content",
                  "protocol_malformed_tool_call", "protocol_malformed_response", "protocol_empty_response",
                  "protocol_other", "generation_length"),
                 "e.r_success = 1", Template(
        "Answer with exactly one tool call",
        "every turn",
        ("Call exactly one of the offered tools per turn, with its one argument as JSON.",
         "Write no visible text beside the call and keep the reasoning short."),
        "the turn is one well-formed call of a tool the page offers",
        "text answers, two calls in one turn, or arguments that are not JSON")),
}
RULES_VERSION = sha256_json({k: [list(v[0]), v[1], v[2].__dict__] for k, v in MECHANISMS.items()})[:12]


def render(t: Template) -> str:
    """ShopSimRL's chunk markdown: heading, Applies when, numbered Procedure, Verify, Avoid."""
    steps = "\n".join(f"  {i}. {s}" for i, s in enumerate(t.procedure, 1))
    return (f"### {t.title}\n\n- Applies when: {t.applicable_when}\n- Procedure:\n{steps}\n"
            f"- Verify: {t.verification}\n- Avoid: {t.common_failure}")


def candidate_id(operation: str, target_chunk_id: str | None, content: str) -> str:
    """ShopSimRL's rule: ``online-`` + the first 16 hex of the fingerprint of {operation, target, content}."""
    return "online-" + sha256_json({"operation": operation, "target_chunk_id": target_chunk_id,
                                    "content": content})[:16]


@dataclass(frozen=True)
class MineOptions:
    """What ``mine`` reads and how: ``runs`` (default: every skill-free run of the warehouse), the ``round`` the
    candidates belong to, the builder (``rules``: the rule templates; ``llm``: the model of the ``model`` config
    writes each), and at most ``max_refs`` evidence refs per channel."""

    runs: tuple[str, ...] = ()
    round: str = DEFAULT_ROUND
    builder: str = "rules"
    max_refs: int = MAX_REFS
    model: str | None = None  # builder llm: a model config (YAML with a `model:` section)


@dataclass
class MineResult:
    round: str
    runs: list[str]
    candidates: list[dict] = field(default_factory=list)  # written this time
    existing: list[dict] = field(default_factory=list)  # the same text was already a candidate of the round
    skipped: list[str] = field(default_factory=list)  # mechanisms with no failing episode
    heldout_tasks: int = 0
    notes: list[str] = field(default_factory=list)
    load_id: str = ""
    builder: str = "rules"
    builder_fingerprint: str | None = None  # llm: the model's fingerprint
    sent: int = 0  # llm: requests sent
    failed: list[dict] = field(default_factory=list)  # llm: {mechanism, reason, raw} of clusters with no candidate
    unreachable: bool = False  # llm: the model server never answered

    def to_dict(self) -> dict:
        keep = ("candidate_id", "mechanism", "title", "operation", "builder")
        return {"round": self.round, "runs": self.runs, "load_id": self.load_id,
                "candidates": [{**{k: c[k] for k in keep}, "negative_refs": len(json.loads(c["negative_refs"])),
                                "positive_refs": len(json.loads(c["positive_refs"]))} for c in self.candidates],
                "already_mined": [c["candidate_id"] for c in self.existing], "no_evidence": self.skipped,
                "heldout_tasks": self.heldout_tasks, "notes": self.notes, "builder": self.builder,
                "builder_fingerprint": self.builder_fingerprint, "sent": self.sent, "failed": self.failed}

    def to_table(self) -> str:
        lines = [f"round {self.round}: {len(self.candidates)} new candidate(s) from {len(self.runs)} run(s) "
                 f"({', '.join(self.runs)})"]
        if self.builder == "llm":
            lines.append(f"builder llm {(self.builder_fingerprint or '')[:12]}: {self.sent} request(s) sent, "
                         f"{len(self.failed)} without a candidate")
        for c in self.candidates:
            lines.append(f"  {c['candidate_id']}  {c['mechanism']:<14} {c['title']}  "
                         f"(evidence: {len(json.loads(c['negative_refs']))} failing, "
                         f"{len(json.loads(c['positive_refs']))} succeeding)")
        for c in self.existing:
            lines.append(f"  {c['candidate_id']}  {c['mechanism']:<14} already a candidate of {self.round}")
        for f in self.failed:
            lines.append(f"  no candidate   {f['mechanism']:<14} {f['reason']}")
        if self.skipped:
            lines.append(f"no failing episode for: {', '.join(self.skipped)}")
        lines.append(f"held-out task ids recorded for the firewall: {self.heldout_tasks}")
        lines += [f"note: {n}" for n in self.notes]
        lines.append(f"next: shopsim-wh skills list --round {self.round}")
        return "\n".join(lines)


def _rows(con, sql: str, params: list) -> list[dict]:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def resolve_runs(con, runs: tuple[str, ...]) -> list[str]:
    """The runs to mine: the given ids (or experiment names of one run each), else every skill-free run."""
    if not runs:
        found = [r[0] for r in con.execute(
            "SELECT run_id FROM runs WHERE skill_bank_hash IS NULL ORDER BY run_id").fetchall()]
        if not found:
            raise SkillLoopError("no skill-free run in this warehouse to mine; run one first (shopsim-wh run CONFIG with "
                                 "skills.path: null) or pass --runs")
        return found
    out = []
    for r in runs:
        hit = con.execute("SELECT run_id FROM runs WHERE run_id = ? UNION SELECT run_id FROM runs WHERE experiment = ?",
                          [r, r]).fetchall()
        if len(hit) != 1:
            known = [x[0] for x in con.execute("SELECT run_id FROM runs ORDER BY run_id LIMIT 10").fetchall()]
            raise SkillLoopError(f"no single run {r!r} in this warehouse ({len(hit)} match); known runs: "
                                 f"{', '.join(known) or '(none)'}")
        out.append(hit[0][0])
    return out


def evidence(con, runs: list[str], mechanism: str, max_refs: int) -> tuple[list[dict], list[dict]]:
    """(positive refs, negative refs) of one mechanism over ``runs``, each at most ``max_refs``, in key order."""
    codes, success_sql, _ = MECHANISMS[mechanism]
    run_list = ", ".join("?" for _ in runs)
    code_list = ", ".join("?" for _ in codes)
    negative = _rows(con, f"""
        SELECT run_id, episode_id, min(step_idx) AS step_idx FROM error_labels
        WHERE run_id IN ({run_list}) AND code IN ({code_list}) AND step_idx IS NOT NULL
        GROUP BY run_id, episode_id ORDER BY run_id, episode_id LIMIT ?""", [*runs, *codes, max_refs])
    positive = _rows(con, f"""
        SELECT e.run_id, e.episode_id, max(s.step_idx) AS step_idx
        FROM episodes AS e JOIN steps AS s ON s.run_id = e.run_id AND s.episode_id = e.episode_id
                                           AND s.agent_id = 'main'
        WHERE e.run_id IN ({run_list}) AND e.status = 'completed' AND e.r_success = 1 AND {success_sql}
        GROUP BY e.run_id, e.episode_id ORDER BY e.run_id, e.episode_id LIMIT ?""", [*runs, max_refs])
    return positive, negative


def heldout_rows(con, runs: list[str], round_: str) -> tuple[list[dict], list[str]]:
    """The val/test task ids of the runs' split manifests (each manifest once), and notes on runs without one."""
    from ..core.splits import load_split_manifest

    known = {r[0] for r in con.execute("SELECT DISTINCT split_manifest_hash FROM skill_heldout_tasks WHERE run_id = ?",
                                       [round_]).fetchall()}
    rows, notes = [], []
    for r in _rows(con, f"SELECT run_id, config, split_manifest_hash FROM runs WHERE run_id IN "
                        f"({', '.join('?' for _ in runs)}) ORDER BY run_id", runs):
        path = (json.loads(r["config"] or "{}").get("tasks") or {}).get("split_manifest")
        try:
            m = load_split_manifest(path)
        except ShopsimError as exc:
            notes.append(f"run {r['run_id']}: split manifest {path or '(embedded)'} unreadable ({exc}); its held-out "
                         "task ids are not checked")
            continue
        if r["split_manifest_hash"] and r["split_manifest_hash"] != m.content_hash:
            notes.append(f"run {r['run_id']}: its split manifest (hash {r['split_manifest_hash'][:12]}) is not at hand; "
                         "its held-out task ids are not checked")
            continue
        if m.content_hash in known:
            continue
        known.add(m.content_hash)
        rows += [{"split_manifest_hash": m.content_hash, "split_manifest_path": path or "embedded", "split": s,
                  "task_id": int(t)} for s in ("val", "test") if s in m.splits for t in m.splits[s]]
    return rows, notes


def _existing_ids(con, round_: str) -> set[str]:
    return {r[0] for r in con.execute("SELECT candidate_id FROM skill_candidates WHERE run_id = ?",
                                      [round_]).fetchall()}


def _commit(root, round_: str, batches: list[tuple[str, list[dict]]], command: str, load_id: str,
            started: datetime) -> None:
    from ..core.schema import to_arrow
    from ..store.warehouse import Warehouse

    load = {"command": command, "started_at": started, "finished_at": datetime.now(UTC), "episodes_written": 0,
            "status": "complete", "tool_version": __version__, "load_id": load_id}
    with Warehouse(root).writer() as w:
        w.commit([(t, round_, to_arrow(t, rows)) for t, rows in batches if rows]
                 + [("loads", round_, to_arrow("loads", [load]))])


def mine(root, options: MineOptions) -> MineResult:
    """Mine one candidate per failure mechanism of ``options.runs`` into ``skill_candidates`` (see the module)."""
    from ..engines.db import connect

    round_ = check_name(options.round, "--round")
    if options.builder not in BUILDERS:
        raise SkillLoopError(f"--builder must be one of {', '.join(BUILDERS)}, not {options.builder!r}")
    if options.max_refs < 1:
        raise SkillLoopError("--max-refs must be at least 1")
    cfg = None
    if options.builder == "llm":
        from ..rollout.skill_writer import builder_fingerprint, load_builder_config

        if not options.model:
            raise SkillLoopError("--builder llm needs --model CONFIG.yaml (a YAML file with a run config's `model:` "
                                 "section: the model that writes the skills; docs/skills.md)")
        cfg = load_builder_config(options.model)
    elif options.model:
        raise SkillLoopError("--model is for --builder llm; the rule templates need no model")
    started, load_id = datetime.now(UTC), uuid.uuid4().hex
    con = connect(root)
    runs = resolve_runs(con, options.runs)
    result = MineResult(round_, runs, load_id=load_id, builder=options.builder,
                        builder_fingerprint=builder_fingerprint(cfg) if cfg else None)
    existing = _existing_ids(con, round_)
    groups = []
    for mechanism in MECHANISMS:
        positive, negative = evidence(con, runs, mechanism, options.max_refs)
        if not negative:
            result.skipped.append(mechanism)
            continue
        groups.append((mechanism, positive, negative))
    if cfg is None:
        drafts = [_draft(m, p, n, MECHANISMS[m][2], {"builder": "rules", "builder_version": RULES_VERSION})
                  for m, p, n in groups]
    else:
        drafts = _llm_drafts(con, groups, cfg, result)
    for row in drafts:
        row.update({"source_runs": json.dumps(runs), "created_at": datetime.now(UTC), "load_id": load_id})
        (result.existing if row["candidate_id"] in existing else result.candidates).append(row)
        existing.add(row["candidate_id"])
    heldout, notes = heldout_rows(con, runs, round_)
    result.notes += notes
    result.heldout_tasks = len(heldout) + con.execute(
        "SELECT count(*) FROM skill_heldout_tasks WHERE run_id = ?", [round_]).fetchone()[0]
    con.close()
    if result.candidates or heldout:
        _commit(root, round_, [("skill_candidates", result.candidates), ("skill_heldout_tasks", heldout)],
                "skills mine", load_id, started)
    return result


def _draft(mechanism: str, positive: list[dict], negative: list[dict], t: Template, builder: dict) -> dict:
    """A candidate row (without its lineage columns) of a template: ShopSimRL's chunk markdown and candidate id;
    ``builder``: the builder columns (builder, builder_version, ...)."""
    content = render(t)
    return {"candidate_id": candidate_id("ADD", None, content), "operation": "ADD", "target_chunk_id": None,
            "title": t.title, "mechanism": mechanism, "content": content,
            "positive_refs": json.dumps(positive), "negative_refs": json.dumps(negative), **builder}


def _llm_drafts(con, groups: list, cfg, result: MineResult) -> list[dict]:
    """The model's candidate per cluster (``rollout.skill_writer``): a cluster already answered in this round with
    the same evidence and model is not asked again (its candidate goes to ``result.existing``); an answer that is
    not one skill goes to ``result.failed`` with its reason."""
    from ..rollout import skill_writer as sw

    if not groups:
        return []
    clusters = [sw.Cluster(m, MECHANISMS[m][0], tuple(p), tuple(n)) for m, p, n in groups]
    requests = sw.build_requests(con, clusters)
    fp = result.builder_fingerprint
    done = {r["builder_input_hash"]: r for r in _rows(
        con, "SELECT * FROM skill_candidates WHERE run_id = ? AND builder = 'llm' AND builder_fingerprint = ? "
             "ORDER BY created_at", [result.round, fp])}
    result.existing += [done[r.input_hash] for r in requests if r.input_hash in done]
    todo = [r for r in requests if r.input_hash not in done]
    answers = sw.ask(cfg, todo)
    result.sent = len(todo)
    result.unreachable = bool(answers) and all(a.unreachable for a in answers)
    drafts = []
    for a in answers:
        c = a.request.cluster
        if a.skill is None:
            result.failed.append({"mechanism": c.mechanism, "reason": a.error,
                                  "raw": (a.raw or "")[:200] or None})
            continue
        t = Template(a.skill["title"], a.skill["applicable_when"], a.skill["procedure"], a.skill["verification"],
                     a.skill["common_failure"])
        drafts.append(_draft(c.mechanism, list(c.positive), list(c.negative), t, {
            "builder": "llm", "builder_version": sw.PROMPT_VERSION, "builder_fingerprint": fp,
            "builder_input_hash": a.request.input_hash, "raw_output": a.raw}))
    return drafts


# ------------------------------------------------------------------------------------------ add and review

@dataclass(frozen=True)
class ManualCandidate:
    """A hand-written candidate (``skills add``): its text as injected and its evidence refs
    (``RUN:EPISODE[:STEP]`` strings)."""

    title: str
    content: str
    round: str = DEFAULT_ROUND
    mechanism: str = "manual"
    operation: str = "ADD"
    target_chunk_id: str | None = None
    positive: tuple[str, ...] = ()
    negative: tuple[str, ...] = ()


def parse_ref(text: str) -> dict:
    run_id, _, rest = text.partition(":")
    episode_id, _, step = rest.partition(":")
    if not run_id or not episode_id or (step and not step.lstrip("-").isdigit()):
        raise SkillLoopError(f"evidence ref {text!r} is not RUN:EPISODE or RUN:EPISODE:STEP "
                             "(e.g. first:task-022629__sample-000:3)")
    return {"run_id": run_id, "episode_id": episode_id, "step_idx": int(step) if step else None}


def add(root, cand: ManualCandidate) -> dict:
    """Write one hand-written candidate (``builder = "manual"``); its evidence episodes must exist."""
    from ..engines.db import connect

    round_ = check_name(cand.round, "--round")
    if cand.operation not in OPERATIONS:
        raise SkillLoopError(f"--operation must be ADD or REWRITE, not {cand.operation!r}")
    if (cand.operation == "REWRITE") != bool(cand.target_chunk_id):
        raise SkillLoopError("a REWRITE needs --target (the skill id it replaces); an ADD takes none")
    if not cand.title.strip() or not cand.content.strip():
        raise SkillLoopError("a candidate needs a non-empty --title and --content")
    started, load_id = datetime.now(UTC), uuid.uuid4().hex
    con = connect(root)
    refs = {k: [parse_ref(r) for r in getattr(cand, k)] for k in ("positive", "negative")}
    for ref in refs["positive"] + refs["negative"]:
        if not con.execute("SELECT count(*) FROM episodes WHERE run_id = ? AND episode_id = ?",
                           [ref["run_id"], ref["episode_id"]]).fetchone()[0]:
            raise SkillLoopError(f"evidence ref {ref['run_id']}:{ref['episode_id']} names no episode of this warehouse")
    cid = candidate_id(cand.operation, cand.target_chunk_id, cand.content)
    if cid in _existing_ids(con, round_):
        raise SkillLoopError(f"{cid} is already a candidate of {round_} (the same operation, target and text)")
    runs = sorted({r["run_id"] for r in refs["positive"] + refs["negative"]})
    row = {"candidate_id": cid, "operation": cand.operation, "target_chunk_id": cand.target_chunk_id,
           "title": cand.title, "mechanism": cand.mechanism, "content": cand.content,
           "positive_refs": json.dumps(refs["positive"]), "negative_refs": json.dumps(refs["negative"]),
           "builder": "manual", "builder_version": None, "source_runs": json.dumps(runs),
           "created_at": datetime.now(UTC), "load_id": load_id}
    heldout, _ = heldout_rows(con, runs, round_) if runs else ([], [])
    con.close()
    _commit(root, round_, [("skill_candidates", [row]), ("skill_heldout_tasks", heldout)], "skills add", load_id,
            started)
    return row


def find_candidate(con, cid: str, round_: str | None = None) -> dict:
    """The ``skill_candidate_state`` row of a candidate (its round given or unique)."""
    rows = _rows(con, "SELECT * FROM skill_candidate_state WHERE candidate_id = ? AND (? IS NULL OR run_id = ?) "
                      "ORDER BY run_id", [cid, round_, round_])
    if not rows:
        near = [r[0] for r in con.execute("SELECT candidate_id FROM skill_candidates WHERE starts_with(candidate_id, ?) "
                                          "ORDER BY 1 LIMIT 5", [cid[:10]]).fetchall()]
        raise SkillLoopError(f"no skill candidate {cid!r}{f' in round {round_}' if round_ else ''}"
                             f"{'; did you mean ' + ', '.join(near) if near else ''}; `shopsim-wh skills list` "
                             "shows them")
    if len(rows) > 1:
        raise SkillLoopError(f"{cid} is a candidate of several rounds ({', '.join(r['run_id'] for r in rows)}); "
                             "pass --round")
    return rows[0]


@dataclass(frozen=True)
class Review:
    candidate_id: str
    decision: str  # accept | reject
    reason: str
    reviewer: str | None = None
    round: str | None = None


def default_reviewer() -> str:
    return os.environ.get("USER") or getpass.getuser()


def review(root, reviews: list[Review]) -> list[tuple[dict, dict]]:
    """Append one ``skill_reviews`` row per review, all in one commit (every candidate is checked first);
    returns (the review row, the candidate's state before it) per review."""
    from ..engines.db import connect

    if not reviews:
        raise SkillLoopError("name at least one candidate to review")
    for r in reviews:
        if r.decision not in ("accept", "reject"):
            raise SkillLoopError("a review is --accept or --reject")
        if not r.reason.strip():
            raise SkillLoopError("a review needs a --reason (why the candidate is accepted or rejected)")
    con = connect(root)
    cands = [find_candidate(con, r.candidate_id, r.round) for r in reviews]
    con.close()
    now = datetime.now(UTC)
    load_id = uuid.uuid4().hex
    out, by_round = [], {}
    for r, cand in zip(reviews, cands, strict=True):
        review_id = uuid.uuid4().hex
        row = {"review_id": review_id, "candidate_id": cand["candidate_id"], "decision": r.decision,
               "reason": r.reason, "reviewer": r.reviewer or default_reviewer(),
               "firewall_findings": json.dumps(list(cand["findings"])), "reviewed_at": now, "load_id": load_id}
        by_round.setdefault(cand["run_id"], []).append(row)
        out.append((row, cand))
    for round_, rows in by_round.items():
        _commit(root, round_, [("skill_reviews", rows)], "skills review", load_id, now)
    return out


def listing(con, round_: str | None = None) -> list[dict]:
    """Every candidate (of one round) with its findings and review state, in (round, mechanism, id) order."""
    rows = _rows(con, """
        SELECT s.run_id AS round, s.candidate_id, s.state, s.mechanism, s.title, s.builder, s.findings,
               s.review_decision, s.reviewer, s.review_reason,
               json_array_length(s.positive_refs) AS positive_refs, json_array_length(s.negative_refs) AS negative_refs
        FROM skill_candidate_state AS s WHERE ? IS NULL OR s.run_id = ?
        ORDER BY s.run_id, s.mechanism, s.candidate_id""", [round_, round_])
    fw = _rows(con, "SELECT run_id, candidate_id, finding, example FROM skill_firewall WHERE ? IS NULL OR run_id = ? "
                    "ORDER BY finding", [round_, round_])
    for r in rows:
        r["findings"] = [{"finding": f["finding"], "example": f["example"]} for f in fw
                         if f["run_id"] == r["round"] and f["candidate_id"] == r["candidate_id"]]
    return rows
