"""SQL text for the places parameters cannot go (DDL, identifiers): quoting a literal and an identifier."""

from __future__ import annotations


def sql_string(value: str) -> str:
    """Quote a string literal (for paths in DDL, where parameters are not allowed)."""
    return "'" + str(value).replace("'", "''") + "'"


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
