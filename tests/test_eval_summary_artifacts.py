"""Four real ShopSimRL test runs rebuilt from their published per-task outcomes: eval_summary's counts,
reward_mean, reward_sem and success_rate equal the ones the original tool wrote into their summary.json, to 1e-12.

tests/fixtures/shopsimrl_artifacts/README.md says where the numbers come from. Each condition becomes a run
directory in the original layout (one shopsimrl-episode-v4 record per task, written by our synth_v4 writer, its
final reward and reward_detail r_strict / r_success set to the published per-task values, a manifest with the 400
jobs); the four directories are ingested as one runs/ tree.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import orjson
import pytest

from shopsim_wh.analytics.summary import eval_summaries
from shopsim_wh.demo.shopsimrl_v4 import RecordSpec, episode_seed, line, manifest, provenance, record
from shopsim_wh.engines.db import connect
from shopsim_wh.ingest import ingest

FIXTURES = Path(__file__).parent / "fixtures" / "shopsimrl_artifacts"
CONDITIONS = ("base_free", "base_s0", "iter80_free", "iter80_st")
SEED = 20260901


def outcomes() -> list[dict]:
    with open(FIXTURES / "test_task_outcomes.csv", newline="") as f:
        return list(csv.DictReader(f))


def write_condition(root: Path, cond: str, rows: list[dict]) -> Path:
    d = root / f"qwen35-4b-test-{cond.replace('_', '-')}"
    d.mkdir(parents=True)
    jobs = [{"task_id": int(r["task_id"]), "sample_id": 0, "seed": episode_seed(SEED, int(r["task_id"]), 0),
             "split": "test"} for r in rows]
    with open(d / "traces.jsonl", "wb") as f:
        for r in rows:
            rec = record(int(r["task_id"]), 0, RecordSpec(steps=2, obs_words=4, think_words=2, seed=SEED, split="test",
                                                          skills=cond.endswith(("s0", "st"))))
            reward, success = float(r[f"{cond}_reward"]), int(r[f"{cond}_success"])
            rec["final"]["reward"] = reward
            rec["final"]["reward_detail"].update(r_strict=reward, r_success=success)
            f.write(line(rec))
    man = manifest(d.name, jobs, provenance(skills=cond.endswith(("s0", "st"))))
    (d / "manifest.json").write_bytes(orjson.dumps(man))
    return d


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory):
    root = tmp_path_factory.mktemp("artifacts")
    rows = outcomes()
    for cond in CONDITIONS:
        write_condition(root / "runs", cond, rows)
    ingest([root / "runs"], root / "wh")
    con = connect(root / "wh")
    names = dict(con.execute("SELECT run_id, source_file FROM runs").fetchall())
    by_dir = {Path(src).parent.name: s for run_id, s in eval_summaries(con).items() for src in [names[run_id]]}
    return by_dir


def test_fixture_is_whole():
    rows = outcomes()
    assert len(rows) == 400 and len({r["task_id"] for r in rows}) == 400
    for r in rows:  # success is r_strict == 1 (all four components 1), as the server defines it
        for cond in CONDITIONS:
            assert (float(r[f"{cond}_reward"]) == 1.0) == (r[f"{cond}_success"] == "1")


@pytest.mark.parametrize("cond", CONDITIONS)
def test_rebuilt_run_matches_its_published_summary(rebuilt, cond):
    published = json.loads((FIXTURES / "published_summaries.json").read_text())["runs"][cond]
    got = rebuilt[published["run"]]
    assert got["counts"] == published["counts"]
    for key, want in published["primary"].items():
        assert math.isclose(got["primary"][key], want, rel_tol=0, abs_tol=1e-12), (key, got["primary"][key], want)
    for comp in ("r_strict", "r_success"):
        assert math.isclose(got["reward_components"][comp], published[comp], rel_tol=0, abs_tol=1e-12), comp
