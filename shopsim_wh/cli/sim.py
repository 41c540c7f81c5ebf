"""`sim serve`: the embedded simulator and scripted policy over real HTTP."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]})


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8765,
    seed: Annotated[int, typer.Option(help="Catalog seed.")] = 0,
    capacity: Annotated[int, typer.Option(help="Environment slots; a reset waits while all are leased.")] = 20,
    show_attrs: Annotated[bool, typer.Option(help="Offer the attributes subpage on product pages.")] = False,
    latency_ms: Annotated[float, typer.Option(help="Scripted policy: wait this long before each answer, like a real model server.")] = 0.0,
    idempotency_keys: Annotated[bool, typer.Option("--idempotency-keys/--no-idempotency-keys", help="Answer a repeated request_id from the reply cache (announced in /healthz); --no-idempotency-keys behaves like the real shop_env, which has none.")] = True,
) -> None:
    """Serve the shop_env API (and the pi-slime dialect) and the OpenAI-compatible scripted policy on one port."""
    from ..sim.policy import PolicyConfig
    from ..sim.server import serve as serve_app

    typer.echo(f"shop environment: http://{host}:{port}/api/shop_agent (shop_env; pi-slime with rollout_session_id)")
    typer.echo(f"health:           http://{host}:{port}/healthz")
    typer.echo(f"scripted policy:  http://{host}:{port}/v1 (models: GET /v1/models)")
    policy = PolicyConfig(overrides={"latency_ms": latency_ms} if latency_ms else {})
    serve_app(host=host, port=port, seed=seed, capacity=capacity, show_attrs=show_attrs, policy=policy,
              idempotency=idempotency_keys)
