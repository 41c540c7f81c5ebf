"""The built wheel ships the SQL: install it into a fresh virtualenv and load every view from it."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv

from .conftest import REPO


def test_wheel_ships_sql_and_loads_every_view(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation", "-q", "-w", str(dist)],
                   check=True, capture_output=True, timeout=300)
    wheel = next(dist.glob("shopsim_wh-*.whl"))
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env)  # pip installs into it from outside (`--python`): no ensurepip
    py = env / "bin" / "python"
    # dependencies come from this interpreter's site-packages (no editable path: .pth files there are not processed)
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (env / "lib").joinpath(*[p for p in site.split("/lib/", 1)[1].split("/")], "zz_deps.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    probe = f"""
import shopsim_wh, shopsim_wh.engines.db as db, tempfile
assert shopsim_wh.__file__.startswith({str(env)!r}), shopsim_wh.__file__
sql = db.sql_dir()
assert str(sql).startswith({str(env)!r}), sql
files = db.sql_files()
assert len(files) >= 8, files
con = db.connect(tempfile.mkdtemp())
db.install_exports(con)  # the exports layer is installed on demand
views = db.view_names(con)
names = [n for n, _ in views]
for name, kind in views:  # views are created unbound (DuckDB 2.0+): reading each one binds it
    if kind == "VIEW":
        con.execute(f"SELECT * FROM {{db.ident(name)}} LIMIT 0")
for required in ("episodes", "steps", "actions", "observations", "messages", "agents", "runs"):
    assert required in names, required
from importlib import resources
report = resources.files("shopsim_wh.report")
for f in ("vega.min.js", "vega-lite.min.js", "vega-embed.min.js", "LICENSE.vega", "SOURCES.md"):
    assert (report / "vendor" / f).is_file(), f  # the report's offline runtime ships in the wheel
assert (report / "sql" / "summary.sql").is_file()
print(len(files), len(names))
"""
    out = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    n_files, n_views = map(int, out.stdout.split())
    assert n_files == len(list((REPO / "sql").rglob("*.sql")))
    assert n_views > n_files
