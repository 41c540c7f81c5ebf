"""Journey: `environment.persona: false` means no persona, anywhere a user can look.

The embedded shop_env, like the real one, sends the goal's `user_persona` with every reset whatever `if_persona`
says. A run with `persona: false` must keep none of it: not in the warehouse (every decoded Parquet string), not in
`shopsim-wh export` (even with --include-persona), not in `shopsim-wh dump`. The same run with `persona: true` has
it in each of those places, so every check here can fail.
"""

from __future__ import annotations

import json

import pytest

from shopsim_wh.sim.tasks import generate_tasks, persona_profile

from .helpers import decoded_strings, write_config
from .journeys import ok, shopsim

HEADER = "用户个人文档："  # the persona section of a system prompt


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[bool, dict]:
    """persona flag -> {"texts": {place: [text, ...]}, "modes": reset task_mode, "personas": the personas sent}."""
    tmp = tmp_path_factory.mktemp("journey-persona")
    out = {}
    for flag in (False, True):
        name = f"persona-{str(flag).lower()}"
        cfg = write_config(tmp / f"{name}.yaml", experiment={"name": name, "seed": 3},
                           tasks={"sample_size": 4, "repeats": 1}, environment={"persona": flag},
                           runtime={"max_steps": 10, "concurrency": 4})
        wh = tmp / f"wh-{name}"
        ok(shopsim("run", cfg, "--warehouse", wh))
        texts = {"warehouse": [v for _, v in decoded_strings(wh)]}
        for kind in ("sft-trajectory", "shopsimrl-v4"):
            dest = tmp / f"export-{name}-{kind}"
            ok(shopsim("export", kind, "--warehouse", wh, "--out", dest, "--format", "jsonl", "--where", "true",
                       "--include-persona", "--include-reasoning", "--quiet"))
            texts[f"export {kind}"] = [f.read_text() for f in sorted(dest.glob("*.jsonl"))]
        ok(shopsim("dump", "--warehouse", wh, "--run", name, "--out", tmp / f"dump-{name}"))
        texts["dump"] = [f.read_text() for f in sorted((tmp / f"dump-{name}").iterdir())]
        traces = [json.loads(line) for line in (tmp / f"dump-{name}" / "traces.jsonl").read_text().splitlines()]
        tasks = generate_tasks(0).by_id  # the embedded server's tasks: the personas it sends
        out[flag] = {"texts": texts, "modes": {t["reset"]["task_mode"] for t in traces},
                     "personas": [persona_profile(tasks[t["job"]["task_id"]].persona) for t in traces]}
    return out


def needles(personas: list[dict]) -> list[str]:
    """What would betray a persona: the prompt section's header and each persona's distinctive values."""
    return [HEADER] + [p[k] for p in personas for k in ("occupation", "preference")]


def found(texts: list[str], personas: list[dict]) -> set[str]:
    return {n for n in needles(personas) if any(n in t for t in texts)}


def test_persona_off_stores_no_persona_anywhere(runs):
    run = runs[False]
    assert run["modes"] == {"standard"}  # the environment was asked for no persona (if_persona false)
    assert len(run["personas"]) == 4 and all(run["texts"].values())
    for place, texts in run["texts"].items():
        assert found(texts, run["personas"]) == set(), place


def test_persona_on_keeps_it_everywhere(runs):
    run = runs[True]
    assert run["modes"] == {"persona"}
    for place, texts in run["texts"].items():
        assert found(texts, run["personas"]) == set(needles(run["personas"])), place
