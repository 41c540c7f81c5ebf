"""The SQL sandbox: untrusted SQL (``shopsim-wh sql``, ``--where``, the gate's ``--covariates``) reads the
warehouse's views and nothing else.

Two layers, both always on:

* **the connection** (:func:`connect`): :func:`shopsim_wh.engines.db.connect` installs the views over the current
  snapshot first; then DuckDB's own switches close everything else: ``allowed_directories`` = the warehouse
  root (and a private, initially absent temp directory for spilling), ``enable_external_access = false``
  (no file, URL, ``ATTACH`` or ``COPY`` outside those directories), no extension auto-install/auto-load,
  no Python replacement scans (a query cannot read the caller's DataFrames by name), and finally
  ``lock_configuration = true`` so no statement can undo any of it;
* **the statement** (:func:`check_query`, :func:`check_expression`): exactly one SELECT-like statement
  (``SELECT``, ``WITH``, ``FROM``, ``VALUES``, ``DESCRIBE``, ``SHOW``, ``SUMMARIZE``, ``EXPLAIN`` of one), so
  nothing can be created, changed or written even inside the warehouse directory; an expression is one
  expression (no comment, balanced parentheses, no clause around it) and comes back parenthesised for
  splicing.

Both raise :class:`shopsim_wh.core.errors.QueryRefused` with what is allowed instead.

Every user query also runs under :class:`Limits`: a memory cap set on the connection before it is locked
(DuckDB spills sorts, joins and aggregates past it to the private temp directory and fails the rest), and a
time limit (:func:`limited`) that interrupts the query. Either ends in :class:`shopsim_wh.core.errors.QueryLimitExceeded`
naming the limit and how to raise it.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from ..core.errors import ConfigError, QueryLimitExceeded, QueryRefused
from .db import connect as open_views

TIMEOUT_ENV = "SHOPSIM_WH_QUERY_TIMEOUT"
MEMORY_ENV = "SHOPSIM_WH_QUERY_MEMORY"
DEFAULT_TIMEOUT_S = 120.0
_GB = 1 << 30


def default_memory_limit() -> str:
    """The smaller of 4 GB and a quarter of this machine's RAM (DuckDB's own default is 80%)."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        ram = 16 * _GB
    return f"{max(256, min(4 * _GB, ram // 4) >> 20)}MB"


@dataclass(frozen=True)
class Limits:
    """What one user query may spend: ``timeout_s`` seconds (None or 0: no limit) and ``memory`` (a DuckDB size
    such as ``4GB``). :meth:`resolve` fills what the caller left unset from the environment, then the defaults."""

    timeout_s: float | None = DEFAULT_TIMEOUT_S
    memory: str | None = None

    @classmethod
    def resolve(cls, timeout_s: float | None = None, memory: str | None = None) -> Limits:
        if timeout_s is None:
            env = os.environ.get(TIMEOUT_ENV, "").strip()
            try:
                timeout_s = float(env) if env else DEFAULT_TIMEOUT_S
            except ValueError:
                raise ConfigError(f"{TIMEOUT_ENV}={env!r} is not a number of seconds; unset it or give e.g. 300") from None
        if timeout_s < 0:
            raise ConfigError(f"the query timeout must be 0 (no limit) or a number of seconds, not {timeout_s}")
        memory = memory or os.environ.get(MEMORY_ENV, "").strip() or default_memory_limit()
        return cls(timeout_s or None, memory)

ALLOWED = ("one SELECT statement (SELECT, WITH ... SELECT, FROM ..., VALUES, DESCRIBE, SHOW, SUMMARIZE, "
           "or EXPLAIN of one) over the warehouse views; list them with `shopsim-wh tables`")
