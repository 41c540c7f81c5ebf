"""Context reconstruction equals what the model really saw: compare with the request bodies the server received."""

from __future__ import annotations

import json

from shopsim_wh import runner
from shopsim_wh.config import load_config
from shopsim_wh.db import connect
from shopsim_wh.sim.server import create_app

from .conftest import read_body, serve_asgi
from .helpers import write_config


class Recording:
    """Wraps the embedded app and keeps every chat-completions request body, keyed by its seed."""

    def __init__(self, app):
        self.app, self.requests = app, []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].endswith("/chat/completions"):
            return await self.app(scope, receive, send)
        body = await read_body(receive)
        self.requests.append(json.loads(body))
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await self.app(scope, replay, send)


def test_ir_context_equals_the_request_the_model_received(tmp_path, warehouse):
    rec = Recording(create_app(seed=0))
    with serve_asgi(rec) as url:
        cfg = load_config(write_config(tmp_path / "c.yaml", tasks={"sample_size": 4},
                                       model={"base_url": url + "/v1", "extra_body": {"scripted_policy": {
                                           "failure_rates": {"no_tool_call": 0.15, "multiple_tool_calls": 0.1}}}},
                                       environment={"url": url}))
        runner.run(cfg, str(warehouse))
    by_seed = {r["seed"]: r for r in rec.requests}
    con = connect(warehouse)
    steps = con.execute("select run_id, episode_id, step_idx, step_seed from steps order by episode_id, step_idx").fetchall()
    assert len(steps) == len(rec.requests) > 8
    assert con.execute("select count(*) from steps where protocol_error is not null").fetchone()[0] > 0
    for run_id, episode_id, step_idx, seed in steps:
        got = con.execute("select messages from ir_context_json(?, ?, 'main', ?, NULL)",
                          [run_id, episode_id, step_idx]).fetchone()[0]
        assert json.loads(got) == by_seed[seed]["messages"], (episode_id, step_idx)
