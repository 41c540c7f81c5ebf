"""`sim serve`: the embedded simulator and scripted policy over real HTTP."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8765,
    seed: Annotated[int, typer.Option(help="Catalog seed.")] = 0,
    capacity: Annotated[int, typer.Option(help="Concurrent environment leases.")] = 256,
    lease_ttl: Annotated[float, typer.Option(help="Seconds an idle lease lives before the server reclaims it.")] = 600.0,
    latency_ms: Annotated[float, typer.Option(help="Scripted policy: wait this long before each answer, like a real model server.")] = 0.0,
) -> None:
    """Serve both environment dialects and the OpenAI-compatible scripted policy on one port."""
    from ..sim.policy import PolicyConfig
    from ..sim.server import serve as serve_app

    typer.echo(f"shop environment: http://{host}:{port} (canonical /v1/sessions, legacy /api/shop_agent)")
    typer.echo(f"scripted policy:  http://{host}:{port}/v1 (models: GET /v1/models)")
    policy = PolicyConfig(overrides={"latency_ms": latency_ms} if latency_ms else {})
    serve_app(host=host, port=port, seed=seed, capacity=capacity, lease_ttl_s=lease_ttl, policy=policy)
