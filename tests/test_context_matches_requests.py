"""Context reconstruction equals what the model really saw: compare with the request bodies the server received."""

from __future__ import annotations

import json

from shopsim_wh.core.config import load_config
from shopsim_wh.engines.db import connect
from shopsim_wh.rollout import runner
from shopsim_wh.sim.server import create_app

from .conftest import serve_asgi
from .helpers import Tap, write_config


def test_ir_context_equals_the_request_the_model_received(tmp_path, warehouse):
    rec = Tap(create_app(seed=0))
    with serve_asgi(rec) as url:
        cfg = load_config(write_config(tmp_path / "c.yaml", tasks={"sample_size": 4},
                                       model={"base_url": url + "/v1", "extra_body": {"scripted_policy": {
                                           "failure_rates": {"no_tool_call": 0.15, "multiple_tool_calls": 0.1}}}},
                                       environment={"url": url}))
        runner.run(cfg, str(warehouse))
    requests = [req for req, _, _ in rec.on("/v1/chat/completions")]
    by_seed = {r["seed"]: r for r in requests}
    con = connect(warehouse)
    steps = con.execute("select run_id, episode_id, step_idx, step_seed from steps order by episode_id, step_idx").fetchall()
    assert len(steps) == len(requests) > 8
    assert con.execute("select count(*) from steps where protocol_error is not null").fetchone()[0] > 0
    for run_id, episode_id, step_idx, seed in steps:
        got = con.execute("select messages from ir_context_json(?, ?, 'main', ?, NULL)",
                          [run_id, episode_id, step_idx]).fetchone()[0]
        assert json.loads(got) == by_seed[seed]["messages"], (episode_id, step_idx)
