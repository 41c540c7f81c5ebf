"""DuckDB SQL of ``sql/`` -> Spark SQL: sqlglot (``read="duckdb"``, ``write="spark"``) after rewriting the
constructs Spark has no form of, on sqlglot's tree:

* ``CREATE MACRO`` (scalar and table): no statement; every call is inlined (parameters substituted, the macro's
  body already inlined itself), in views and in user queries alike;
* ``getvariable('x')`` -> the Spark session variable ``system.session.x`` (declared by ``register``);
* ``CREATE TEMP TABLE`` / ``CREATE VIEW`` -> ``CREATE OR REPLACE TEMPORARY VIEW``;
* ``* REPLACE (...)`` / ``* EXCLUDE (...)`` -> the column list, from the columns Spark reports for the relation;
* JSON, list and string functions DuckDB has and Spark spells otherwise (see :data:`FUNCTIONS` and
  :meth:`Translator._function`).

The docs table (docs/scale.md "Views on Spark") lists each construct with its Spark form.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator

import sqlglot
from sqlglot import exp


class Translator:
    """Translates statements in order; remembers the macros it has seen (so later statements inline them)."""

    def __init__(self, columns_of: Callable[[str], list[str] | None] | None = None):
        self.macros: dict[str, tuple[list[str], exp.Expression, bool]] = {}
        self.columns_of = columns_of
        self._inlined = itertools.count(1)

    # ------------------------------------------------------------------------------------------ statements
    def file(self, text: str) -> Iterator[tuple[str, str]]:
        """(view name, Spark SELECT) for each view/table a file creates; macros are remembered, not emitted."""
        for stmt in sqlglot.parse(text, read="duckdb"):
            if stmt is None:
                continue
            out = self.statement(stmt)
            if out:
                yield out

    def learn_macros(self, texts: list[str]) -> None:
        """Read every macro of ``texts`` first (a view may call a macro of a later file); a macro whose body calls
        one not yet known is read again on the next pass."""
        pending = [s for t in texts for s in sqlglot.parse(t, read="duckdb")
                   if isinstance(s, exp.Create) and str(s.args.get("kind", "")).upper() == "MACRO"]
        names = {s.this.this.name.lower() for s in pending}
        for _ in range(len(pending) + 1):
            later = []
            for s in pending:
                calls = {a.name.lower() for a in s.expression.find_all(exp.Anonymous)} | {
                    t.this.name.lower() for t in s.expression.find_all(exp.Table) if isinstance(t.this, exp.Anonymous)}
                if (calls & names) - set(self.macros) - {s.this.this.name.lower()}:
                    later.append(s)
                else:
                    self.statement(s)
            if not later:
                return
            pending = later
        raise ValueError(f"macros call each other in a cycle: {[s.this.this.name for s in pending]}")

    def statement(self, stmt: exp.Expression) -> tuple[str, str] | None:
        if isinstance(stmt, exp.Create) and str(stmt.args.get("kind", "")).upper() == "MACRO":
            udf = stmt.this
            params = [i.name for i in udf.expressions]
            body = self.rewrite(stmt.expression.copy())
            self.macros[udf.this.name.lower()] = (params, body, isinstance(body, exp.Query))
            return None
        if isinstance(stmt, exp.Create) and str(stmt.args.get("kind", "")).upper() == "TABLE" \
                and isinstance(stmt.this, exp.Schema) and stmt.expression is None:
            # CREATE TEMP TABLE t (c T, ...): an empty relation of those columns (filled by the exporter)
            cols = [exp.alias_(exp.Cast(this=exp.Null(), to=_spark_type(c.args["kind"])), c.name)
                    for c in stmt.this.expressions]
            return stmt.this.this.name, exp.select(*cols).where(exp.false()).sql(dialect="spark")
        if isinstance(stmt, exp.Create) and str(stmt.args.get("kind", "")).upper() in ("VIEW", "TABLE"):
            name = stmt.this.name
            body = self.rewrite(stmt.expression.copy())
            return name, body.sql(dialect="spark")
        raise ValueError(f"cannot translate statement for Spark: {stmt.sql(dialect='duckdb')[:120]}")

    def query(self, sql: str) -> str:
        """A user query (DuckDB dialect, may call the shipped macros) as Spark SQL."""
        stmts = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
        if len(stmts) != 1:
            raise ValueError("give exactly one SQL statement")
        return self.rewrite(stmts[0]).sql(dialect="spark")

    # ------------------------------------------------------------------------------------------ rewriting
    def rewrite(self, tree: exp.Expression) -> exp.Expression:
        """Rewrite a tree (copied first). A handler that replaces a node rewrites the children it keeps itself
        (sqlglot's transform does not descend into a replacement)."""
        return tree.copy().transform(self._node, copy=False)

    def _node(self, node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.CTE) and node.args.get("materialized") is not None:
            node.set("materialized", None)
        if isinstance(node, exp.Select) and any(isinstance(e, exp.Star) and (e.args.get("replace") or e.args.get("except"))
                                                for e in node.expressions):
            return self._expand_star(node)
        if isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous):
            return self._table_macro(node)
        if isinstance(node, exp.Anonymous):
            name = node.name.lower()
            if name in self.macros and not self.macros[name][2]:
                return self._inline(name, node.expressions)
            if name == "getvariable":
                return exp.column(node.expressions[0].name, table="session", db="system")
        handler = HANDLERS.get(type(node).__name__) or (
            HANDLERS.get("fn:" + node.name.lower()) if isinstance(node, exp.Anonymous) else None)
        if handler:
            return handler(self, node)
        return node

    def sub(self, node: exp.Expression | None) -> exp.Expression | None:
        return None if node is None else self.rewrite(node)

    def _inline(self, name: str, args: list[exp.Expression]) -> exp.Expression:
        params, body, _ = self.macros[name]
        if len(args) != len(params):
            raise ValueError(f"macro {name} takes {len(params)} arguments, not {len(args)}")
        values = {p.lower(): self.sub(a) for p, a in zip(params, args, strict=True)}

        def put(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column) and not n.table and n.name.lower() in values:
                return exp.paren(values[n.name.lower()].copy(), copy=False)
            return n

        return body.copy().transform(put)

    def _table_macro(self, node: exp.Table) -> exp.Expression:
        name = node.this.name.lower()
        if name == "json_each":  # json_each(doc) AS j -> a LATERAL over variant_explode, value as JSON text
            q = tmpl(f"SELECT * FROM t, LATERAL (SELECT key, to_json(value) AS value "
                     f"FROM variant_explode(try_parse_json(_0))) AS {node.alias or 'json_each'}",
                     self.sub(node.this.expressions[0]))
            return q.args["joins"][0].this
        if name not in self.macros:
            return node
        sub = _rename_ctes(self._inline(name, node.this.expressions), f"__{name}{next(self._inlined)}")
        return exp.Subquery(this=sub, alias=exp.TableAlias(this=exp.to_identifier(node.alias or name)))

    def _expand_star(self, select: exp.Select) -> exp.Expression:
        """``SELECT * REPLACE (e AS c) / * EXCLUDE (c)`` -> the explicit column list: the relation's columns come
        from Spark (``columns_of`` analyses the same SELECT with a plain ``*``)."""
        star = next(e for e in select.expressions if isinstance(e, exp.Star))
        probe = select.copy()
        probe.set("expressions", [exp.Star()])
        cols = (self.columns_of or duckdb_columns)(probe.sql(dialect="duckdb"))
        replace = {a.alias.lower(): a for a in star.args.get("replace") or []}
        drop = {c.name.lower() for c in star.args.get("except") or []}
        items = [exp.alias_(self.sub(replace[c.lower()].this), c) if c.lower() in replace else exp.column(c)
                 for c in cols if c.lower() not in drop]
        out = select.copy()
        out.set("expressions", [self.sub(e) if e is not star else None for e in select.expressions])
        exprs = []
        for e in select.expressions:
            exprs.extend(items if e is star else [self.sub(e)])
        for key in ("from_", "from", "joins", "where", "group", "having", "qualify", "order", "limit", "with_", "with"):
            if key in out.args and out.args[key] is not None:
                val = out.args[key]
                out.set(key, [self.sub(v) for v in val] if isinstance(val, list) else self.sub(val))
        out.set("expressions", exprs)
        return out


