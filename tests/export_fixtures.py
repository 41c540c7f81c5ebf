"""One small warehouse shared by the export tests (session scope): runner episodes with planted privacy canaries
plus ingested real traces (Claude Code with sub-agents and a summary, agent_multi_turn, OpenAI messages from
tau-bench, ATIF) and ShopSimRL v4 records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shopsim_wh.core.config import load_config
from shopsim_wh.demo.shopsimrl_v4 import RecordSpec, line, record
from shopsim_wh.ingest import IngestOptions, ingest
from shopsim_wh.rollout import runner
from shopsim_wh.sim.server import create_app

from .conftest import serve_asgi
from .helpers import Tap, write_config

FIX = Path(__file__).resolve().parent / "fixtures"
REAL = FIX / "third_party"  # byte-exact copies; licences in SOURCES.md
PERSONA_CANARY = "persona-canary-5b1e"
REASONING_CANARY = "reasoning-canary-77c2"
SOURCES = ("shopsim-wh-runner", "shopsimrl-v4", "claude-code", "agent-multi-turn", "openai-messages", "atif")


def _plant(path: str, doc):
    """The environment's reset answer gets a persona holding a canary; every model answer a reasoning canary."""
    result = doc.get("result") if isinstance(doc, dict) else None
    if isinstance(result, dict) and "task_instruction" in result:
        result["user_persona"] = {"note": PERSONA_CANARY}
    if path.endswith("/chat/completions") and isinstance(doc, dict):
        for choice in doc.get("choices", []):
            msg = choice.get("message") or {}
            msg["reasoning_content"] = REASONING_CANARY + " " + (msg.get("reasoning_content") or "")
    return doc


def build(root: Path, tmp: Path) -> dict:
    sim = Tap(create_app(seed=0), rewrite=_plant)
    with serve_asgi(sim) as url:
        cfg = load_config(write_config(tmp / "c.yaml", tasks={"split": "train", "sample_size": 3},
                                       model={"base_url": url + "/v1", "extra_body": {"scripted_policy": {
                                           "failure_rates": {"no_tool_call": 0.2}}}},
                                       environment={"url": url, "persona": True}))  # the planted persona is kept
        runner.run(cfg, str(root))
    # tau-bench: three real runs plus an exact copy of the first under another trial number (a duplicate source)
    runs = json.loads((REAL / "tau_bench" / "gpt-4o-airline.json").read_text())[:3]
    tau = tmp / "tau3.json"
    tau.write_text(json.dumps(runs + [{**runs[0], "trial": 99}]))
    v4 = tmp / "v4.jsonl"
    small = RecordSpec(steps=3, obs_words=20, think_words=8)
    v4.write_bytes(b"".join(line(record(2000 + i, spec=small)) for i in range(2)))
    ingest([FIX / "ingest" / "agent_multi_turn", FIX / "ingest" / "claude_code", REAL / "claude_code_session-share",
            REAL / "claude_code_cclogviewer", REAL / "atif_login-trace", v4], root, IngestOptions(parallel=False))
    ingest([tau], root, IngestOptions(format="openai-messages", parallel=False))
    from shopsim_wh.engines.db import connect
    from shopsim_wh.sim.tasks import generate_tasks

    con = connect(root)
    task_ids = [r[0] for r in con.execute("SELECT task_id FROM episodes WHERE source_format = 'shopsim-wh-runner'").fetchall()]
    con.close()
    goals = {generate_tasks(0).by_id[t].goal.goal_signature for t in task_ids}
    return {"root": root, "goals": goals, "duplicate_of": (f"task-{runs[0]['task_id']}__trial-{runs[0]['trial']}",
                                                          f"task-{runs[0]['task_id']}__trial-99")}


# Test modules register these fixtures by importing them (`_wh = export_fixtures.export_wh`); pytest then holds one
# definition per module, so the values are cached here to build the warehouse once per process, and on disk
# (shared) to build it once per test session: the xdist workers read the one built first.
_CACHE: dict = {}


def shared(tmp_path_factory, name: str, make):
    """``make(directory)`` run once per test session, the xdist workers included: in a directory under their
    common base temp, behind a file lock; its (pickled) value read back by every later caller. What it builds
    is read only (a test that changes a warehouse copies it first)."""
    import fcntl
    import os
    import pickle
    import shutil

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # pytest-N/popen-gwK -> pytest-N: one per session
    d, value = base / f"shared-{name}", base / f"shared-{name}.pickle"
    with open(base / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not value.exists():
            shutil.rmtree(d, ignore_errors=True)  # a caller that failed half-way
            d.mkdir()
            tmp = value.with_suffix(".tmp")
            tmp.write_bytes(pickle.dumps(make(d)))
            os.replace(tmp, value)
        return pickle.loads(value.read_bytes())


def built(tmp_path_factory) -> dict:
    """:func:`build`'s warehouse and facts, built once per test session."""
    return shared(tmp_path_factory, "export_wh", lambda d: build(d / "wh", d))


@pytest.fixture(scope="session", name="export_wh")
def export_wh(tmp_path_factory) -> dict:
    if "wh" not in _CACHE:
        _CACHE["wh"] = built(tmp_path_factory)
    return _CACHE["wh"]


@pytest.fixture(scope="session", name="export_con")
def export_con(export_wh):
    from shopsim_wh.engines.db import connect, install_exports

    if "con" not in _CACHE:
        _CACHE["con"] = connect(export_wh["root"])
        install_exports(_CACHE["con"])
    return _CACHE["con"]


@pytest.fixture(scope="session", name="every_kind")
def every_kind(export_con, tmp_path_factory) -> dict:
    """Each kind exported once over everything (where = true) with the default privacy flags: {kind: (result, dir)}
    (once per test session, as the warehouse)."""
    from shopsim_wh.export import export, list_kinds

    if "kinds" not in _CACHE:
        _CACHE["kinds"] = shared(tmp_path_factory, "every_kind", lambda base: {
            k.name: (export(k.name, export_con, base / k.name, where="true"), base / k.name) for k in list_kinds()})
    return _CACHE["kinds"]
