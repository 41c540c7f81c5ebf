"""Human labels in: ``shopsim-wh labels import FILE`` (CSV or JSONL) -> the ``labels`` table (docs/judge.md).

Each row names the labelled item (``run_id``, or ``experiment`` when its runs hold the episode once;
``episode_id``; optional ``step_idx`` of agent ``main``), the label's name (``label``: the judge question it is
compared with), its ``value``, the ``labeler`` and an optional ``note``. The whole file is checked before
anything is written: every row that is wrong is reported with its line, and nothing lands. Idempotent: a row
already stored (same item, label, value, labeler and note: its ``label_hash``) is not stored again; a changed
value for the same item, label and labeler is stored and the ``labels`` view keeps the newest.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ..core.errors import IngestError

REQUIRED = ("episode_id", "label", "value", "labeler")
OPTIONAL = ("run_id", "experiment", "step_idx", "note")
MAX_ERRORS = 20


@dataclass
class LabelImport:
    source_file: str
    rows: int = 0
    imported: int = 0
    already_stored: int = 0
    runs: list[str] = field(default_factory=list)

    def as_json(self) -> dict:
        return dict(self.__dict__)


def _records(path: Path) -> list[tuple[int, dict]]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise IngestError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise IngestError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8") from None
    is_jsonl = path.suffix.lower() in (".jsonl", ".json", ".ndjson") or text.lstrip().startswith("{")
    out: list[tuple[int, dict]] = []
    if is_jsonl:
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except ValueError as exc:
                raise IngestError(f"{path}:{n}: not a JSON object ({exc}); one JSON object per line") from None
            if not isinstance(doc, dict):
                raise IngestError(f"{path}:{n}: not a JSON object; one JSON object per line")
            out.append((n, doc))
        return out
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    missing = [c for c in REQUIRED if c not in header]
    if missing or not ({"run_id", "experiment"} & set(header)):
        need = missing + ([] if {"run_id", "experiment"} & set(header) else ["run_id or experiment"])
        raise IngestError(f"{path}:1: the header lacks {', '.join(need)}; the columns are run_id (or experiment), "
                          "episode_id, [step_idx], label, value, labeler, [note] (docs/judge.md)")
    unknown = [c for c in header if c not in REQUIRED + OPTIONAL]
    if unknown:
        raise IngestError(f"{path}:1: unknown column(s) {', '.join(unknown)}; the columns are run_id (or experiment), "
                          "episode_id, [step_idx], label, value, labeler, [note]")
    for row in reader:
        if None in row:
            raise IngestError(f"{path}:{reader.line_num}: more fields than the header has columns")
        out.append((reader.line_num, {k: v for k, v in row.items() if v not in (None, "")}))
    return out


def _text(doc: dict, key: str) -> str | None:
    v = doc.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, str | int | float):
        raise ValueError(f"{key} must be text, not {type(v).__name__}")
    v = str(v).strip()
    return v or None


def _check(doc: dict, index: dict) -> dict:
    """The row's stored fields, or ValueError saying what is wrong."""
    unknown = sorted(set(doc) - set(REQUIRED + OPTIONAL))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}")
    vals = {k: _text(doc, k) for k in REQUIRED + OPTIONAL}
    for k in REQUIRED:
        if vals[k] is None:
            raise ValueError(f"{k} is missing or empty")
    step = vals["step_idx"]
    if step is not None:
        try:
            step = int(step)
        except ValueError:
            raise ValueError(f"step_idx {step!r} is not a whole number") from None
    ep = vals["episode_id"]
    if vals["run_id"] is not None:
        run = vals["run_id"]
        if run not in index["runs"]:
            raise ValueError(f"no run {run!r} in this warehouse (`shopsim-wh runs list`)")
        if (run, ep) not in index["episodes"]:
            raise ValueError(f"run {run!r} has no episode {ep!r}")
    elif vals["experiment"] is not None:
        holders = sorted(r for r in index["by_experiment"].get(vals["experiment"], ()) if (r, ep) in index["episodes"])
        if not holders:
            raise ValueError(f"no run of experiment {vals['experiment']!r} holds episode {ep!r}")
        if len(holders) > 1:
            raise ValueError(f"episode {ep!r} is in {len(holders)} runs of experiment {vals['experiment']!r} "
                             f"({', '.join(holders)}); give run_id instead")
        run = holders[0]
    else:
        raise ValueError("neither run_id nor experiment is given")
    if step is not None and (run, ep, step) not in index["steps"]:
        raise ValueError(f"episode {ep!r} of run {run!r} has no step {step} of agent main")
    row = {"run_id": run, "episode_id": ep, "step_idx": step, "label": vals["label"], "value": vals["value"],
           "labeler": vals["labeler"], "note": vals["note"]}
    row["label_hash"] = hashlib.sha256(json.dumps(row, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    return row


def import_labels(warehouse: str | os.PathLike, path: str | os.PathLike) -> LabelImport:
    """Check every row of ``path`` and store the new ones (see the module doc); IngestError names each bad line."""
    from ..core.schema import to_arrow
    from ..engines.db import connect
    from ..store.warehouse import Warehouse

    path = Path(path)
    records = _records(path)
    con = connect(warehouse)
    try:
        runs = dict(con.execute("SELECT run_id, experiment FROM runs").fetchall())
        index = {"runs": runs, "by_experiment": {},
                 "episodes": set(con.execute("SELECT run_id, episode_id FROM episodes").fetchall()),
                 "steps": set(con.execute("SELECT run_id, episode_id, step_idx FROM steps WHERE agent_id = 'main'")
                              .fetchall())}
        for run, exp in runs.items():
            index["by_experiment"].setdefault(exp, []).append(run)
        stored = {r[0] for r in con.execute("SELECT label_hash FROM stg_labels").fetchall()}
    finally:
        con.close()
    result = LabelImport(str(path), rows=len(records))
    rows, errors = [], []
    for line, doc in records:
        try:
            rows.append({**_check(doc, index), "line": line})
        except ValueError as exc:
            errors.append(f"{path}:{line}: {exc}")
    if not records:
        raise IngestError(f"{path} holds no label rows; see docs/judge.md for the columns")
    if errors:
        more = f"\n  ... and {len(errors) - MAX_ERRORS} more" if len(errors) > MAX_ERRORS else ""
        raise IngestError(f"{len(errors)} of {len(records)} label row(s) are wrong, nothing was imported; fix them "
                          "and import again:\n  " + "\n  ".join(errors[:MAX_ERRORS]) + more)
    seen: set[str] = set()
    new = []
    for row in rows:
        if row["label_hash"] in stored or row["label_hash"] in seen:
            result.already_stored += 1
            continue
        seen.add(row["label_hash"])
        new.append(row)
    result.imported = len(new)
    if new:
        now = datetime.now(UTC)
        load_id = f"labels.{now:%Y%m%dT%H%M%S}.{uuid.uuid4().hex[:6]}"
        by_run: dict[str, list[dict]] = {}
        for row in new:
            run = row.pop("run_id")
            by_run.setdefault(run, []).append({**row, "source_file": str(path), "imported_at": now,
                                               "load_id": load_id})
        from .. import __version__

        batches = [("labels", run, to_arrow("labels", rs)) for run, rs in sorted(by_run.items())]
        batches += [("loads", run, to_arrow("loads", [{
            "load_id": load_id, "command": "labels import", "started_at": now, "finished_at": datetime.now(UTC),
            "episodes_written": 0, "status": "complete", "tool_version": __version__}])) for run in sorted(by_run)]
        with Warehouse(warehouse).writer() as writer:
            writer.commit(batches)
        result.runs = sorted(by_run)
    return result
