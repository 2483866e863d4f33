"""`planfence ui`: serve the read-only lineage explorer for a store on a local port."""

from __future__ import annotations

import argparse
import sys

from planfence.adapters.cli.common import (
    LOG_LEVELS,
    add_store_option,
    guarded,
    port_number,
    store_url,
)
from planfence.adapters.cli.serving import serve_app
from planfence.shared_memory import open_store
from planfence.shared_memory.urls import redact_url

DEFAULT_PORT = 8765


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "ui",
        help="browse decisions, plans and keys in a local, read-only web app",
        description=(
            "Serve a read-only web app over the store: a timeline of gate and Janus decisions, "
            "each plan's lineage graph with stale versions marked, and each key's history."
        ),
    )
    add_store_option(p)
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: loopback)")
    p.add_argument(
        "--port",
        type=port_number,
        default=DEFAULT_PORT,
        metavar="N",
        help="TCP port (0: any free port; the ready line names it)",
    )
    p.add_argument(
        "--log-level", default="warning", type=str.lower, choices=LOG_LEVELS, help="server log"
    )
    p.set_defaults(handler=guarded(_serve))


def _serve(args: argparse.Namespace) -> int:
    from .app import LOOPBACK_HOSTS, create_app  # needs the `http` extra: imported when serving

    store = open_store(store_url(args), create=False)  # a mistyped path is an error, not a store
    if args.host not in LOOPBACK_HOSTS:
        print(
            f"planfence ui: warning: listening on {args.host}: anyone who can reach it can read "
            "this store's records and decisions",
            file=sys.stderr,
        )
    try:
        app = create_app(store, host=args.host)
        return serve_app(
            app,
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            ready=f"planfence ui: {redact_url(store.url)} at",
        )
    finally:
        store.close()
