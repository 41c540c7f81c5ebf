"""``python -m shopsim_wh.sim serve --host 127.0.0.1 --port 8765`` (and ``write-splits``)."""

from __future__ import annotations

import argparse

from shopsim_wh.sim.server import serve
from shopsim_wh.sim.tasks import write_default_split_manifest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m shopsim_wh.sim")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve the shop (shop_env + pi-slime dialects) and the scripted policy over HTTP")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8765)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--capacity", type=int, default=20, help="environment slots (resets wait while all are leased)")
    s.add_argument("--show-attrs", action="store_true", help="offer the attributes subpage on product pages")
    sub.add_parser("write-splits", help="regenerate shopsim_wh/sim/data/persona_splits.v1.json (seed 0)")
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(host=args.host, port=args.port, seed=args.seed, capacity=args.capacity, show_attrs=args.show_attrs)
    else:
        print(write_default_split_manifest())


if __name__ == "__main__":
    main()
