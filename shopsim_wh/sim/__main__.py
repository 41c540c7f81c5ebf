"""``python -m shopsim_wh.sim serve --host 127.0.0.1 --port 8765`` (and ``write-splits``)."""

from __future__ import annotations

import argparse

from shopsim_wh.sim.server import serve
from shopsim_wh.sim.tasks import write_default_split_manifest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m shopsim_wh.sim")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve the shop (both dialects) and the scripted policy over HTTP")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8765)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--capacity", type=int, default=256)
    s.add_argument("--lease-ttl", type=float, default=600.0, help="idle seconds before a lease expires")
    s.add_argument("--action-limit", type=int, default=15, help="default per-episode action limit")
    sub.add_parser("write-splits", help="regenerate shopsim_wh/sim/data/persona_splits.v1.json (seed 0)")
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(host=args.host, port=args.port, seed=args.seed, capacity=args.capacity,
              lease_ttl_s=args.lease_ttl, default_action_limit=args.action_limit)
    else:
        print(write_default_split_manifest())


if __name__ == "__main__":
    main()
