"""docs/bi.md's recipes, executed: every Python block (duckdb, polars, pandas, SQLAlchemy through duckdb-engine)
in a separate process from another directory, and every SQL block against the catalog (the ATTACH ... READ_ONLY
recipes of the DuckDB CLI, Grafana and Rill in a fresh session, as those tools run them)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import duckdb

from .catalog_support import small_catalog
from .conftest import REPO

DOC = REPO / "docs" / "bi.md"
DOC_PATH = "/data/shopsim/warehouse/catalog.duckdb"  # the path every recipe names


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"^ *```{lang}\n(.*?)^ *```", DOC.read_text(), flags=re.S | re.M)


RUN_BLOCKS = """
import json, sys, textwrap
out = []
for code in json.load(open(sys.argv[1])):
    ns = {}
    exec(compile(textwrap.dedent(code), "docs/bi.md", "exec"), ns)
    out.append("ok")
print(json.dumps(out))
"""


def test_python_and_sqlalchemy_recipes_run_from_another_directory(tmp_path):
    catalog = str(small_catalog())
    blocks = [b.replace(DOC_PATH, catalog) for b in _blocks("python")]
    assert len(blocks) >= 4 and any("create_engine" in b for b in blocks) and any(".pl()" in b for b in blocks)
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    res = subprocess.run([sys.executable, "-c", RUN_BLOCKS, "blocks.json"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert "synth-ckpt-a-bare" in out and "reward_mean" in out  # the duckdb and SQLAlchemy tables printed
    assert re.search(r"^\d+ episodes$", out, re.M) and re.search(r"^\d+ views$", out, re.M)
    assert re.search(r"^\d+ pairs; mean delta -?\d", out, re.M) and "purchase" in out
    assert json.loads(out.strip().splitlines()[-1]) == ["ok"] * len(blocks)


def test_every_sql_recipe_runs_on_the_catalog():
    catalog = str(small_catalog())
    ran = 0
    for block in _blocks("sql"):
        sql = block.replace(DOC_PATH, catalog).replace("$__timeFilter(r.created_at)", "true")
        statements = [s for s in sql.split(";") if s.strip() and not s.strip().startswith(".")]
        con = duckdb.connect() if "ATTACH" in sql else duckdb.connect(catalog, read_only=True)
        rows = None
        for stmt in statements:
            rows = con.execute("\n".join(ln for ln in stmt.splitlines() if not ln.startswith("."))).fetchall()
        if "ATTACH" in sql:  # the session now reads the catalog's views, and cannot write to it
            rows = con.execute("SELECT count(*) FROM run_metrics").fetchall()
            try:
                con.execute("CREATE TABLE shop.main.x (i INT)")
                raise AssertionError("the attached catalog is writable")
            except duckdb.Error:
                pass
        assert rows, sql
        con.close()
        ran += 1
    assert ran >= 6
