"""No import cycles in shopsim_wh (issue 29): the graph of every import statement of the package, read from the
source (absolute and relative, at module level or inside a function, under TYPE_CHECKING too), has no strongly
connected component of more than one module."""

from __future__ import annotations

import ast
from pathlib import Path

import shopsim_wh

PKG = Path(shopsim_wh.__file__).resolve().parent


def modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package's __init__)."""
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {module of the package it imports: line of the first such import}."""
    mods = modules()

    def owner(name: str) -> str | None:  # `from a.b import c`: the module a.b.c, else a.b (c is an attribute)
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for mod, (path, is_pkg) in mods.items():
        edges = graph[mod] = {}
        here = mod if is_pkg else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = here
                    for _ in range(node.level - 1):
                        pkg = pkg.rpartition(".")[0]
                    base = f"{pkg}.{base}" if base else pkg
                names = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                target = owner(name) if name.split(".")[0] == PKG.name else None
                if target and target != mod:
                    edges.setdefault(target, node.lineno)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def describe(graph: dict[str, dict[str, int]], comp: list[str]) -> str:
    inside = set(comp)
    lines = [f"cycle of {len(comp)} modules: {', '.join(comp)}"]
    lines += [f"  {a} (line {line}) imports {b}" for a in comp for b, line in sorted(graph[a].items()) if b in inside]
    return "\n".join(lines)


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 100 and sum(map(len, graph.values())) > 300  # the walk saw the package and its imports
    found = cycles(graph)
    assert not found, "import cycles (move the shared piece to a lower module, or pass a callable):\n" + \
        "\n\n".join(describe(graph, c) for c in found)


def test_the_check_finds_a_cycle_and_names_its_imports():
    """The same check on a small graph with a function-local import closing a loop (as db -> sandbox did)."""
    graph = import_graph()
    assert "shopsim_wh.sandbox" in graph["shopsim_wh.analytics.gate"]  # a function-local import is an edge
    graph["shopsim_wh.db"] = {**graph["shopsim_wh.db"], "shopsim_wh.sandbox": 999}
    found = cycles(graph)
    assert found == [["shopsim_wh.db", "shopsim_wh.sandbox"]]
    assert "shopsim_wh.db (line 999) imports shopsim_wh.sandbox" in describe(graph, found[0])


def test_names_spelt_twice_to_avoid_a_cycle_agree():
    """config_import writes a converted config in Config's key order, spelt there because config imports it."""
    from shopsim_wh.config import Config
    from shopsim_wh.config_import import CONFIG_KEYS

    assert CONFIG_KEYS == tuple(Config.model_fields)
