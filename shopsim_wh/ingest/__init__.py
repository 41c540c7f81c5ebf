"""Ingest of historical traces (issue 3): readers registered by name, one entry point.

    from shopsim_wh.ingest import ingest, dump_episode
    summary = ingest(["../shared/data"], "warehouse")

Core code: no typer, no rich. The CLI wires ``shopsim-wh ingest`` / ``shopsim-wh dump`` to these.
"""

from .core import FileResult, IngestSummary, UnitContext, ingest
from .registry import READERS, Reader, detect, formats, get_reader, register

__all__ = ["FileResult", "IngestSummary", "UnitContext", "ingest", "READERS", "Reader", "detect", "formats",
           "get_reader", "register", "dump_episode"]


def dump_episode(warehouse, episode_id: str, fmt: str, run_id: str | None = None) -> str:
    from .dump import dump_episode as _dump
    return _dump(warehouse, episode_id, fmt, run_id)
