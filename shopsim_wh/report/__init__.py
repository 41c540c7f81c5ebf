"""`shopsim-wh report`: one self-contained, offline HTML report over the warehouse views (docs/report.md).

    from shopsim_wh.report import ReportOptions, write_report
    summary = write_report("warehouse/", "report.html", ReportOptions(gate=("demo", "demo-skill")))

Library first: :func:`.build.build` queries (``shopsim_wh/report/sql/*.sql``, values bound) and makes Vega-Lite
specs (:mod:`.charts`); :func:`.html.render` inlines them with the vendored Vega runtime (``vendor/``).
"""

from __future__ import annotations

import os
from pathlib import Path

from .build import Progress, Report, ReportError, ReportOptions, build

__all__ = ["Report", "ReportError", "ReportOptions", "build", "write_report"]


def write_report(con_or_warehouse, out: str | os.PathLike, options: ReportOptions | None = None,
                 warehouse: str | None = None, progress: Progress | None = None) -> dict:
    """Build the report (:func:`.build.build` with ``options``) and write it to ``out`` atomically (a
    temporary name, then a rename). ``warehouse``: the location named in the page (default: the resolved path
    given, if a path was given). Returns the summary: runs, sections, charts, gate, out, bytes, seconds."""
    from ..engines.db import as_connection
    from .html import render

    con = as_connection(con_or_warehouse)
    if warehouse is None:
        warehouse = "" if isinstance(con_or_warehouse, type(con)) else str(Path(con_or_warehouse).resolve())
    report = build(con, options, warehouse=warehouse, progress=progress)
    out = Path(out)
    if out.parent and not out.parent.is_dir():
        raise ReportError(f"cannot write {out}: directory {out.parent} does not exist; create it or pick another --out")
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    tmp.write_text(render(report), encoding="utf-8")
    os.replace(tmp, out)
    return report.summary() | {"out": str(out), "bytes": out.stat().st_size}
