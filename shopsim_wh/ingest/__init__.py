"""Ingest of historical traces (issue 3): readers registered by name, one entry point.

    from shopsim_wh.ingest import IngestOptions, ingest, dump_episode, dump_run
    summary = ingest(["~/traces"], "warehouse")  # or ingest(paths, wh, IngestOptions(format="atif"))

Core code: no typer, no rich. The CLI wires ``shopsim-wh ingest`` / ``shopsim-wh dump`` to these.
"""

from . import registry
from .core import FileResult, IngestOptions, IngestSummary, UnitContext, ingest
from .registry import READERS, Reader, detect, formats, get_reader, register

__all__ = ["FileResult", "IngestOptions", "IngestSummary", "UnitContext", "ingest", "READERS", "Reader", "detect",
           "formats", "get_reader", "register", "dump_episode", "dump_run"]


def dump_episode(warehouse, episode_id: str, fmt: str, run_id: str | None = None, attempt: int | None = None) -> str:
    from .dump import dump_episode as _dump
    return _dump(warehouse, episode_id, fmt, run_id, attempt)


def dump_run(warehouse, run_id: str, out_dir):
    """Run ``run_id`` as a ShopSimRL run directory (traces.jsonl, manifest.json, summary.json)."""
    from .dump import dump_run as _dump
    return _dump(warehouse, run_id, out_dir)


def _load_readers() -> None:
    """The built-in readers, imported once before the first look-up (each registers itself; in this order, since a
    tie in format detection goes to the first). ``_v4_parallel`` registers ``shopsimrl-v4``."""
    from . import agent_multi_turn, atif, claude_code, openai_messages, slime  # noqa: F401

    # isort: split
    from . import _v4_parallel  # noqa: F401


registry.load_builtin = _load_readers
