"""A catalog every DuckDB client opens (issue 27, item 8): `shopsim-wh catalog` writes DuckDB 1.0's storage
format by default, so a DuckDB 1.x, installed here in an environment of its own (as BI drivers and notebooks
ship it), opens the file and queries its views; a refresh keeps the version a file was built with.

The DuckDB 1.x package is installed once per machine with pip into a cache directory (``$SHOPSIM_WH_DUCKDB1_DIR``,
else ``~/.cache/shopsim-wh/duckdb-<version>``) and imported by a separate interpreter process through PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from shopsim_wh.cli import exits

from .conftest import REPO
from .journeys import ok, shopsim

DUCKDB1 = "1.1.3"  # reads storage version 64 only, as DuckDB 1.0 and 1.1 do
THIRD = REPO / "tests" / "fixtures" / "third_party"
CLAUDE = THIRD / "claude_code_cclogviewer" / "example.jsonl"
ATIF = THIRD / "atif_login-trace" / "trajectory.json"
# views whose SQL calls a function DuckDB 1.1 does not have (docs/bi.md): they do not bind there, everything else does
NEEDS_NEWER = {"eval_summary": "json_each"}

READER = textwrap.dedent("""
    import json, sys, duckdb
    con = duckdb.connect(sys.argv[1], read_only=True)
    views = [r[0] for r in con.execute(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal AND schema_name = 'main' ORDER BY 1").fetchall()]
    failing = {}
    for v in views:
        try:
            con.execute(f'SELECT count(*) FROM "{v}"').fetchone()
        except duckdb.Error as exc:
            failing[v] = str(exc)
    episodes = con.execute("SELECT source_format, count(*) FROM episodes GROUP BY 1 ORDER BY 1").fetchall()
    info = dict(con.execute("SELECT key, value FROM catalog_info").fetchall())
    print(json.dumps({"duckdb": duckdb.__version__, "views": views, "failing": failing, "episodes": episodes,
                      "info": info}))
""")


def duckdb1_dir() -> Path:
    """DuckDB 1.x installed with pip into a directory of its own (once; concurrent builders: the first rename wins)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "shopsim-wh" / f"duckdb-{DUCKDB1}"
    target = Path(os.environ.get("SHOPSIM_WH_DUCKDB1_DIR") or cache)
    if (target / "duckdb").is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "--target", str(tmp), f"duckdb=={DUCKDB1}"], check=True, timeout=300, capture_output=True)
    try:
        os.replace(tmp, target)
    except OSError:  # another process installed it first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


@pytest.fixture(scope="module")
def old_duckdb(tmp_path_factory):
    """Run READER on a catalog file with DuckDB 1.x: (exit code, parsed output or stderr)."""
    site = duckdb1_dir()
    script = tmp_path_factory.mktemp("reader") / "reader.py"
    script.write_text(READER)

    def read(path: Path):
        res = subprocess.run([sys.executable, "-s", str(script), str(path)], capture_output=True, text=True,
                             timeout=120, cwd=script.parent, env={**os.environ, "PYTHONPATH": str(site)})
        return (0, json.loads(res.stdout)) if res.returncode == 0 else (res.returncode, res.stderr)
    return read


def test_duckdb_1x_opens_the_catalog_and_queries_its_views_after_every_refresh(tmp_path, old_duckdb):
    wh = tmp_path / "wh"
    ok(shopsim("ingest", CLAUDE, "-w", wh, "-q"))
    info = json.loads(ok(shopsim("catalog", "-w", wh, "--format", "json")).stdout)
    catalog = Path(info["path"])
    assert catalog == wh / "catalog.duckdb"

    code, got = old_duckdb(catalog)
    assert code == 0, got
    assert got["duckdb"] == DUCKDB1  # the separate environment's DuckDB, not this one's
    assert got["episodes"] == [["claude-code", 1]]
    assert got["info"]["storage_version"] == "v1.0.0" and got["info"]["duckdb_version"] == duckdb.__version__
    assert len(got["views"]) == info["views"] and {"episodes", "run_metrics", "steps"} <= set(got["views"])
    assert set(got["failing"]) <= set(NEEDS_NEWER), got["failing"]
    assert all(NEEDS_NEWER[v] in msg for v, msg in got["failing"].items())

    # ingest rebuilds the warehouse's catalog: still in the 1.0 format, with the new episode
    ok(shopsim("ingest", ATIF, "-w", wh, "-q"))
    code, got = old_duckdb(catalog)
    assert code == 0, got
    assert got["episodes"] == [["atif", 1], ["claude-code", 1]]


def test_storage_version_is_a_choice_that_refreshes_keep(tmp_path, old_duckdb):
    wh = tmp_path / "wh"
    newest = tmp_path / "bi" / "newest.duckdb"
    ok(shopsim("ingest", CLAUDE, "-w", wh, "-q"))
    ok(shopsim("catalog", "-w", wh, "--out", newest, "--storage-version", "latest", "-q"))
    code, err = old_duckdb(newest)  # the installed DuckDB's own format: DuckDB 1.x refuses it
    assert code != 0 and "version" in err and "can only read version 64" in err, err

    ok(shopsim("ingest", ATIF, "-w", wh, "-q", "--catalog", newest))  # a refresh keeps the file's choice
    con = duckdb.connect(str(newest), read_only=True)
    assert con.execute("SELECT value FROM catalog_info WHERE key = 'storage_version'").fetchone() == ("latest",)
    assert con.execute("SELECT count(*) FROM episodes").fetchone() == (2,)
    con.close()

    bad = shopsim("catalog", "-w", wh, "--out", tmp_path / "x.duckdb", "--storage-version", "1.0")
    assert bad.returncode == exits.USAGE and "--storage-version '1.0'" in bad.stderr and "v1.0.0" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "x.duckdb").exists()