def _rename_ctes(query: exp.Expression, suffix: str) -> exp.Expression:
    """The CTEs of an inlined table macro renamed ``<name><suffix>`` (with every reference): Spark's writer lifts
    nested CTEs to the statement's WITH, where two macros' ``turns`` or ``final`` would collide
    (``DUPLICATED_CTE_NAMES``)."""
    names = {c.alias_or_name.lower() for c in query.find_all(exp.CTE)}
    if not names:
        return query
    for cte in query.find_all(exp.CTE):
        cte.set("alias", exp.TableAlias(this=exp.to_identifier(cte.alias_or_name + suffix)))
    for t in query.find_all(exp.Table):
        if not t.args.get("db") and isinstance(t.this, exp.Identifier) and t.name.lower() in names:
            if t.args.get("alias") is None:  # columns qualified by the old name keep resolving
                t.set("alias", exp.TableAlias(this=exp.to_identifier(t.name)))
            t.set("this", exp.to_identifier(t.name + suffix))
    return query


_ORACLE: list = []


def duckdb_columns(query: str) -> list[str]:
    """The column names of a DuckDB query over the shipped views, bound on an empty warehouse (no data read):
    the schema oracle for star expansion."""
    return [r[0] for r in oracle().execute(f"DESCRIBE {query}").fetchall()]


