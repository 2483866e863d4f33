"""`planfence serve-owner`: run one agent's owner service over HTTP (uvicorn)."""

from __future__ import annotations

import argparse

from planfence.adapters.cli.common import guarded, store_url

from .keyring import load_keyring
from .server import DEFAULT_MAX_SKEW_S, create_app


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve-owner",
        help="answer, over HTTP, which version of each of an agent's keys is current",
        description=(
            "Serve signed head answers for the keys AGENT owns in the store. Requests must be "
            "signed by an agent in the keyring (--keyring FILE or $PLANFENCE_KEYRING)."
        ),
    )
    p.add_argument("--agent", required=True, metavar="AGENT", help="the owner this service is")
    p.add_argument(
        "--store",
        default=None,
        metavar="URL",
        help="store URL (default: $PLANFENCE_STORE or sqlite:///.planfence/memory.db)",
    )
    p.add_argument("--port", type=int, required=True, metavar="N")
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: loopback)")
    p.add_argument(
        "--keyring",
        default=None,
        metavar="FILE",
        help="TOML or JSON file mapping agent ids to secrets (default: $PLANFENCE_KEYRING)",
    )
    p.add_argument(
        "--max-skew",
        type=float,
        default=DEFAULT_MAX_SKEW_S,
        metavar="SECONDS",
        help="largest accepted clock difference for a request (default: %(default)s)",
    )
    p.add_argument(
        "--log-level",
        default="warning",
        choices=["critical", "error", "warning", "info", "debug"],
    )
    p.set_defaults(handler=guarded(_serve))


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    app = create_app(
        args.agent, store_url(args), load_keyring(args.keyring), max_skew_s=args.max_skew
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)
    return 0
