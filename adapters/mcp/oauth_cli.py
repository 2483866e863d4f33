"""`planfence proxy` options for the OAuth resource-server mode (no MCP import at parse time)."""

from __future__ import annotations

import argparse
from typing import Any


def add_auth_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--auth-issuer",
        default=None,
        metavar="URL",
        help="HTTP: act as an OAuth 2.1 resource server: accept only JWT access tokens issued "
        "by this authorization server (its issuer identifier, the tokens' iss)",
    )
    p.add_argument(
        "--auth-audience",
        default=None,
        metavar="AUD",
        help="HTTP, with --auth-issuer: the audience the tokens must be issued for (aud)",
    )
    p.add_argument(
        "--auth-jwks",
        default=None,
        metavar="FILE|URL",
        help="the issuer's public keys (a JWK Set file or URL; default: the jwks_uri of the "
        "issuer's metadata)",
    )
    p.add_argument(
        "--auth-jwks-refresh",
        type=_seconds,
        default=300.0,
        metavar="SECONDS",
        help="read the JWKS again after this long (default 300): a key the issuer withdrew is "
        "accepted until then",
    )
    p.add_argument(
        "--auth-resource",
        default=None,
        metavar="URL",
        help="this proxy's URL as clients reach it, advertised in its protected resource "
        "metadata (default http://HOST:PORT/mcp)",
    )
    p.add_argument(
        "--agent-claim",
        default="sub",
        metavar="CLAIM",
        help="the token claim naming the calling agent (default sub): a call whose _meta names "
        "another agent is refused (agent_mismatch)",
    )


def _seconds(text: str) -> float:
    """argparse type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def auth_options(args: argparse.Namespace) -> dict[str, Any]:
    """The `serve` keyword arguments for these options."""
    if args.auth_issuer is None and args.auth_audience is None and args.auth_jwks is None:
        return {"resource_server": None}  # (the OAuth pieces take long to import)
    from .oauth import resource_server

    host = f"[{args.host}]" if ":" in args.host else args.host
    resource = args.auth_resource or f"http://{host}:{args.port}/mcp"
    auth = resource_server(
        args.auth_issuer,
        args.auth_audience,
        args.auth_jwks,
        args.agent_claim,
        resource,
        args.auth_jwks_refresh,
    )
    if auth is not None and args.transport != "http":
        from .oauth import OAuthConfigError

        raise OAuthConfigError("--auth-issuer needs --transport http")
    if auth is not None and getattr(args, "auth_token_file", None):
        from .oauth import OAuthConfigError

        raise OAuthConfigError("give --auth-issuer or --auth-token-file, not both")
    return {"resource_server": auth}
