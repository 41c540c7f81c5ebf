"""The sandbox's Spark half: user SQL (``sql --engine spark``, ``export --engine spark --where``) runs on Spark only
as one read-only query over the registered warehouse views.

DuckDB's sandbox closes files and settings with DuckDB's own switches; Spark SQL has none of them (``reflect`` calls
any static Java method, ``text.`/etc/passwd``` reads any file), so the Spark side checks the statement itself, on
the Spark SQL that is about to run (after translation, so a macro or a rewrite cannot smuggle anything in), with
sqlglot's Spark parser:

* exactly one query (SELECT, set operations, VALUES); no DDL, DML, SET, ADD JAR or command of any kind;
* every table reference is a registered view or a CTE of the query, unqualified: no ``csv.`/path```,
  ``global_temp.x``, catalog names or table functions other than :data:`TABLE_FUNCTIONS`;
* no function that reaches the JVM, the file system or the session (:data:`REFUSED_FUNCTIONS`).

``sql --engine spark`` also binds the query on a sandboxed DuckDB connection first (:func:`bind_on_duckdb`), so
its functions and tables are the ones DuckDB knows over the same views. A refusal is
:class:`shopsim_wh.core.errors.QueryRefused` (exit code 2), as on DuckDB.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlglot
from sqlglot import exp

REFUSED_FUNCTIONS = frozenset({
    "reflect", "java_method", "try_reflect",  # any static Java method: System.getenv, Files.readAllLines, ...
    "input_file_name", "input_file_block_start", "input_file_block_length",  # the files behind a view
    "read_files", "from_files", "current_user", "session_user", "user", "current_catalog", "current_database",
    "current_schema", "version", "assert_true", "raise_error", "spark_partition_id", "sleep",
})
TABLE_FUNCTIONS = frozenset({"range", "explode", "explode_outer", "inline", "inline_outer", "posexplode",
                             "posexplode_outer", "stack", "json_tuple"})
_WRITES = (exp.DDL, exp.DML, exp.Command, exp.Set, exp.Use, exp.Pragma, exp.Transaction, exp.Commit,
           exp.Rollback, exp.Drop, exp.Insert, exp.Update, exp.Delete, exp.Merge, exp.Create, exp.Alter,
           exp.LoadData, exp.Cache, exp.Uncache, exp.Refresh, exp.Describe)
ALLOWED = "one SELECT over the warehouse views (`shopsim-wh tables` lists them)"


def _refuse(message: str):
    from ..core.errors import QueryRefused

    return QueryRefused(f"{message}; on Spark the SQL shell runs {ALLOWED}")


def check(spark_sql: str, views: Iterable[str]) -> str:
    """``spark_sql`` if it is one read-only query over ``views``, else :class:`QueryRefused` naming what was
    refused."""
    try:
        statements = [s for s in sqlglot.parse(spark_sql, read="spark") if s is not None]
    except sqlglot.errors.ParseError as exc:
        raise _refuse(f"the query does not parse as Spark SQL ({str(exc).splitlines()[0]})") from None
    if len(statements) != 1:
        raise _refuse(f"the query holds {len(statements)} statements")
    tree = statements[0]
    if not isinstance(tree, exp.Query) or any(isinstance(n, _WRITES) for n in tree.walk()):
        bad = next((n for n in tree.walk() if isinstance(n, _WRITES)), tree)
        raise _refuse(f"{type(bad).__name__.upper()} is not allowed: the warehouse is read-only")
    known = {v.lower() for v in views}
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    for node in tree.walk():
        if isinstance(node, exp.Func):
            name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
            if name in REFUSED_FUNCTIONS:
                raise _refuse(f"the function {name}() is not allowed (it reaches outside the warehouse's views)")
        if not isinstance(node, exp.Table):
            continue
        if isinstance(node.this, exp.Func) or not node.name:
            fn = node.this.name if isinstance(node.this, exp.Anonymous) else getattr(node.this, "sql_name", str)()
            if str(fn).lower() not in TABLE_FUNCTIONS:
                raise _refuse(f"the table function {fn or node.sql(dialect='spark')}() is not allowed")
            continue
        if node.args.get("db") or node.args.get("catalog"):
            raise _refuse(f"the table reference {node.sql(dialect='spark')} names a file, database or catalog")
        if node.name.lower() not in known | ctes:
            raise _refuse(f"{node.name!r} is not a warehouse view")
    return spark_sql


def temp_views(spark) -> list[str]:
    """The temporary views of ``spark``'s session: what a user query may read there (``SHOW VIEWS``;
    ``catalog.listTables`` fails to decode its rows on Spark 4.3)."""
    return [r.viewName for r in spark.sql("SHOW VIEWS").collect() if r.isTemporary]


def bind_on_duckdb(root, query: str, params: dict | None = None) -> None:
    """Bind (not run) the user's DuckDB-dialect ``query`` on a sandboxed DuckDB connection over the same
    warehouse: its functions and tables must be ones DuckDB knows there."""
    import duckdb

    from ..core.errors import QueryRefused
    from .sandbox import check_query, connect

    check_query(query)
    con = connect(root)
    try:
        con.execute(f"EXPLAIN {query}", params or {})
    except duckdb.PermissionException as exc:
        raise QueryRefused(f"{str(exc).splitlines()[0]}; the SQL shell reads only the warehouse's own files") from None
    finally:
        con.close()


def run_guarded(spark, query: str, params: dict | None = None, timeout_s: float | None = None):
    """Run a checked query on ``spark``: (columns, rows). A Spark SQL error becomes
    :class:`shopsim_wh.core.errors.QueryFailed` (exit code 2, the analyser's first line); past ``timeout_s`` (default
    :class:`shopsim_wh.engines.sandbox.Limits`) the session's jobs are cancelled and
    :class:`shopsim_wh.core.errors.QueryLimitExceeded` says so."""
    import threading

    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    from ..core.errors import QueryFailed, QueryLimitExceeded
    from .sandbox import TIMEOUT_ENV, Limits

    limit = timeout_s if timeout_s is not None else Limits.resolve().timeout_s
    fired = threading.Event()

    def stop() -> None:
        fired.set()
        spark.sparkContext.cancelAllJobs()

    timer = threading.Timer(limit, stop) if limit else None
    if timer:
        timer.daemon = True
        timer.start()
    try:
        df = spark.sql(query, args=params or None)
        return df.columns, [tuple(r) for r in df.collect()]
    except (PySparkException, Py4JError) as exc:  # a cancelled job comes back as a Py4JJavaError
        if fired.is_set():
            raise QueryLimitExceeded(f"the query was stopped after its time limit of {limit:g} s on Spark; narrow "
                                     f"it, or raise the limit with --timeout SECONDS or {TIMEOUT_ENV}") from None
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise QueryFailed(f"Spark could not run the query: {first}") from None
    finally:
        if timer:  # joined: a timer thread still alive at exit aborts the process ("exception not rethrown")
            timer.cancel()
            timer.join()
