"""`shopsim-wh report`: one self-contained, offline HTML report over the warehouse views (docs/report.md).

    from shopsim_wh.report import write_report
    summary = write_report("warehouse/", "report.html", gate=("demo", "demo-skill"))

Library first: :func:`.build.build` queries (``shopsim_wh/report/sql/*.sql``, values bound) and makes Vega-Lite
specs (:mod:`.charts`); :func:`.html.render` inlines them with the vendored Vega runtime (``vendor/``).
"""

from __future__ import annotations

import os
from pathlib import Path

from .build import Report, ReportError, build

__all__ = ["Report", "ReportError", "build", "write_report"]


def write_report(con_or_warehouse, out: str | os.PathLike, **options) -> dict:
    """Build the report (``options``: those of :func:`.build.build`) and write it to ``out`` atomically
    (a temporary name, then a rename). Returns the summary: runs, sections, charts, gate, out, bytes, seconds."""
    from ..engines.db import as_connection
    from .html import render

    con = as_connection(con_or_warehouse)
    if not isinstance(con_or_warehouse, type(con)):
        options.setdefault("warehouse", str(Path(con_or_warehouse).resolve()))
    report = build(con, **options)
    out = Path(out)
    if out.parent and not out.parent.is_dir():
        raise ReportError(f"cannot write {out}: directory {out.parent} does not exist; create it or pick another --out")
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    tmp.write_text(render(report), encoding="utf-8")
    os.replace(tmp, out)
    return report.summary() | {"out": str(out), "bytes": out.stat().st_size}
