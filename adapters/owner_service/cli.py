"""`planfence serve-owner`: run one agent's owner service over HTTP (uvicorn)."""

from __future__ import annotations

import argparse
import os

from planfence.adapters.cli.common import (
    LOG_LEVELS,
    add_store_option,
    guarded,
    port_number,
    require_existing_store,
    store_url,
)
from planfence.adapters.cli.serving import serve_app

from .keyring import HMAC_DEPRECATED, Keyring
from .keys import SigningKey, load_keyring
from .wire import DEFAULT_MAX_SKEW_S

SIGNING_KEY_ENV = "PLANFENCE_SIGNING_KEY"


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
    add_store_option(p)
    p.add_argument(
        "--port",
        type=port_number,
        required=True,
        metavar="N",
        help="TCP port to listen on (0: any free port; the ready line names it)",
    )
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: loopback)")
    p.add_argument(
        "--keyring",
        default=None,
        metavar="FILE",
        help="public keyring (JWK Set from `planfence keys generate`) of the agents allowed to "
        "ask; or a deprecated shared-secret file (default: $PLANFENCE_KEYRING)",
    )
    p.add_argument(
        "--signing-key",
        default=None,
        metavar="FILE",
        help="this agent's private key (.jwk) to sign answers (default: $PLANFENCE_SIGNING_KEY)",
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
        type=str.lower,
        choices=LOG_LEVELS,
        help="server log level",
    )
    p.set_defaults(handler=guarded(_serve))


def _serve(args: argparse.Namespace) -> int:
    from .server import create_app  # needs the `http` extra: imported when serving

    url = store_url(args)
    require_existing_store(url)  # a mistyped path must not become a new, empty store
    keyring = load_keyring(args.keyring)
    key_file = args.signing_key or os.environ.get(SIGNING_KEY_ENV) or None
    signing_key = SigningKey.load(key_file) if key_file else None
    notes: tuple[str, ...] = ()
    if isinstance(keyring, Keyring):
        notes = (f"planfence serve-owner: warning: {HMAC_DEPRECATED}",)
    app = create_app(args.agent, url, keyring, signing_key=signing_key, max_skew_s=args.max_skew)
    ready = f"planfence serve-owner: agent {args.agent} ready at"
    return serve_app(
        app, host=args.host, port=args.port, log_level=args.log_level, ready=ready, notes=notes
    )
