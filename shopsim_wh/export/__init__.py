"""Training data out of the warehouse: ``export(kind, warehouse, out, ...)``, ``explain(...)`` and the kind registry.

Each kind is one ``sql/exports/<kind>.sql`` view over the shared building blocks ``sql/exports/00_*.sql``
(above all ``export_decisions``); Python registers kinds, binds parameters, shards, writes and records the
manifest. See docs/export.md for every kind's grain, columns and an example row.
"""

from __future__ import annotations

from .core import EXPORTER_VERSION, ExportResult, explain, export
from .plan import DEFAULT_SHARD_ROWS, FORMATS, STRATEGIES, ExportOptions, ExportPlan
from .registry import ExportError, Kind, get_kind, list_kinds

__all__ = ["DEFAULT_SHARD_ROWS", "EXPORTER_VERSION", "FORMATS", "STRATEGIES", "ExportError", "ExportOptions",
           "ExportPlan", "ExportResult", "Kind", "explain", "export", "get_kind", "list_kinds"]
