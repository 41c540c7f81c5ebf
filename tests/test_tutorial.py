"""docs/tutorial.md as a user follows it: its files written, every `console` command run in order by a real shell
in an empty directory, each exit code and each output line it shows checked (digits may differ). Section 8 (the
skills loop: three runs and the loop's commands) is run by tests/test_journey_skill_loop.py on the same config,
which that file holds equal to the tutorial's `loop.yaml`; running it twice cost the suite ~45 CPU s."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from .conftest import REPO

TUTORIAL = REPO / "docs" / "tutorial.md"
LOOP_SECTION = "<!-- tutorial: skills loop -->"
BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e-?\d+)?")


def steps(text: str) -> list[tuple[str, str, object]]:
    """("file", name, content) and ("command", line, (expected exit code, expected output lines)) in order."""
    out = []
    for lang, info, body in BLOCK.findall(text):
        if m := re.search(r"\bfile=(\S+)", info):
            out.append(("file", m.group(1), body))
        elif lang == "console":
            for chunk in re.split(r"^\$ ", body, flags=re.M)[1:]:
                command, *expected = chunk.rstrip("\n").split("\n")
                code = re.search(r"#\s*exit (\d+)\s*$", command)
                out.append(("command", command, (int(code.group(1)) if code else 0, expected)))
    return out


def _pattern(line: str) -> re.Pattern:
    """A shown output line as a pattern: whitespace runs and numbers may differ, everything else is literal."""
    parts = NUMBER.split(" ".join(line.split()))
    return re.compile(r"\d+(?:\.\d+)?(?:e-?\d+)?".join(re.escape(p) for p in parts))


def test_the_tutorial_has_what_it_promises():
    text = TUTORIAL.read_text()
    kinds = [(k, v if k == "file" else v.split()[:2]) for k, v, _ in steps(text)]
    assert ("file", "first.yaml") in kinds and ("command", ["shopsim-wh", "gate"]) in kinds
    assert ("command", ["shopsim-wh", "report"]) in kinds and ("command", ["shopsim-wh", "export"]) in kinds


def test_every_command_of_the_tutorial_runs_as_shown(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("SHOPSIM_WH_HOME", None)
    assert (Path(sys.executable).parent / "shopsim-wh").exists(), "install the package (pip install -e .) first"
    text = TUTORIAL.read_text()
    assert LOOP_SECTION in text
    for kind, what, detail in steps(text.split(LOOP_SECTION)[0]):
        if kind == "file":
            (tmp_path / what).write_text(detail)
            continue
        code, expected = detail
        res = subprocess.run(["bash", "-c", what], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == code, f"$ {what}\nexit {res.returncode}\n{res.stdout}\n{res.stderr}"
        if not expected:  # the tutorial shows no output (e.g. --quiet): there is none
            assert res.stdout == "", f"$ {what}\n{res.stdout}"
        got = [" ".join(line.split()) for line in (res.stdout + "\n" + res.stderr).splitlines()]
        for line in filter(str.strip, expected):
            pattern = _pattern(line)
            assert any(pattern.fullmatch(g) for g in got), f"$ {what}\nexpected: {line}\ngot:\n{res.stdout}{res.stderr}"