_KIND = {  # statement type -> what the user tried, for the refusal
    "ATTACH": "ATTACH (other databases)", "DETACH": "DETACH", "COPY": "COPY (writing or reading files)",
    "COPY_DATABASE": "COPY FROM DATABASE", "EXPORT": "EXPORT DATABASE", "SET": "SET / RESET / USE (settings)",
    "VARIABLE_SET": "SET VARIABLE", "PRAGMA": "PRAGMA / IMPORT DATABASE", "CALL": "CALL / CHECKPOINT",
    "CREATE": "CREATE (tables, views, macros, secrets)", "CREATE_FUNC": "CREATE FUNCTION", "INSERT": "INSERT",
    "UPDATE": "UPDATE", "DELETE": "DELETE", "MERGE_INTO": "MERGE", "DROP": "DROP / DEALLOCATE",
    "ALTER": "ALTER / COMMENT ON", "LOAD": "INSTALL / LOAD (extensions)", "EXTENSION": "extension statements",
    "TRANSACTION": "BEGIN / COMMIT / ROLLBACK", "VACUUM": "VACUUM / ANALYZE", "PREPARE": "PREPARE",
    "EXECUTE": "EXECUTE", "MULTI": "a statement that expands to several (PIVOT without an IN list: name the "
    "values, PIVOT t ON col IN (...))",
}
_SPILL_PREFIX = "shopsim-wh-sandbox-"
_CLAUSES = ("where_clause", "having", "qualify", "sample")  # must be empty around a checked expression


