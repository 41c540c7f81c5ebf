"""The one naming rule: every name that becomes part of a path (experiment name = run id, ingest source name,
the run ids ingest derives) is 1-128 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit.

So a name is always a single path component inside the warehouse (no '/', no '..', no leading '.' or '-',
no spaces, control characters, newlines or look-alike Unicode), the same on every file system. Everything
else users pass (model names such as ``Qwen/Qwen3-8B``, skill ids, checkpoint ids, ``--where`` text) is a
value: stored in a column and bound as a SQL parameter, never part of a path. docs/conventions.md states it.
"""

from __future__ import annotations

import re

from .errors import NameRefused

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
RULE = ("use 1-128 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit "
        "(it names a warehouse partition directory)")


def is_name(value: object) -> bool:
    return isinstance(value, str) and NAME_RE.fullmatch(value) is not None  # fullmatch: "$" would allow "x\n"


def check_name(value: object, what: str) -> str:
    """``value`` if it follows the rule, else :class:`NameRefused` saying which argument and the rule."""
    if not is_name(value):
        raise NameRefused(f"{what} {value!r} is not a usable name: {RULE}")
    return value
