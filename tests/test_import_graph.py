"""The package tree draws the architecture (issue 29): the graph of every import statement of the package, read
from the source (absolute and relative, at module level or inside a function, under TYPE_CHECKING too), has no
cycle, and each layer imports only from the layers below it."""

from __future__ import annotations

import ast
from pathlib import Path

import shopsim_wh
from shopsim_wh import docs

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
    assert "shopsim_wh.engines.sandbox" in graph["shopsim_wh.analytics.gate"]  # a function-local import is an edge
    graph["shopsim_wh.engines.db"] = {**graph["shopsim_wh.engines.db"], "shopsim_wh.engines.sandbox": 999}
    found = cycles(graph)
    assert found == [["shopsim_wh.engines.db", "shopsim_wh.engines.sandbox"]]
    assert "shopsim_wh.engines.db (line 999) imports shopsim_wh.engines.sandbox" in describe(graph, found[0])


def test_names_spelt_twice_to_avoid_a_cycle_agree():
    """config_import writes a converted config in Config's key order, spelt there because config imports it."""
    from shopsim_wh.core.config import Config
    from shopsim_wh.core.config_import import CONFIG_KEYS

    assert CONFIG_KEYS == tuple(Config.model_fields)


# Bottom to top. A module may import its own layer and the layers before it; `shopsim_wh` (the version) is core.
LAYERS = docs.LAYERS
DEMO_USERS = ("cli", "docs", "testing")  # the product never imports the demo and benchmark generators


def layer(module: str) -> int:
    parts = module.split(".")
    return 0 if len(parts) == 1 else LAYERS.index(parts[1])


def upward_imports(graph: dict[str, dict[str, int]]) -> list[str]:
    bad = []
    for a, edges in sorted(graph.items()):
        for b, line in sorted(edges.items()):
            if layer(b) > layer(a) or (layer(b) == LAYERS.index("demo") and a.split(".")[1] not in DEMO_USERS + ("demo",)):
                bad.append(f"{a} (line {line}) imports {b}")
    return bad


def test_every_module_is_in_a_layer_package():
    mods = [m for m in import_graph() if m != PKG.name]
    assert all(len(m.split(".")) > 1 and m.split(".")[1] in LAYERS for m in mods), \
        [m for m in mods if m.split(".")[1] not in LAYERS]
    top = sorted(p.name for p in PKG.glob("*.py") if p.name != "__init__.py")
    assert top == ["docs.py"]  # everything else lives in a layer package


def test_no_layer_imports_a_layer_above_it():
    bad = upward_imports(import_graph())
    assert not bad, "upward imports (move the shared piece down, or pass a callable):\n" + "\n".join(bad)


def test_the_layer_check_finds_an_upward_import():
    graph = import_graph()
    graph["shopsim_wh.core.schema"] = {**graph["shopsim_wh.core.schema"], "shopsim_wh.store.warehouse": 7}
    graph["shopsim_wh.export.core"] = {**graph["shopsim_wh.export.core"], "shopsim_wh.demo.shop": 9}
    assert upward_imports(graph) == ["shopsim_wh.core.schema (line 7) imports shopsim_wh.store.warehouse",
                                     "shopsim_wh.export.core (line 9) imports shopsim_wh.demo.shop"]


def test_the_old_module_paths_still_import_the_same_modules():
    import importlib
    import warnings

    from shopsim_wh.core.moved import MOVED

    for old, new in sorted(MOVED.items()):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert importlib.import_module(old) is importlib.import_module(new)
        assert any(new in str(w.message) for w in caught) or old in __import__("sys").modules