def _locked_down(con: duckdb.DuckDBPyConnection, root: Path | str, memory: str | None = None
                 ) -> duckdb.DuckDBPyConnection:
    if memory:
        try:
            con.execute(f"SET memory_limit = '{_quote(memory)}'")
        except duckdb.Error as exc:
            raise QueryRefused(f"memory limit {memory!r} is not a size DuckDB reads ({str(exc).splitlines()[0]}); "
                               "give e.g. 2GB or 512MB") from None
    # the directory DuckDB spills to is always allowed; make it a private one that does not exist yet
    # (DuckDB creates it on first spill and removes it on close), not ./.tmp in the working directory
    spill = Path(tempfile.gettempdir()) / f"{_SPILL_PREFIX}{uuid.uuid4().hex}"
    con.execute(f"SET temp_directory = '{_quote(str(spill))}'")
    sep = "/" if isinstance(root, str) else os.sep  # an s3:// warehouse: its prefix, nothing else in the bucket
    con.execute(f"SET allowed_directories = ['{_quote(str(root))}{sep}']")  # trailing sep: not root-sibling/
    con.execute("SET python_enable_replacements = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def _quote(text: str) -> str:
    return text.replace("'", "''")


def connect(root: str | os.PathLike, threads: int | None = None, limits: Limits | None = None
            ) -> duckdb.DuckDBPyConnection:
    """A connection for untrusted SQL: every view of :func:`shopsim_wh.engines.db.connect`, then locked down, with the
    memory cap of ``limits`` (default :meth:`Limits.resolve`: environment, then the defaults).

    The library's own SQL (temp tables of the gate, ...) still runs on it; what a *user* sends goes through
    :func:`execute` (a whole query) or :func:`check_expression` (a filter spliced into a query).
    """
    from ..store.storage import is_url

    memory = (limits or Limits.resolve()).memory
    if is_url(str(root)):
        url = str(root).rstrip("/")
        return _locked_down(open_views(url, threads=threads), url, memory)
    real = Path(root).resolve()  # the views read resolved paths (warehouse.staging_sql), so allow the resolved root
    return _locked_down(open_views(real, threads=threads), real, memory)


@contextmanager
def limited(con: duckdb.DuckDBPyConnection, limits: Limits | None = None, what: str = "the query") -> Iterator[None]:
    """Run the block (a query and the fetch of its result) under ``limits``: past ``timeout_s`` the query is
    interrupted; an interruption or DuckDB running out of its memory cap raises
    :class:`shopsim_wh.core.errors.QueryLimitExceeded` saying which limit and how to raise it."""
    limits = limits or Limits.resolve()
    fired = threading.Event()

    def stop() -> None:
        fired.set()
        con.interrupt()

    timer = threading.Timer(limits.timeout_s, stop) if limits.timeout_s else None
    if timer:
        timer.daemon = True
        timer.start()
    try:
        yield
    except duckdb.OutOfMemoryException as exc:
        raise QueryLimitExceeded(
            f"{what} needed more than its memory cap of {limits.memory} ({str(exc).splitlines()[0]}); narrow "
            f"it, or raise the cap with --memory-limit SIZE or {MEMORY_ENV}") from None
    except Exception:  # the interruption, however the code in the block reported it (the gate wraps SQL errors)
        if not fired.is_set():
            raise
        raise QueryLimitExceeded(
            f"{what} was stopped after its time limit of {limits.timeout_s:g} s; narrow it (a WHERE on run_id, "
            f"a LIMIT), or raise the limit with --timeout SECONDS or {TIMEOUT_ENV} (0: none)") from None
    finally:
        if timer:  # joined: a timer thread still alive at exit aborts the process ("exception not rethrown")
            timer.cancel()
            timer.join()


def _types(sql: str) -> list[tuple[str, str]]:
    try:  # a syntax error (duckdb.ParserException) goes up as it is: DuckDB's message says where
        return [(s.type.name, s.query) for s in duckdb.extract_statements(sql)]
    except ValueError:  # a statement type the Python enum does not know (UPDATE EXTENSIONS, ...)
        raise QueryRefused(f"this statement is not a query; the SQL shell runs {ALLOWED}") from None


def check_query(sql: str) -> str:
    """``sql`` if it is one SELECT-like statement, else :class:`QueryRefused` naming what was refused."""
    if not isinstance(sql, str) or not sql.strip():
        raise QueryRefused(f"the query is empty; the SQL shell runs {ALLOWED}")
    statements = _types(sql)
    if not statements:
        raise QueryRefused(f"the query has no statement (only comments or ';'); the SQL shell runs {ALLOWED}")
    if len(statements) > 1:
        raise QueryRefused(f"the query holds {len(statements)} statements; the SQL shell runs {ALLOWED} "
                           "(run them one at a time)")
    kind, text = statements[0]
    if kind == "EXPLAIN":
        kind, text = _explained(text)
    if kind != "SELECT":
        what = _KIND.get(kind, kind)
        raise QueryRefused(f"{what} is not allowed: the SQL shell is read-only and reads only the warehouse; it "
                           f"runs {ALLOWED}. To save a result use --out FILE (--format csv, json or parquet)")
    _no_data_change(_serialized(text), "the query")
    return sql


def _explained(text: str) -> tuple[str, str]:
    """The type and text of the statement an EXPLAIN [ANALYZE] wraps (EXPLAIN ANALYZE executes it)."""
    toks = duckdb.tokenize(text)
    pos = [p for p, _ in toks] + [len(text)]
    words = [text[pos[i]:pos[i + 1]].strip().upper() for i in range(len(toks))]
    i = 1 + (len(words) > 1 and words[1] == "ANALYZE")
    inner = _types(text[pos[i]:]) if i < len(toks) else []
    return (inner[0][0], inner[0][1]) if len(inner) == 1 else ("EXPLAIN", text)


_READ_NODES = frozenset({"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE"})


def _no_data_change(tree: dict, what: str, instead: str = f"the SQL shell runs {ALLOWED}") -> None:
    """Refuse a statement whose parse tree holds anything but query nodes: a SELECT whose CTE or subquery is an
    INSERT / UPDATE / DELETE ... RETURNING passes the statement-type check (DuckDB calls it a SELECT)."""
    if tree.get("error"):
        raise QueryRefused(f"{what} could not be checked ({tree.get('error_message')}); {instead}")
    stack: list = [tree.get("statements") or []]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            kind = node.get("type")
            if isinstance(kind, str) and kind.endswith("_NODE") and kind not in _READ_NODES:
                verb = kind.removesuffix("_QUERY_NODE").removesuffix("_NODE").replace("_", " ")
                raise QueryRefused(f"{what} holds a data-changing {verb} (in a WITH clause or a subquery), and "
                                   f"the warehouse is read-only here; {instead}")
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _refuse_errors(exc: duckdb.Error, root: str | None) -> QueryRefused | None:
    text = str(exc)
    where = f" (under {root})" if root else ""
    if isinstance(exc, duckdb.PermissionException) or "disabled by configuration" in text:
        first = text.splitlines()[0]
        return QueryRefused(f"{first}\nThe SQL shell reads only the warehouse's own files{where}: query the views "
                            "(`shopsim-wh tables` lists them; docs/schema.md describes them)")
    if "configuration has been locked" in text:
        return QueryRefused(f"{text.splitlines()[0]}\nThe SQL shell's settings are fixed; it runs {ALLOWED}")
    return None


def execute(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any] | list | None = None):
    """Check ``sql`` (:func:`check_query`) and run it on ``con`` (a :func:`connect` connection) with ``params``
    bound; file and settings refusals from DuckDB come back as :class:`QueryRefused`. Returns the cursor."""
    check_query(sql)
    try:
        return con.execute(sql, params or {})
    except duckdb.Error as exc:
        refused = _refuse_errors(exc, _root_of(con))
        if refused is not None:
            raise refused from None
        raise