def oracle():
    """A DuckDB connection with every shipped view (exports included) over an empty snapshot."""
    if not _ORACLE:
        import duckdb

        from ..store.warehouse import Snapshot, Warehouse
        from .db import install_exports, install_views

        con = duckdb.connect()
        install_views(con, Warehouse("/nonexistent-shopsim-wh"), Snapshot())
        install_exports(con)
        _ORACLE.append(con)
    return _ORACLE[0]


def tmpl(sql: str, *args: exp.Expression) -> exp.Expression:
    """A Spark-dialect template with placeholders ``_0``, ``_1``, ... replaced by (already rewritten) trees."""
    tree = sqlglot.parse_one(sql, read="spark")

    def put(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and not n.table and re.fullmatch(r"_\d+", n.name):
            return args[int(n.name[1:])].copy()
        return n

    return tree.transform(put)


HANDLERS: dict[str, Callable[[Translator, exp.Expression], exp.Expression]] = {}


def handles(*names: str):
    def deco(fn):
        for n in names:
            HANDLERS[n] = fn
        return fn

    return deco


def _is_json_type(dt: exp.Expression | None) -> bool:
    return isinstance(dt, exp.DataType) and dt.this == exp.DataType.Type.JSON


def _spark_type(dt: exp.DataType) -> exp.DataType:
    """DuckDB JSON is text on Spark (STRING; JSON[] -> ARRAY<STRING>)."""
    dt = dt.copy()
    for n in list(dt.walk()):
        if _is_json_type(n):
            n.replace(exp.DataType.build("STRING"))
    return dt


@handles("Cast", "TryCast")
def _cast(tr: Translator, node: exp.Cast) -> exp.Expression:
    inner = tr.sub(node.this)
    if _is_json_type(node.to):  # CAST(x AS JSON): the text itself
        return inner
    if node.to.this == exp.DataType.Type.ARRAY and not isinstance(node.this, exp.Array | exp.ArrayAgg) and (
            _json_producer(node.this) or isinstance(node.this, exp.Column)):  # CAST(json AS T[]): parse the text
        return tmpl("from_json(_0, _1)", inner, exp.Literal.string(_spark_type(node.to).sql(dialect="spark")))
    node = node.copy()
    node.set("this", inner)
    node.set("to", _spark_type(node.to))
    return node


@handles("In")
def _in(tr: Translator, node: exp.In) -> exp.Expression:
    """``(a, b) IN (SELECT (x, y) FROM t)``: DuckDB compares the row with a one-column row of a row; Spark wants
    the subquery's columns themselves (``SELECT x, y``)."""
    query = node.args.get("query")
    sel = query.this if isinstance(query, exp.Subquery) else query
    if isinstance(sel, exp.Select) and len(sel.expressions) == 1 and isinstance(sel.expressions[0], exp.Tuple):
        node = node.copy()
        sel = (node.args["query"].this if isinstance(node.args["query"], exp.Subquery) else node.args["query"])
        sel.set("expressions", [e.copy() for e in sel.expressions[0].expressions])
        node.set("this", tr.sub(node.this))
        node.set("query", tr.sub(node.args["query"]))
    return node


@handles("ParseJSON")
def _json(tr: Translator, node: exp.Expression) -> exp.Expression:
    return tr.sub(node.this)


def _json_producer(node: exp.Expression) -> bool:
    """Does this DuckDB expression yield JSON (to embed as JSON, not as a quoted string)?"""
    if isinstance(node, exp.Paren):
        return _json_producer(node.this)
    if isinstance(node, exp.Cast):
        return _is_json_type(node.to)
    if isinstance(node, exp.Anonymous):
        return node.name.lower() in ("to_json", "json_merge_patch")
    return isinstance(node, exp.JSONObject | exp.ParseJSON | exp.JSONExtract)


def _variant(tr: Translator, node: exp.Expression) -> exp.Expression:
    if _json_producer(node):
        return tmpl("try_parse_json(_0)", tr.sub(node))
    return tmpl("CAST(_0 AS VARIANT)", tr.sub(node))


@handles("fn:to_json")
def _to_json(tr: Translator, node: exp.Anonymous) -> exp.Expression:
    arg = node.expressions[0]
    if isinstance(arg, exp.Struct | exp.Array | exp.ArrayAgg):
        return tmpl("to_json(_0)", tr.sub(arg))
    return tmpl("to_json(_0)", _variant(tr, arg))


@handles("JSONObject")
def _json_object(tr: Translator, node: exp.JSONObject) -> exp.Expression:
    args = []
    for kv in node.expressions:
        args += [kv.this.copy(), _variant(tr, kv.expression)]
    return tmpl("to_json(_0)", exp.Anonymous(this="named_struct", expressions=args))


def _path(path: exp.Expression) -> exp.Expression:
    """DuckDB's JSON path ``$."key"`` -> ``$['key']`` (a literal path; others are kept)."""
    if isinstance(path, exp.Literal) and path.is_string:
        text = re.sub(r'\."((?:[^"\\]|\\.)*)"', lambda m: "['" + m.group(1).replace("'", "\\'") + "']", path.this)
        if not text.startswith("$"):
            text = "$." + text
        return exp.Literal.string(text)
    if isinstance(path, exp.Literal):  # an integer index
        return exp.Literal.string(f"$[{path.this}]")
    parts = _concat_parts(path)
    if len(parts) >= 3 and all(isinstance(parts[i], exp.Literal) for i in (0, -1)) \
            and parts[0].this.endswith('."') and parts[-1].this.startswith('"'):
        # '$."' || key || '"' (a computed quoted key) -> '$[\'' || key || '\']'
        parts = [exp.Literal.string(parts[0].this[:-2] + "['"), *parts[1:-1],
                 exp.Literal.string("']" + parts[-1].this[1:])]
        out = parts[0]
        for p in parts[1:]:
            out = exp.DPipe(this=out, expression=p)
        return out
    return path


def _concat_parts(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.DPipe):
        return _concat_parts(node.this) + _concat_parts(node.expression)
    if isinstance(node, exp.Paren):
        return _concat_parts(node.this)
    return [node]


def _json_path_args(tr: Translator, node: exp.Expression) -> tuple[exp.Expression, exp.Expression]:
    path = node.expression
    if isinstance(path, exp.JSONPath):
        path = exp.Literal.string(path.sql(dialect="duckdb").strip("'"))
    return tr.sub(node.this), _path(tr.sub(path))


@handles("JSONExtract")
def _json_extract(tr: Translator, node: exp.Expression) -> exp.Expression:
    if isinstance(node.expression, exp.Array):  # json_extract(doc, ['$.a', '$.b']): the list of each path's value
        return exp.Array(expressions=[_json_extract(tr, exp.JSONExtract(this=node.this, expression=p))
                                      for p in node.expression.expressions])
    doc, path = _json_path_args(tr, node)
    # a string value re-quoted from the VARIANT; anything else as get_json_object returns it (the source's key
    # order and number spelling, as DuckDB keeps them; VARIANT would sort keys and respell numbers)
    if isinstance(path, exp.Literal) and "[*]" in path.this:  # a wildcard: only get_json_object has it
        return tmpl("get_json_object(_0, _1)", doc, path)
    return tmpl("""CASE schema_of_variant(variant_get(try_parse_json(_0), _1))
        WHEN 'STRING' THEN to_json(variant_get(try_parse_json(_0), _1)) WHEN 'VOID' THEN 'null'
        ELSE get_json_object(_0, _1) END""", doc, path)


@handles("fn:json_exists")
def _json_exists(tr: Translator, node: exp.Anonymous) -> exp.Expression:
    """``json_exists(doc, path)``: ``json_extract(doc, path) IS NOT NULL`` (a JSON null there exists: 'null')."""
    doc, path = node.expressions
    return tmpl("_0 IS NOT NULL", _json_extract(tr, exp.JSONExtract(this=doc, expression=path)))


@handles("JSONExtractScalar")
def _json_extract_string(tr: Translator, node: exp.Expression) -> exp.Expression:
    """``->>`` / json_extract_string -> get_json_object (a string unquoted, anything else as JSON text)."""
    doc, path = _json_path_args(tr, node)
    return tmpl("get_json_object(_0, _1)", doc, path)


@handles("JSONType")
def _json_type(tr: Translator, node: exp.Expression) -> exp.Expression:
    doc = tmpl("try_parse_json(_0)", tr.sub(node.this))
    if node.args.get("expression") is not None:
        doc = tmpl("variant_get(_0, _1)", doc, _path(tr.sub(node.expression)))
    return tmpl("""CASE
        WHEN _0 IS NULL THEN NULL
        WHEN schema_of_variant(_0) LIKE 'OBJECT%' THEN 'OBJECT'
        WHEN schema_of_variant(_0) LIKE 'ARRAY%' THEN 'ARRAY'
        WHEN schema_of_variant(_0) = 'STRING' THEN 'VARCHAR'
        WHEN schema_of_variant(_0) = 'VOID' THEN 'NULL'
        WHEN schema_of_variant(_0) = 'BOOLEAN' THEN 'BOOLEAN'
        WHEN schema_of_variant(_0) IN ('BIGINT', 'INT', 'SMALLINT', 'TINYINT')
            THEN CASE WHEN variant_get(_0, '$', 'bigint') >= 0 THEN 'UBIGINT' ELSE 'BIGINT' END
        ELSE 'DOUBLE' END""", doc)


@handles("fn:json_valid")
def _json_valid(tr: Translator, node: exp.Anonymous) -> exp.Expression:
    return tmpl("CASE WHEN _0 IS NULL THEN NULL ELSE try_parse_json(_0) IS NOT NULL END", tr.sub(node.expressions[0]))


def _spec_type(spec) -> str:
    """A DuckDB JSON structure (json_transform / from_json) as a Spark DDL type."""
    if isinstance(spec, list):
        return f"ARRAY<{_spec_type(spec[0])}>"
    if isinstance(spec, dict):
        return "STRUCT<" + ", ".join(f"`{k}`: {_spec_type(v)}" for k, v in spec.items()) + ">"
    return {"VARCHAR": "STRING", "JSON": "STRING", "INTEGER": "INT", "UBIGINT": "BIGINT"}.get(spec.upper(), spec.upper())


@handles("FromJson", "fn:json_transform", "fn:from_json")
def _from_json(tr: Translator, node: exp.Expression) -> exp.Expression:
    import json

    args = node.expressions if isinstance(node, exp.Anonymous) else [node.this, node.expression]
    spec = json.loads(args[1].this)
    return tmpl("from_json(_0, _1)", tr.sub(args[0]), exp.Literal.string(_spec_type(spec)))


def _ordered_list(tr: Translator, value: exp.Expression, order: list[exp.Ordered],
                  where: exp.Expression | None = None) -> exp.Expression:
    """list(v ORDER BY k1, k2 DESC) -> the values of collect_list(named_struct(keys, v)) sorted by a comparator
    that follows DuckDB's order (NULLS LAST by default); NULL values are kept (collect_list drops NULLs only)."""
    fields: list[exp.Expression] = []
    for i, o in enumerate(order):
        fields += [exp.Literal.string(f"k{i}"), tr.sub(o.this)]
    fields += [exp.Literal.string("v"), tr.sub(value)]
    cmp = "0"
    for i, o in reversed(list(enumerate(order))):
        lt, gt = ("1", "-1") if o.args.get("desc") else ("-1", "1")
        nl = "-1" if o.args.get("nulls_first") else "1"
        cmp = (f"CASE WHEN l.k{i} IS NULL AND r.k{i} IS NULL THEN {cmp} WHEN l.k{i} IS NULL THEN {nl} "
               f"WHEN r.k{i} IS NULL THEN -{nl} WHEN l.k{i} < r.k{i} THEN {lt} WHEN l.k{i} > r.k{i} THEN {gt} "
               f"ELSE {cmp} END").replace("--", "")
    item = exp.Anonymous(this="named_struct", expressions=fields)
    if where is not None:
        item = tmpl("CASE WHEN _0 THEN _1 END", tr.sub(where), item)
    return tmpl(f"transform(array_sort(collect_list(_0), (l, r) -> {cmp}), s -> s.v)", item)


@handles("Filter")
def _filter(tr: Translator, node: exp.Filter) -> exp.Expression:
    """agg(...) FILTER (WHERE c): Spark has the clause, but the lists rewritten above are no longer aggregates at
    the top, so the condition moves into collect_list (which skips the NULL of a filtered-out row)."""
    agg, cond = node.this, node.expression.this
    if isinstance(agg, exp.ArrayAgg):
        if isinstance(agg.this, exp.Order):
            return _ordered_list(tr, agg.this.this, agg.this.expressions, cond)
        return _ordered_list(tr, agg.this, [], cond)
    if isinstance(agg, exp.GroupConcat):
        sep = tr.sub(agg.args.get("separator")) or exp.Literal.string(",")
        value, order = (agg.this.this, agg.this.expressions) if isinstance(agg.this, exp.Order) else (agg.this, [])
        return _join(_ordered_list(tr, value, order, cond), sep)
    node = node.copy()
    node.set("this", tr.sub(agg))
    node.set("expression", tr.sub(node.expression))
    return node


@handles("fn:lgamma")
def _lgamma(tr: Translator, node: exp.Anonymous) -> exp.Expression:
    """Spark has no lgamma; for the positive integers the pass@k estimators pass (counts), lgamma(x) = ln((x-1)!)
    = the sum of ln(i) for i in 1..x-1."""
    return tmpl("aggregate(sequence(1, greatest(CAST(_0 AS BIGINT) - 1, 1)), CAST(0 AS DOUBLE), (acc, i) -> acc + ln(i))",
                tr.sub(node.expressions[0]))


@handles("First")
def _first(tr: Translator, node: exp.First) -> exp.Expression:
    """DuckDB's ordered ``first(v ORDER BY k [DESC])`` (the value, NULL or not, of the row first in that order) ->
    ``min_by(v, k)`` / ``max_by(v, k)``; a plain ``first(v)`` is left as it is."""
    if not isinstance(node.this, exp.Order):
        node = node.copy()
        node.set("this", tr.sub(node.this))
        return node
    if len(node.this.expressions) != 1:  # min_by/max_by take one key; a struct key would change NULL ordering
        raise ValueError(f"first(... ORDER BY ...) with {len(node.this.expressions)} sort keys has no Spark form here: "
                         "order by one key (e.g. a computed composite) in the view's SQL")
    (key,) = node.this.expressions
    fn = "max_by" if key.args.get("desc") else "min_by"
    return tmpl(f"{fn}(_0, _1)", tr.sub(node.this.this), tr.sub(key.this))


@handles("fn:timezone")
def _timezone(tr: Translator, node: exp.Anonymous) -> exp.Expression:
    """``timezone(ts)`` (the session time zone's UTC offset at ts, in seconds) -> the difference between ts rendered
    in the session zone and ts itself."""
    (ts,) = node.expressions
    return tmpl("(unix_micros(from_utc_timestamp(_0, current_timezone())) - unix_micros(_0)) DIV 1000000", tr.sub(ts))


_STRFTIME = {"%Y": "yyyy", "%m": "MM", "%d": "dd", "%H": "HH", "%M": "mm", "%S": "ss", "%f": "SSSSSS", "%%": "%"}


@handles("TimeToStr")
def _strftime(tr: Translator, node: exp.TimeToStr) -> exp.Expression:
    """``strftime(ts, '%Y-%m-%dT%H:%M:%S')`` -> ``date_format(ts, "yyyy-MM-dd'T'HH:mm:ss")``: sqlglot leaves the
    ``T`` unquoted, which Java's formatter refuses; literal text is quoted here, ``%f`` is microseconds."""
    fmt = node.args["format"]
    if not isinstance(fmt, exp.Literal):
        raise ValueError("strftime with a computed format has no Spark form here")
    out = []
    for part in re.split(r"(%.)", fmt.this):
        if part in _STRFTIME:
            out.append(_STRFTIME[part])
        elif part.startswith("%"):
            raise ValueError(f"strftime {part} has no Spark form here (add it to spark_sql._STRFTIME)")
        elif part:
            out.append("'" + part.replace("'", "''") + "'" if re.search(r"[A-Za-z']", part) else part)
    return tmpl("date_format(_0, _1)", tr.sub(node.this), exp.Literal.string("".join(out)))


@handles("Select")
def _select(tr: Translator, node: exp.Select) -> exp.Expression:
    """``unnest(h) AS a, generate_subscripts(h, 1) AS pos`` (two generators, Spark allows one) ->
    ``inline(transform(h, (x, i) -> named_struct('a', x, 'pos', i + 1)))``; ``QUALIFY c`` ->
    ``SELECT <columns> FROM (SELECT ..., c AS __keep) WHERE __keep`` (the columns from the schema oracle)."""
    named = {w.this.name: w for w in node.args.get("windows") or []}
    refined = [w for w in node.find_all(exp.Window) if w.args.get("spec") is not None
               and w.args.get("alias") is not None and w.args["alias"].name in named]
    if refined:  # OVER (w ROWS ...): Spark cannot refine a named window; spell the window out
        node = node.copy()
        for w in node.find_all(exp.Window):
            base = named.get(w.args["alias"].name) if w.args.get("alias") is not None else None
            if base is not None and w.args.get("spec") is not None:
                w.set("alias", None)
                w.set("partition_by", [p.copy() for p in base.args.get("partition_by") or []])
                w.set("order", base.args["order"].copy() if base.args.get("order") else None)
    if node.args.get("qualify") is not None:
        inner = node.copy()
        cond = inner.args["qualify"].this
        inner.set("qualify", None)
        cols = (tr.columns_of or duckdb_columns)(inner.sql(dialect="duckdb"))
        inner.set("expressions", [*inner.expressions, exp.alias_(cond, "__keep")])
        outer = exp.select(*[exp.column(c) for c in cols]).from_(exp.Subquery(
            this=tr.sub(inner), alias=exp.TableAlias(this=exp.to_identifier("__q")))).where(exp.column("__keep"))
        return outer
    subs = [e for e in node.expressions if isinstance(e.unalias(), exp.Anonymous)
            and e.unalias().name.lower() == "generate_subscripts"]
    if not subs:
        return node
    sub = subs[0]
    arr = sub.unalias().expressions[0]
    unn = next(e for e in node.expressions if isinstance(e.unalias(), exp.Unnest | exp.Explode)
               and (e.unalias().expressions or [e.unalias().this])[0] == arr)
    gen = tmpl(f"inline(transform(_0, (x, i) -> named_struct('{unn.alias}', x, '{sub.alias}', i + 1)))", tr.sub(arr))
    out = node.copy()
    keep = [tr.sub(e) for e in node.expressions if e is not sub and e is not unn]
    for key, val in list(out.args.items()):
        if key != "expressions" and isinstance(val, exp.Expression):
            out.set(key, tr.sub(val))
    out.set("expressions", [*keep, gen])
    return out


@handles("ArrayAgg")
def _list(tr: Translator, node: exp.ArrayAgg) -> exp.Expression:
    if isinstance(node.this, exp.Order):
        return _ordered_list(tr, node.this.this, node.this.expressions)
    return tmpl("transform(collect_list(named_struct('v', _0)), s -> s.v)", tr.sub(node.this))


@handles("GroupConcat")
def _string_agg(tr: Translator, node: exp.GroupConcat) -> exp.Expression:
    sep = tr.sub(node.args.get("separator")) or exp.Literal.string(",")
    if isinstance(node.this, exp.Order):
        return _join(_ordered_list(tr, node.this.this, node.this.expressions), sep)
    return _join(tmpl("collect_list(_0)", tr.sub(node.this)), sep)


def _join(values: exp.Expression, sep: exp.Expression) -> exp.Expression:
    """string_agg over no (non-NULL) value is NULL on DuckDB; array_join of an empty array is ''."""
    return tmpl("CASE WHEN size(filter(_0, x -> x IS NOT NULL)) = 0 THEN NULL ELSE array_join(_0, _1) END", values, sep)


@handles("Literal")
def _literal(tr: Translator, node: exp.Literal) -> exp.Expression:
    """A decimal literal (1.0) is DECIMAL on both engines, but DuckDB's avg/division of DECIMAL give DOUBLE while
    Spark keeps DECIMAL (avg(1.0) rounds to 5 places): on Spark such literals are DOUBLE."""
    if not node.is_string and "." in node.this:
        return exp.Cast(this=node.copy(), to=exp.DataType.build("DOUBLE"))
    return node


@handles("Bracket")
def _bracket(tr: Translator, node: exp.Bracket) -> exp.Expression:
    """l[i] (1-based on DuckDB, NULL out of range) -> try_element_at(l, i) (also NULL out of range under ANSI)."""
    idx = node.expressions[0]
    if len(node.expressions) != 1 or (isinstance(idx, exp.Literal) and idx.is_string):
        return node
    one = exp.Literal.number(int(idx.this) + 1) if isinstance(idx, exp.Literal) else exp.Add(
        this=tr.sub(idx), expression=exp.Literal.number(1))
    return tmpl("try_element_at(_0, _1)", tr.sub(node.this), one)


@handles("Length")
def _length(tr: Translator, node: exp.Length) -> exp.Expression:
    """DuckDB len()/length() of a list -> size(); of text -> length()."""
    arg = node.this
    if isinstance(arg, exp.Coalesce) and any(isinstance(a, exp.Array) for a in arg.expressions):
        return tmpl("size(_0)", tr.sub(arg))
    if isinstance(arg, exp.Dot | exp.Column) and "call" in arg.sql().lower():
        return tmpl("size(_0)", tr.sub(arg))
    return tmpl("length(_0)", tr.sub(arg))


@handles("Window")
def _window(tr: Translator, node: exp.Window) -> exp.Expression:
    """string_agg(x, sep) / list(x) OVER (...) -> array_join(collect_list(x) OVER (...), sep): the lists rewritten
    above are no longer aggregates at the top, so the window goes onto collect_list (which follows the window's
    order within the frame)."""
    agg = node.this
    if not isinstance(agg, exp.GroupConcat | exp.ArrayAgg) or isinstance(agg.this, exp.Order):
        return node
    win = node.copy()
    win.set("this", tmpl("collect_list(_0)", tr.sub(agg.this)))
    for key in ("partition_by", "order"):
        val = win.args.get(key)
        if val is not None:
            win.set(key, [tr.sub(v) for v in val] if isinstance(val, list) else tr.sub(val))
    if isinstance(agg, exp.ArrayAgg):
        return win
    return _join(win, tr.sub(agg.args.get("separator")) or exp.Literal.string(","))


@handles("fn:list_reduce")
def _list_reduce(tr: Translator, node: exp.Anonymous) -> exp.Expression:
    """list_reduce(l, lambda acc, x: f, init) -> aggregate(l, init, (acc, x) -> f) (export_agent_tools' enum edits)."""
    if len(node.expressions) != 3:
        raise ValueError("list_reduce without an initial value has no Spark form here: pass one (aggregate needs it)")
    values, fn, init = node.expressions
    return tmpl("aggregate(_0, _1, _2)", tr.sub(values), tr.sub(init), tr.sub(fn))


@handles("fn:json_array_length", "JSONArrayLength")
def _json_array_length(tr: Translator, node: exp.Expression) -> exp.Expression:
    """json_array_length(doc, path) -> json_array_length(get_json_object(doc, path))."""
    args = node.expressions if isinstance(node, exp.Anonymous) else [node.this, node.args.get("expression")]
    args = [a for a in args if a is not None]
    doc = tr.sub(args[0])
    if len(args) > 1:
        doc = tmpl("get_json_object(_0, _1)", doc, _path(tr.sub(args[1])))
    return tmpl("json_array_length(_0)", doc)


@handles("ToMap")
def _map(tr: Translator, node: exp.Expression) -> exp.Expression:
    """MAP {} (an empty map literal) -> map()."""
    if isinstance(node.this, exp.Struct) and not node.this.expressions:
        return exp.Anonymous(this="map", expressions=[])
    return node


@handles("Struct")
def _struct(tr: Translator, node: exp.Struct) -> exp.Expression:
    """{'k': v} / struct_pack(k := v) -> named_struct('k', v)."""
    args: list[exp.Expression] = []
    for e in node.expressions:
        if isinstance(e, exp.PropertyEQ | exp.Slice | exp.EQ):
            key, val = e.this, e.expression
        elif isinstance(e, exp.Alias):
            key, val = e.args["alias"], e.this
        else:
            return node
        args += [exp.Literal.string(key.name if not isinstance(key, exp.Literal) else key.this), tr.sub(val)]
    return exp.Anonymous(this="named_struct", expressions=args)
