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


def one_episode_batch(run_id: str, i: int, n_steps: int = 3) -> list:
    """A commit's batches: one completed episode ``task-{i}`` with ``n_steps`` steps (readers check steps = 3 x eps)."""
    from shopsim_wh.core.schema import to_arrow

    ep = f"task-{i:06d}__sample-000"
    return [
        ("episodes", run_id, to_arrow("episodes", [{"episode_id": ep, "attempt": 1, "status": "completed", "reward": 1.0}])),
        ("steps", run_id, to_arrow("steps", [{"episode_id": ep, "attempt": 1, "agent_id": "main", "step_idx": s}
                                             for s in range(n_steps)])),
    ]


def read_during_commits(root, counts, min_reads: int, max_commits: int, compact_every: int) -> list[tuple[int, int]]:
    """Commit one-episode batches to ``root`` (compacting every ``compact_every``) while a thread calls ``counts()``
    (-> (episodes, steps) as one reader sees them) until it has read ``min_reads`` times; returns what it saw,
    re-raising the first error a reader met."""
    import threading

    from shopsim_wh.store.warehouse import Warehouse

    stop = threading.Event()
    seen: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def read():
        while not stop.is_set():
            try:
                seen.append(counts())
            except BaseException as exc:  # reported below
                errors.append(exc)

    with Warehouse(root).writer(grace_s=60) as w:
        w.commit(one_episode_batch("r", 0))
        t = threading.Thread(target=read)
        t.start()
        i = 0
        while len(seen) < min_reads and i < max_commits:  # keep committing until the reader has looked enough
            i += 1
            w.commit(one_episode_batch("r", i))
            if i % compact_every == 0:
                w.compact("r")
        stop.set()
        t.join()
    if errors:
        raise errors[0]
    return seen