def fetch_arrow(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any] | None = None):
    """:func:`execute` with the result as an Arrow table, through a relation (no DB-API copy, no warning)."""
    check_query(sql)
    try:
        rel = con.sql(sql, params=params or None)
        return rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()
    except duckdb.Error as exc:
        refused = _refuse_errors(exc, _root_of(con))
        if refused is not None:
            raise refused from None
        raise


def _root_of(con: duckdb.DuckDBPyConnection) -> str | None:
    try:
        dirs = con.execute("SELECT current_setting('allowed_directories')").fetchone()[0]
    except duckdb.Error:
        return None
    mine = [d for d in dirs or [] if _SPILL_PREFIX not in d]
    return mine[0].rstrip(os.sep) if mine else None


def check_expression(expr: str, what: str) -> str:
    """``expr`` as ``(expr)``, ready to splice into a query, if it is exactly one SQL expression.

    ``what`` names the argument in the refusal (``"--where"``, ``"covariate 'x'"``). Refused: anything but a
    non-empty string, comments (they could cut off the rest of the query), unbalanced parentheses (they
    could close the caller's), ``;``, and anything that parses as more than one expression (an alias, a
    FROM / WHERE / GROUP BY / ORDER BY / LIMIT / UNION around it). Subqueries over the views are allowed:
    the query the expression is spliced into must run on a :func:`connect` connection, so they read
    nothing else.
    """
    example = "e.g. \"reward > 0.5 AND split = 'val'\""
    if not isinstance(expr, str) or not expr.strip():
        raise QueryRefused(f"{what} is empty; give one SQL expression, {example}")
    if "\x00" in expr:
        raise QueryRefused(f"{what} contains a NUL character; give one SQL expression, {example}")
    try:
        toks = duckdb.tokenize(expr)
    except duckdb.Error as exc:
        raise QueryRefused(f"{what} is not a SQL expression ({exc}); {example}") from None
    pos = [p for p, _ in toks] + [len(expr)]
    depth = 0
    for i, (_, kind) in enumerate(toks):
        text = expr[pos[i]:pos[i + 1]].strip()
        if kind.name == "comment":
            raise QueryRefused(f"{what} contains a comment ({text[:20]!r}); give one SQL expression without "
                               f"comments, {example}")
        if kind.name != "operator":
            continue
        if text == ";":
            raise QueryRefused(f"{what} contains ';': it must be one SQL expression, not statements; {example}")
        if text != "(" and text != ")" and ("(" in text or ")" in text):
            raise QueryRefused(f"{what}: cannot read the operator {text!r}; {example}")
        depth += (text == "(") - (text == ")")
        if depth < 0:
            raise QueryRefused(f"{what} closes a parenthesis it did not open; give one SQL expression, {example}")
    if depth:
        raise QueryRefused(f"{what} leaves {depth} parenthesis(es) open; give one SQL expression, {example}")
    _one_expression(expr, what, example)
    return f"({expr})"


_PARSER: list[duckdb.DuckDBPyConnection] = []  # one in-memory connection for parsing, made on first use
_PARSER_LOCK = threading.Lock()


def _serialized(sql: str) -> dict:
    """DuckDB's own parse tree of ``sql`` (``json_serialize_sql``: parses, binds nothing, reads nothing)."""
    with _PARSER_LOCK:
        if not _PARSER:
            _PARSER.append(_locked_down(duckdb.connect(), Path(tempfile.gettempdir()) / f"{_SPILL_PREFIX}parser"))
        return json.loads(_PARSER[0].execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0])


def _one_expression(expr: str, what: str, example: str) -> None:
    tree = _serialized(f"SELECT ({expr})")
    if tree.get("error"):
        raise QueryRefused(f"{what} is not a SQL expression: {tree.get('error_message')}; {example}")
    _no_data_change(tree, what, f"give one SQL expression that reads, {example}")
    nodes = tree.get("statements") or []
    node = nodes[0].get("node", {}) if len(nodes) == 1 else {}
    ok = (node.get("type") == "SELECT_NODE" and len(node.get("select_list") or []) == 1
          and (node.get("from_table") or {}).get("type") == "EMPTY" and not node.get("modifiers")
          and not (node.get("cte_map") or {}).get("map") and not node.get("group_expressions")
          and all(node.get(c) is None for c in _CLAUSES) and not node["select_list"][0].get("alias"))
    if not ok:
        raise QueryRefused(f"{what} must be one SQL expression (no alias, FROM, GROUP BY, ORDER BY, LIMIT or "
                           f"UNION around it); {example}")
