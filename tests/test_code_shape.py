"""Readable code by rule (issue 29): no function of the package takes more than 7 parameters. Related values
travel as one small value (ExportOptions, IngestOptions, GateOptions, ChatOptions, ...). The typer commands of
``shopsim_wh/cli/`` are exempt: their parameters are the CLI's option declarations."""

from __future__ import annotations

import ast
from pathlib import Path

import shopsim_wh

PKG = Path(shopsim_wh.__file__).resolve().parent
MAX_PARAMETERS = 7


def long_signatures(root: Path = PKG) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        if rel.parts[1] == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
                if len(names) > MAX_PARAMETERS:
                    found.append(f"{rel}:{node.lineno} {node.name}({', '.join(names)})")
    return found


def test_no_function_takes_more_than_seven_parameters():
    found = long_signatures()
    assert not found, f"functions over {MAX_PARAMETERS} parameters (group related ones into a value):\n" + \
        "\n".join(found)


def test_the_scan_sees_a_long_signature(tmp_path):
    pkg = tmp_path / "shopsim_wh"
    (pkg / "export").mkdir(parents=True)
    (pkg / "cli").mkdir()
    (pkg / "export" / "x.py").write_text("def f(a, b, c, d, e, f, g, *, h=1):\n    pass\n"
                                         "class K:\n    def m(self, a, b, c, d, e, f, g):\n        pass\n")
    (pkg / "cli" / "c.py").write_text("def command(a, b, c, d, e, f, g, h, i):\n    pass\n")
    assert long_signatures(pkg) == ["shopsim_wh/export/x.py:1 f(a, b, c, d, e, f, g, h)"]
