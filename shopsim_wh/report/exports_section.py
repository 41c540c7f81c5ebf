"""The report's exports section: the manifests of training-data exports (``shopsim-wh export``) over these runs.

An export lives in its own directory beside the warehouse, described by its ``manifest.json`` (docs/export.md);
the report reads the manifests it is given (``--exports DIR``, a directory holding manifests at any depth) and
lists, per export, what it holds, from which snapshot, what was kept out and whether it is clean for training.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..core.errors import ShopsimError


def read_manifests(paths: list[str | Path]) -> list[tuple[Path, dict]]:
    """Every ``manifest.json`` under ``paths`` (a directory or a manifest file), in path order."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            found.append(p)
        elif p.is_dir():
            found += sorted(p.rglob("manifest.json"))
        else:
            raise ShopsimError(f"--exports {p}: no such file or directory; pass the --out directory of an export")
    out = []
    for f in found:
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ShopsimError(f"--exports: cannot read {f} ({exc}); pass the --out directory of a finished "
                               "export (its manifest.json is written last)") from None
        if isinstance(doc, dict) and "kind" in doc and "shards" in doc:
            out.append((f, doc))
    return out


def export_rows(manifests: list[tuple[Path, dict]], run_ids: list[str]) -> list[dict]:
    """One row per export that read at least one of ``run_ids``."""
    rows = []
    for path, m in manifests:
        sources = [r.get("run_id") for r in m.get("source_runs", [])]
        if not set(sources) & set(run_ids):
            continue
        deco, privacy = m.get("decontamination") or {}, m.get("privacy") or {}
        kept_in = [k for k, flag in (("reasoning", "reasoning_included"), ("persona", "persona_included"))
                   if privacy.get(flag)]
        rows.append({
            "export": str(path.parent), "kind": m["kind"], "format": m.get("format"), "rows": m.get("rows"),
            "shards": len(m["shards"]), "duplicates removed": m.get("duplicates_removed"),
            "snapshot": (m.get("warehouse") or {}).get("snapshot"), "runs": ", ".join(sorted(set(sources))),
            "where": (m.get("filters") or {}).get("where"),
            "clean for training": deco.get("clean") if isinstance(deco, dict) else None,
            "included": ", ".join(kept_in) or "nothing private",
        })
    return rows
