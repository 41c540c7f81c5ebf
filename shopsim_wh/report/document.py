"""The report as data: a :class:`Report` of :class:`Section` s holding charts and :class:`Table` s.

``build.py`` and ``gate_section.py`` fill it; ``html.py`` renders it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import __version__
from .charts import Chart


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[dict]
    abbreviate: bool = False  # shorten long text cells (the full value in the cell's title)


@dataclass
class Section:
    key: str
    title: str
    intro: str
    charts: list[Chart] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    badge: str | None = None  # e.g. the gate's decision
    parts: list[Section] = field(default_factory=list)  # a domain's sub-sections (runs, outcomes, ...)


@dataclass
class Report:
    title: str
    warehouse: str
    run_ids: list[str]
    sections: list[Section]
    generated_at: str
    tool_version: str = __version__
    gate: dict | None = None
    seconds: float = 0.0
    group_by: str = "run"
    domains: dict[str, list[str]] = field(default_factory=dict)  # domain -> its run ids

    @property
    def charts(self) -> list[Chart]:
        return [c for s in self.sections for p in (s, *s.parts) for c in p.charts]

    def summary(self) -> dict:
        """What the CLI prints with --format json (the HTML path and size are added by the writer)."""
        return {"runs": self.run_ids, "group_by": self.group_by, "domains": self.domains,
                "sections": [s.key for s in self.sections], "charts": [c.key for c in self.charts],
                "gate": self.gate, "seconds": round(self.seconds, 3)}
