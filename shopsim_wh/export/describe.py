"""Describe the kinds: grain, columns (DuckDB types) and one example row, read from a warehouse.

``describe_kinds(warehouse)`` serves ``shopsim-wh export --list`` and docs/export.md. Without a warehouse
holding runs it describes the kinds over a tiny one built from the ingest fixtures shipped in tests/ (source
checkouts) or from an embedded-simulator demo run (installed packages).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from .registry import list_kinds

EXAMPLE_CHARS = 160  # a string value of the example row is cut to this many characters


def _short(value):
    if isinstance(value, str):
        try:
            parsed = json.loads(value) if value[:1] in "[{" else None
        except ValueError:
            parsed = None
        if parsed is not None:
            return _short(parsed)
        return value if len(value) <= EXAMPLE_CHARS else value[:EXAMPLE_CHARS] + "…"
    if isinstance(value, list):
        return [_short(v) for v in value[:3]] + (["…"] if len(value) > 3 else [])
    if isinstance(value, dict):
        return {k: _short(v) for k, v in value.items()}
    return value


def tiny_warehouse(root: Path) -> Path:
    """A small warehouse for examples: the repository's ingest fixtures (Claude Code with sub-agents and a
    summary, agent_multi_turn, ATIF) when present, else two embedded-simulator episodes."""
    repo = Path(__file__).resolve().parents[2] / "tests" / "fixtures"
    paths = [repo / "ingest" / "agent_multi_turn", repo / "third_party" / "claude_code_session-share",
             repo / "third_party" / "atif_login-trace"]
    if all(p.exists() for p in paths):
        from ..ingest import ingest

        ingest(paths, root, parallel=False)
        return root
    from .. import runner
    from ..config import load_config

    cfg_path = root.parent / "demo.yaml"
    cfg_path.write_text(json.dumps({
        "experiment": {"name": "export-demo", "seed": 1}, "tasks": {"split": "train", "sample_size": 2},
        "model": {"name": "scripted-strong", "base_url": "embedded"}, "environment": {"url": "embedded"},
        "runtime": {"max_steps": 20, "concurrency": 2}}))
    runner.run(load_config(cfg_path), str(root))
    return root


def describe_kinds(warehouse=None) -> list[dict]:
    """[{name, grain, trl, description, sample, filters, default_where, columns: [[name, type]], example}]."""
    from ..db import connect

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(warehouse) if warehouse else None
        if root is None or not root.is_dir():
            root = tiny_warehouse(Path(tmp) / "wh")
        con = connect(root)
        con.execute("SET enable_progress_bar = false")
        con.execute("CREATE OR REPLACE TEMP TABLE export_scope AS SELECT run_id FROM runs")
        out = []
        for k in list_kinds():
            cols = con.execute(f"DESCRIBE SELECT * FROM {k.view}").fetchall()
            row = con.execute(f"SELECT * FROM {k.view} ORDER BY sample_id LIMIT 1").fetchone()
            names = [c[0] for c in cols]
            out.append({"name": k.name, "grain": k.grain, "trl": k.trl, "description": k.description,
                        "sample": list(k.sample), "filters": list(k.filters), "default_where": k.default_where,
                        "columns": [[c[0], c[1]] for c in cols],
                        "example": None if row is None else {n: _short(v) for n, v in zip(names, row, strict=True)}})
        con.close()
    return out


def export_md(kinds: list[dict]) -> str:
    """docs/export.md's generated reference section."""
    lines = []
    for k in kinds:
        lines += [f"### `{k['name']}`", "", k["description"], "",
                  f"- grain: {k['grain']}", f"- TRL dataset type: {k['trl']}",
                  f"- sample columns (dedupe key, privacy scan): {', '.join(k['sample'])}",
                  f"- filter columns (`--where`): {', '.join(k['filters'])}",
                  f"- default selection: `{k['default_where']}`" if k["default_where"] else "- default selection: every row",
                  "", "| column | type |", "| --- | --- |"]
        lines += [f"| `{n}` | {t} |" for n, t in k["columns"]]
        lines += ["", "Example row (strings cut at 160 characters, lists at 3 items):", "", "```json",
                  json.dumps(k["example"], ensure_ascii=False, indent=1, sort_keys=False, default=str), "```", ""]
    return "\n".join(lines)
