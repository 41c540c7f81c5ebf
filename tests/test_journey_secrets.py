"""Journey: credentials written into a server URL (``http://user:pass@host/v1?api_key=...``) never reach a message
the CLI prints, nor the warehouse: plan, a run whose servers are down, and doctor."""

from __future__ import annotations

import socket
from pathlib import Path

from .helpers import write_config
from .journeys import shopsim

SECRETS = ("s3cret", "t0ken")


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_urls_with_credentials_are_printed_without_them(tmp_path: Path):
    port = _closed_port()
    cfg = write_config(tmp_path / "c.yaml",
                       model={"base_url": f"http://agent:s3cret@127.0.0.1:{port}/v1?api_key=t0ken"},
                       environment={"url": f"http://envuser:s3cret@127.0.0.1:{port}?token=t0ken"})
    wh = tmp_path / "wh"
    plan = shopsim("plan", cfg)
    run = shopsim("run", cfg, "-w", wh)
    doctor = shopsim("doctor", "-w", wh, "--config", cfg)
    assert plan.returncode == 0 and f"127.0.0.1:{port}" in plan.stdout
    assert run.returncode == 3 and f"http://127.0.0.1:{port}" in run.stderr  # unreachable, named without userinfo
    assert "server_unreachable" in doctor.stdout and f"127.0.0.1:{port}" in doctor.stdout
    for res in (plan, run, doctor):
        out = res.stdout + res.stderr
        assert not any(s in out for s in SECRETS), out
    stored = [p.read_bytes() for p in wh.rglob("*") if p.is_file()] if wh.exists() else []
    assert not any(s.encode() in b for b in stored for s in SECRETS)
