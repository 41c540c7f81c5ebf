"""What an export reads: the run scope (with the test-split refusal), the bound parameters, the --where check,
and the decontamination record against the split manifests."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import duckdb

from ..core.errors import TestSplitGuard
from .registry import ExportError, Kind

PARAMS = ("export_window", "export_max_tokens", "export_include_reasoning", "export_include_persona", "export_gamma",
          "export_min_margin", "export_min_step_margin")
SHOP_SOURCES = ("shopsim-wh-runner", "shopsimrl-v4")  # sources whose task ids are the split manifests' ids


def bind_params(con: duckdb.DuckDBPyConnection, values: dict) -> None:
    """``SET VARIABLE name = ?`` for every export parameter (bound, never spliced); unset ones become NULL."""
    for name in PARAMS:
        con.execute(f"SET VARIABLE {name} = ?", [values.get(name)])


def select_runs(con: duckdb.DuckDBPyConnection, runs: Sequence[str] | None, experiment: str | None,
                allow_test: bool) -> list[dict]:
    """Fill TEMP TABLE export_scope and return the selected runs; refuse test-split runs without allow_test."""
    rows = con.execute("""
        SELECT r.run_id, r.experiment, r.fingerprint, r.source_format, r.split, r.split_manifest_hash, r.config,
               coalesce(r.split = 'test', false) OR coalesce(t.has_test, false) AS has_test
        FROM runs AS r
        LEFT JOIN (SELECT run_id, bool_or(split = 'test') AS has_test FROM episodes GROUP BY run_id) AS t
            ON t.run_id = r.run_id
        ORDER BY r.run_id""").fetchall()
    cols = ("run_id", "experiment", "fingerprint", "source_format", "split", "split_manifest_hash", "config", "has_test")
    every = [dict(zip(cols, r, strict=True)) for r in rows]
    chosen = every
    if runs:
        known = {r["run_id"] for r in every}
        unknown = [r for r in runs if r not in known]
        if unknown:
            raise ExportError(f"no run {', '.join(map(repr, unknown))} in this warehouse; "
                              "list the runs with `shopsim-wh runs` (or query the `runs` view)")
        chosen = [r for r in chosen if r["run_id"] in set(runs)]
    if experiment is not None:
        chosen = [r for r in chosen if r["experiment"] == experiment]
        if not chosen:
            raise ExportError(f"no run of experiment {experiment!r} (within --runs) in this warehouse; "
                              "check the name with `shopsim-wh runs`")
    test = [r["run_id"] for r in chosen if r["has_test"]]
    if test and not allow_test:
        raise TestSplitGuard(
            f"run(s) {', '.join(test)} hold test-split episodes; an export must not leak the test split into "
            "training data. Choose other runs with --runs / --experiment, or pass --allow-test for an evaluation export")
    con.execute("CREATE OR REPLACE TEMP TABLE export_scope (run_id VARCHAR)")
    if chosen:
        con.executemany("INSERT INTO export_scope VALUES (?)", [[r["run_id"]] for r in chosen])
    return chosen


def _check_where(expr: str) -> str:
    """The one gate a --where expression passes before it reaches SQL: exactly one expression (the SQL
    sandbox's rule: no ';', no comments, no unbalanced parentheses, no clause around it), returned
    parenthesised; :func:`where_clause` then allows only the kind's filter columns and no subquery."""
    from ..engines.sandbox import check_expression

    return check_expression(expr, "--where")


def _nodes(node) -> Iterable[dict]:
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _nodes(v)
    elif isinstance(node, list):
        for v in node:
            yield from _nodes(v)


def where_clause(con: duckdb.DuckDBPyConnection, kind: Kind, where: str | None) -> tuple[str | None, bool]:
    """(the boolean expression to apply, whether it is the kind's default). A user expression may name only the
    kind's filter columns (checked on DuckDB's parse tree) and may hold no subquery."""
    if where is None:
        return kind.default_where, kind.default_where is not None
    expr = _check_where(where)
    tree = json.loads(con.execute("SELECT json_serialize_sql(?)", ["SELECT 1 WHERE " + expr]).fetchone()[0])
    if tree.get("error") or len(tree.get("statements", [])) != 1:
        raise ExportError(f"--where {expr!r} does not parse: {tree.get('error_message', 'not one expression')}; "
                          f"write a boolean SQL expression over: {', '.join(kind.filters)}")
    nodes = list(_nodes(tree["statements"][0]["node"].get("where_clause")))
    if any(n.get("class") == "SUBQUERY" for n in nodes):
        raise ExportError(f"--where {expr!r} holds a subquery; use only the filter columns: {', '.join(kind.filters)}")
    names = {n["column_names"][-1] for n in nodes if n.get("class") == "COLUMN_REF"}
    unknown = sorted(names - set(kind.filters))
    if unknown:
        raise ExportError(f"--where names {', '.join(unknown)}, not a filter column of {kind.name}; "
                          f"use: {', '.join(kind.filters)}")
    return expr, False


# Filter columns that, in every kind whose batches are episodes, hold their episode's value from
# export_episode_facts (tests/test_export_pushdown.py checks each kind's rows against it).
EPISODE_FACTS = ("status", "reward", "r_success", "r_strict", "r_loose", "success", "source_format", "split",
                 "experiment", "task_id")


def pushdown(con: duckdb.DuckDBPyConnection, kind: Kind, expr: str | None) -> tuple[str | None, bool]:
    """The part of a --where (or default) expression an export can apply to episodes before building any row:
    the top-level AND terms that name only :data:`EPISODE_FACTS` columns, for a kind whose rows each depend on one
    episode (``batch: episode``; a kind comparing a task's rollouts needs the others), and whether that is the
    whole expression; (None, False) when no term qualifies. Exact: a row passes such a term iff its episode does,
    and the whole expression is still applied to the rows."""
    if expr is None or kind.batch != "episode":
        return None, False
    tree = json.loads(con.execute("SELECT json_serialize_sql(?)", ["SELECT 1 WHERE " + expr]).fetchone()[0])
    node = tree["statements"][0]["node"]
    where = node["where_clause"]
    terms = where["children"] if where.get("type") == "CONJUNCTION_AND" else [where]
    facts = set(EPISODE_FACTS) & set(kind.filters)

    def episode_level(term: dict) -> bool:
        refs = [n for n in _nodes(term) if n.get("class") == "COLUMN_REF"]
        return bool(refs) and all(n["column_names"][-1] in facts for n in refs)

    keep = [t for t in terms if episode_level(t)]
    if not keep:
        return None, False
    node["where_clause"] = keep[0] if len(keep) == 1 else {**where, "children": keep}
    text = con.execute("SELECT json_deserialize_sql(?::JSON)", [json.dumps(tree)]).fetchone()[0]
    prefix = "SELECT 1 WHERE "
    if not text.startswith(prefix):  # DuckDB spells it otherwise: push nothing rather than guess
        return None, False
    return "(" + text[len(prefix):] + ")", len(keep) == len(terms)


def heldout_tasks(selected: list[dict]) -> tuple[dict[str, set[int]], list[dict]]:
    """For each shop run, the val/test task ids of its split manifest (identified by hash; the embedded
    simulator's frozen file when the config names none), and the manifests used."""
    from ..core.splits import load_split_manifest

    out: dict[str, set[int]] = {}
    used: dict[str, dict] = {}
    for r in selected:
        if r["source_format"] not in SHOP_SOURCES:
            continue
        path = None
        try:
            path = (json.loads(r["config"] or "{}").get("tasks") or {}).get("split_manifest")
        except (ValueError, AttributeError):
            pass
        try:
            m = load_split_manifest(path)
        except Exception as exc:  # noqa: BLE001 - an unreadable manifest is recorded, not fatal
            used[str(path)] = {"path": path, "error": str(exc)}
            continue
        if r["split_manifest_hash"] and r["split_manifest_hash"] != m.content_hash:
            used[str(path)] = {"path": path, "error": f"hash {m.content_hash} differs from the run's {r['split_manifest_hash']}"}
            continue
        used[m.content_hash] = {"path": path, "version": m.version, "hash": m.content_hash}
        out[r["run_id"]] = {t for s in ("val", "test") if s in m.splits for t in m.splits[s]}
    return out, sorted(used.values(), key=lambda d: json.dumps(d, sort_keys=True))


def decontamination(selected: list[dict], splits_seen: set[str | None], tasks_seen: set[tuple[str, int]]) -> dict:
    """The manifest's decontamination record: is this a train-only export, and does any val/test task of the
    runs' split manifests appear in it."""
    heldout, manifests = heldout_tasks(selected)
    leaked = sorted({(run, t) for run, t in tasks_seen if t in heldout.get(run, ())})
    train_only = splits_seen <= {"train", None}
    return {
        "splits_exported": sorted(s if s is not None else "(none)" for s in splits_seen),
        "train_only": train_only,
        "split_manifests": manifests,
        "shop_tasks_checked": len({t for run, t in tasks_seen if run in heldout}),
        "heldout_tasks_found": [{"run_id": r, "task_id": t} for r, t in leaked[:50]],
        "clean": train_only and not leaked,
    }
