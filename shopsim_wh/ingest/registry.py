"""Readers registered by name, and content-based format detection for ``format="auto"``.

Each reader module registers itself when imported. This module imports no reader (the readers import it): the
package ``__init__`` sets :data:`load_builtin` to a function that imports the built-in ones, called once before the
first look-up, as they were loaded before (lazily: a process that reads no format, such as an ingest worker, never
imports them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import IngestError


@dataclass(frozen=True)
class Reader:
    """An ingest reader.

    ``sniff(head, path)`` returns a score (0 = not this format) from the first 64 KiB of the
    decompressed input; ``read(ctx)`` (``ctx``: a :class:`~.core.UnitContext`) is a generator that adds rows to ``ctx.sink`` and yields
    whenever the buffered rows should be flushed into Parquet; ``companions(path)`` lists extra
    files that belong to the same unit (hashed with it, never ingested on their own).
    """

    name: str
    description: str
    sniff: Callable[[bytes, Path], int]
    read: Callable[[Any], Iterator[None]]
    companions: Callable[[Path], list[Path]] = field(default=lambda p: [])


@dataclass(frozen=True)
class Lander:
    """A format whose inputs land by a rule of their own rather than one run per file (slime's rollout dumps: several
    runs per dump, joined to trace files that may land with them).

    ``claim(paths, fmt)`` takes the inputs it recognises among ``paths`` (with ``fmt`` its own name: all of them, or
    an error) and returns ``(work or None, the paths left for the readers)``; ``land(writer, work, load_id,
    options)`` commits the work (each commit atomic) and returns one ``FileResult`` per input or unit.
    """

    name: str
    description: str
    claim: Callable[[list, str], tuple[Any, list]]
    land: Callable[..., list]


READERS: dict[str, Reader] = {}
LANDERS: dict[str, Lander] = {}
load_builtin: Callable[[], None] | None = None  # set by the package __init__: imports the built-in readers


def register(reader: Reader) -> Reader:
    READERS[reader.name] = reader
    return reader


def register_lander(lander: Lander) -> Lander:
    LANDERS[lander.name] = lander
    return lander


def landers() -> list[Lander]:
    _load_builtin()
    return list(LANDERS.values())


def get_reader(name: str) -> Reader:
    _load_builtin()
    try:
        return READERS[name]
    except KeyError:
        raise IngestError(f"unknown format {name!r}; valid formats: auto, {', '.join(formats())}") from None


def formats() -> list[str]:
    _load_builtin()
    return sorted([*READERS, *LANDERS])


def detect(head: bytes, path: Path) -> str | None:
    """The best-scoring reader for this content, or None."""
    _load_builtin()
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    best, best_score = None, 0
    for r in READERS.values():
        score = r.sniff(head, path)
        if score > best_score:
            best, best_score = r.name, score
    return best


def key_re(key: str, value: str | None = None) -> re.Pattern:
    """Regex for a JSON key (optionally with a string value prefix) in raw bytes."""
    if value is None:
        return re.compile(rb'"' + re.escape(key.encode()) + rb'"\s*:')
    return re.compile(rb'"' + re.escape(key.encode()) + rb'"\s*:\s*"' + re.escape(value.encode()))


_loaded = False


def _load_builtin() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    if load_builtin is not None:
        load_builtin()
