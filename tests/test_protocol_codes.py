"""One vocabulary of protocol-error codes: what the runtime and the model client emit (read from their source),
what protocol_codes.py declares, what the SQL taxonomy labels."""

from __future__ import annotations

import ast
import inspect

import pytest

from shopsim_wh.core import protocol_codes
from shopsim_wh.core.protocol_codes import ALL, CODES, POLICY, PROTOCOL, SQL_FILE, protocol_codes_sql
from shopsim_wh.engines.db import connect
from shopsim_wh.rollout import model, runtime
from shopsim_wh.rollout.model import parse_response

PASSED_ON = (ast.Name, ast.Subscript)


def emitted_codes(module) -> dict[str, str]:
    """code -> kind for every code ``module`` emits, found in its source: a ``{"code": X}`` dict, or the ``code``
    argument of a call to one of its functions that takes one (``reject(X, ..., policy=True)`` is a policy code).
    X is a string literal or a ``protocol_codes`` constant (a variable or ``error["code"]`` passes one on)."""
    tree = ast.parse(inspect.getsource(module))
    takes_code = {f.name: [a.arg for a in f.args.args] for f in ast.walk(tree)
                  if isinstance(f, ast.FunctionDef) and any(a.arg == "code" for a in f.args.args)}

    def value(node) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        assert isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name), ast.unparse(node)
        assert getattr(module, node.value.id) is protocol_codes, ast.unparse(node)  # a constant of protocol_codes
        return getattr(protocol_codes, node.attr)

    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if isinstance(k, ast.Constant) and k.value == "code" and not isinstance(v, PASSED_ON):
                    found[value(v)] = PROTOCOL
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in takes_code:
            params = takes_code[node.func.id]
            args = dict(zip(params, node.args, strict=False)) | {k.arg: k.value for k in node.keywords}
            if "code" in args and not isinstance(args["code"], PASSED_ON):
                policy = isinstance(args.get("policy"), ast.Constant) and args["policy"].value is True
                found[value(args["code"])] = POLICY if policy else PROTOCOL
    return found


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    return connect(tmp_path_factory.mktemp("empty-wh"))


def test_the_generated_view_is_current():
    assert SQL_FILE.read_text() == protocol_codes_sql(), "run: python -m shopsim_wh.core.protocol_codes"


def test_every_code_the_runtime_and_the_model_client_emit_has_a_specific_label(con):
    emitted = emitted_codes(model) | emitted_codes(runtime)
    assert len(emitted) >= 19 and emitted["generation_length"] == POLICY  # the scan sees the emitters
    labels = dict(con.execute("SELECT code, label FROM protocol_codes").fetchall())
    kinds = dict(con.execute("SELECT code, kind FROM protocol_codes").fetchall())
    taxonomy = {r[0] for r in con.execute("SELECT code FROM taxonomy").fetchall()}
    for code, kind in emitted.items():
        assert code in labels, f"{code} is emitted but protocol_codes.py does not declare it"
        assert kinds[code] == kind, code
        assert labels[code] not in ("protocol_other", "policy_other") and labels[code] in taxonomy, code
    # and nothing is declared as ours that nothing emits
    assert {c.code for c in CODES if c.emitted_by} == set(emitted)


def test_declared_labels_are_taxonomy_codes_and_the_catch_alls_exist(con):
    rows = con.execute("SELECT code, category FROM taxonomy").fetchall()
    category = dict(rows)
    assert {c.label for c in ALL} <= set(category)
    assert all(category[c.label] == "protocol" for c in ALL if c.kind == PROTOCOL)
    assert {"protocol_other", "policy_other"} <= set(category)
    assert len({c.code for c in ALL}) == len(ALL)
    assert all(c.original for c in CODES), "each of our codes is ShopSimRL's too: say where it comes from"


@pytest.mark.parametrize("doc,code", [
    ("[]", "invalid_response_body"),
    ({"choices": []}, "missing_choices"),
    ({"choices": [{"message": {"tool_calls": [{"type": "function"}]}}]}, "missing_function"),
    ({"choices": [{"message": {"tool_calls": [{"type": "function", "id": "c", "function": {"arguments": "{}"}}]}}]},
     "missing_tool_name"),
    ({"choices": [{"message": {"content": "hi", "tool_calls": [
        {"type": "function", "id": "c", "function": {"name": "search", "arguments": "{\"query\": \"x\"}"}}]}}]},
     "mixed_content"),
])
def test_the_declared_meaning_is_what_the_client_checks(doc, code):
    out = parse_response([] if doc == "[]" else doc, 1.0, allowed_tools={"search"})
    assert out.protocol_error["code"] == code
