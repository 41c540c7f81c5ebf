"""The CLI starts light: --help, -h, --version and shell completion import no heavy library (checked in a fresh
interpreter through sys.modules, not by timing, so the test holds on a loaded machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from shopsim_wh import __version__

HEAVY = ("duckdb", "pyarrow", "polars", "httpx", "numpy")

# Runs main() once per argument list in one interpreter, then reports what got imported.
PROBE = """
import json, sys
sys.argv[0] = "shopsim-wh"
from shopsim_wh.cli.main import app, main
runs = json.loads(sys.argv[1])
if runs == "all":  # every command and group's --help, as the docs generator walks them
    runs = [[]] + [[c.name or c.callback.__name__] for c in app.registered_commands]
    runs += [[g.name] for g in app.registered_groups]
    runs += [[g.name, c.name or c.callback.__name__] for g in app.registered_groups for c in g.typer_instance.registered_commands]
    runs = [[*r, "--help"] for r in runs]
codes = []
for args in runs:
    sys.argv[1:] = args
    try:
        main()
    except SystemExit as exc:
        codes.append(exc.code or 0)
print("\\nPROBE" + json.dumps({"codes": codes, "n": len(runs),
                              "heavy": sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)}))
""".replace("HEAVY", repr(HEAVY))


def _probe(runs, env=None) -> tuple[dict, str]:
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(runs)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr
    text, _, doc = out.stdout.rpartition("\nPROBE")
    return json.loads(doc), text


def test_every_help_screen_imports_no_heavy_library():
    doc, text = _probe("all")
    assert doc["n"] >= 12 and doc["codes"] == [0] * doc["n"]
    assert doc["heavy"] == [], f"--help imported {doc['heavy']}: move those imports inside the command function"
    assert "Usage: shopsim-wh run" in text and "Exit codes:" in text


def test_short_help_version_and_completion_stay_light():
    doc, text = _probe([["-h"], ["run", "-h"], ["--version"], ["-V"]])
    assert doc["codes"] == [0, 0, 0, 0] and doc["heavy"] == []
    assert "Usage: shopsim-wh [OPTIONS] COMMAND" in text and "Usage: shopsim-wh run" in text
    assert text.count(f"shopsim-wh {__version__}") == 2
    # a completion request (what the installed bash script sends) answers from the same light CLI
    env = {"_SHOPSIM_WH_COMPLETE": "complete_bash", "COMP_WORDS": "shopsim-wh su", "COMP_CWORD": "1"}
    doc, text = _probe([[]], env=env)
    assert text.split() == ["summarize"] and doc["heavy"] == []
    # typer finds the shell among the process's ancestors (shellingham), so the command runs under bash, as a user
    # types it; bash runs it as a child, not exec'd in its place (the "; exit" after it): an orphaned process (a
    # test run started in the background) has no shell above it and typer answers "Shell  not supported"
    out = subprocess.run(["bash", "-c", '"$@"; exit $?', "bash", sys.executable, "-c",
                          "import sys; sys.argv[0] = 'shopsim-wh'; from shopsim_wh.cli.main import main; main()",
                          "--show-completion"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "_SHOPSIM_WH_COMPLETE" in out.stdout
