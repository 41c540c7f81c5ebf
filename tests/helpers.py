"""Small helpers shared by the runner tests: configs on disk and decoded Parquet scans."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pyarrow.parquet as pq
import yaml

BASE = {
    "experiment": {"name": "t", "seed": 3},
    "tasks": {"split": "val", "sample_size": 6, "repeats": 1},
    "model": {"name": "scripted-strong", "base_url": "embedded", "checkpoint_id": "ck1",
              "sampling": {"temperature": 0.6, "top_p": 1.0, "max_tokens": 4096}, "send_seed": True},
    "environment": {"url": "embedded", "dialect": "shop_env"},
    "skills": {"path": None},
    "runtime": {"max_steps": 30, "concurrency": 4},
}


def write_config(path: Path, **sections) -> Path:
    """BASE with sections deep-merged, e.g. write_config(p, model={"name": "scripted-noisy"})."""
    cfg = copy.deepcopy(BASE)
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = _merge(cfg[key], value)
        else:
            cfg[key] = value
    path.write_text(yaml.safe_dump(cfg))
    return path


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(a[k], v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
    return out


def decoded_strings(root: Path):
    """Every string value in every Parquet file under root, decoded (zstd hides strings from grep)."""
    for f in sorted(root.rglob("*.parquet")):
        table = pq.read_table(f)
        for col in table.columns:
            for v in col.to_pylist():
                if isinstance(v, str):
                    yield f, v


class Tap:
    """Wraps an ASGI app and keeps (path, request JSON, status, answer JSON) of every HTTP request;
    ``rewrite(path, answer)`` may change an answer before the client sees it."""

    def __init__(self, app, rewrite=None):
        self.app, self.rewrite, self.calls = app, rewrite, []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        from .conftest import read_body

        body = await read_body(receive)
        sent, status, chunks = False, [0], []

        async def replay():
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def capture(msg):
            if msg["type"] == "http.response.start":
                status[0] = msg["status"]
                await send({**msg, "headers": [(k, v) for k, v in msg["headers"] if k != b"content-length"]})
                return
            chunks.append(msg.get("body", b""))
            if msg.get("more_body"):
                return
            doc = json.loads(b"".join(chunks))
            if self.rewrite:
                doc = self.rewrite(scope["path"], doc)
            self.calls.append((scope["path"], json.loads(body) if body else None, status[0], doc))
            await send({"type": "http.response.body", "body": json.dumps(doc).encode()})
        await self.app(scope, replay, capture)

    def on(self, path: str) -> list[tuple]:
        return [(req, st, ans) for p, req, st, ans in self.calls if p == path]
