"""`planfence proxy`: run the PlanFence MCP proxy in front of an MCP server.

    planfence proxy --policy policy.toml -- python -m my_mcp_server --flag
    planfence proxy --policy policy.toml --upstream-url http://127.0.0.1:9000/mcp \\
        --transport http --port 8808
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from planfence.adapters.cli.common import (
    LOG_LEVELS,
    add_store_option,
    guarded,
    port_number,
    store_url,
)
from planfence.shared_memory import ConfigError
from planfence.shared_memory.extras import extra_imports
from planfence.shared_memory.records import validate_agent

from .oauth_cli import add_auth_arguments, auth_options

HELP = "serve an MCP server through the PlanFence gate (every tools/call checked first)"
SIGNING_KEY_ENV = "PLANFENCE_SIGNING_KEY"  # the owner service's, read by the proxy too


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "proxy",
        help=HELP,
        description=HELP + ". The plan travels in each call's _meta: dev.planfence/plan "
        "(plan record id) and dev.planfence/agent (optional).",
        usage="planfence proxy --policy FILE [options] -- UPSTREAM_COMMAND [ARGS...]",
    )
    p.add_argument("--policy", required=True, metavar="FILE", help="TOML policy (tool scopes)")
    add_store_option(p)
    p.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="how clients reach the proxy: stdio (launched by the client) or streamable HTTP "
        "at http://HOST:PORT/mcp",
    )
    p.add_argument("--host", default="127.0.0.1", help="HTTP host (default 127.0.0.1)")
    p.add_argument("--port", type=port_number, default=8808, help="HTTP port (default 8808)")
    p.add_argument(
        "--auth-token-file",
        default=None,
        metavar="FILE",
        help="HTTP: require 'Authorization: Bearer TOKEN', TOKEN being this file's first line "
        "(or set $PLANFENCE_PROXY_TOKEN)",
    )
    add_auth_arguments(p)
    p.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="HTTP: a browser origin (scheme://host[:port]) allowed besides loopback ones; "
        "repeatable",
    )
    p.add_argument(
        "--agent",
        default=None,
        metavar="NAME",
        help="act for agent NAME: serve planfence_read/planfence_keys/planfence_write and stamp "
        "a plan from what the client session read for every gated call without one in _meta",
    )
    p.add_argument(
        "--signing-key",
        default=None,
        metavar="FILE",
        help="the gate's private key (.jwk from `planfence keys generate --gate`): signs the "
        "fencing token sent upstream with every allowed call, as that gate (default: "
        "$PLANFENCE_SIGNING_KEY; without one the tokens are unsigned)",
    )
    p.add_argument(
        "--audit",
        choices=("deferred", "durable", "off", "before"),
        default="deferred",
        help="deferred: refusals on record before the answer, allows written by group commit "
        "within 50 ms (default); durable: every decision on record before the call is forwarded "
        "(before: the older name of durable); off: only the refusals the replan budget needs",
    )
    p.add_argument(
        "--upstream-url", default=None, metavar="URL", help="a streamable-HTTP upstream server"
    )
    p.add_argument(
        "--upstream-mode",
        choices=("auto", "legacy"),
        default="auto",
        help="auto: discover the upstream's protocol era, falling back to the initialize "
        "handshake (default); legacy: always use the handshake",
    )
    p.add_argument(
        "--call-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="abandon (and cancel upstream) a tool call after this long (default 60)",
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="timeout for connecting and for list/read/get requests (default 30)",
    )
    p.add_argument(
        "--log-level",
        default="warning",
        type=str.lower,
        choices=LOG_LEVELS,
        help="stderr log level",
    )
    p.add_argument(
        "upstream",
        nargs=argparse.REMAINDER,
        metavar="-- UPSTREAM_COMMAND [ARGS...]",
        help="the upstream server's command line (stdio upstream)",
    )
    p.set_defaults(handler=guarded(run))


def run(args: argparse.Namespace) -> int:
    command = list(args.upstream or [])
    if command and command[0] == "--":
        command = command[1:]
    if bool(command) == bool(args.upstream_url):
        raise ConfigError("give either -- UPSTREAM_COMMAND [ARGS...] or --upstream-url URL")
    with extra_imports("mcp", "the MCP proxy"):
        import anyio

        from .http_guard import read_token
        from .serve import serve
    if args.agent is not None:
        validate_agent(args.agent)
    # The owner service's modules are imported only for a key: the proxy starts its upstream
    # first, and they take longer to import than the upstream takes to start.
    key_file = args.signing_key or os.environ.get(SIGNING_KEY_ENV) or None
    signing_key = None
    if key_file:
        from planfence.adapters.owner_service.keys import SigningKey

        signing_key = SigningKey.load(key_file)
    if signing_key is not None and not signing_key.is_gate:
        raise ConfigError(
            f"{signing_key.source}: {signing_key.kid} is not a gate key; the proxy signs fencing "
            "tokens as a gate (planfence keys generate --agent NAME --gate --out DIR)"
        )
    try:
        token = read_token(args.auth_token_file, os.environ)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    logging.basicConfig(
        stream=sys.stderr, level=args.log_level.upper(), format="planfence proxy: %(message)s"
    )
    options: dict[str, Any] = {
        "policy_path": args.policy,
        "store_url": store_url(args),
        "command": command,
        "upstream_url": args.upstream_url,
        "upstream_mode": args.upstream_mode,
        "transport": args.transport,
        "host": args.host,
        "port": args.port,
        "call_timeout": args.call_timeout if args.call_timeout > 0 else None,
        "request_timeout": args.request_timeout if args.request_timeout > 0 else None,
        "auth_token": token,
        "allowed_origins": tuple(args.allow_origin),
        "agent": args.agent,
        "signing_key": signing_key,
        "audit": "durable" if args.audit == "before" else args.audit,
        **auth_options(args),
    }
    anyio.run(lambda: serve(**options))
    return 0
