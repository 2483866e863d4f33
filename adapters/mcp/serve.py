"""Run the proxy: open the store, build the gate, connect the upstream, serve a transport."""

from __future__ import annotations

import logging
import socket
from typing import Any

import anyio

from planfence.shared_memory.extras import extra_imports

with extra_imports("mcp", "the MCP proxy"):
    import mcp  # noqa: F401  (the `mcp` extra)

from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings

from planfence.adapters.cli.serving import listen_socket, run_uvicorn, socket_url
from planfence.plugins.gate import DEFAULT_AUDIT, AuditMode, Gate, Policy
from planfence.plugins.gate.fence import TokenSigner
from planfence.shared_memory import open_async_store
from planfence.shared_memory.factory import sqlite_on_loop

from .http_guard import TOKEN_ENV, HttpGuard, is_loopback
from .oauth import JwtVerifier, ResourceServer
from .policy_fit import warn_about_policy
from .proxy import open_proxy
from .stdio import native_stdio
from .upstream import UpstreamMode, UpstreamTarget, stdio_upstream

logger = logging.getLogger("planfence.mcp")


async def serve(
    *,
    policy_path: str,
    store_url: str,
    command: list[str],
    upstream_url: str | None,
    upstream_mode: UpstreamMode = "auto",
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8808,
    call_timeout: float | None = 60.0,
    request_timeout: float | None = 30.0,
    auth_token: str | None = None,
    allowed_origins: tuple[str, ...] = (),
    agent: str | None = None,
    signing_key: TokenSigner | None = None,
    audit: AuditMode = DEFAULT_AUDIT,
    resource_server: ResourceServer | None = None,
) -> None:
    """Serve until the client disconnects (stdio) or the process is stopped (HTTP).

    Raises:
        ConfigError: over HTTP, the port is busy or the address cannot be used (checked before
            the upstream starts or the store opens).
    """
    policy = Policy.load(policy_path)
    target: UpstreamTarget = upstream_url if upstream_url else stdio_upstream(command)
    sock = listen_socket(host, port) if transport == "http" else None
    try:
        # A mistyped path must not become a new, empty store: the proxy only reads what exists.
        # SQLite is read and written on the proxy's event loop (no hop per gated call).
        store = await open_async_store(sqlite_on_loop(store_url), create=False)
        gate = Gate(store, policy, audit=audit)
        try:
            async with open_proxy(
                gate,
                target,
                mode=upstream_mode,
                call_timeout=call_timeout,
                request_timeout=request_timeout,
                agent=agent,
                signing_key=signing_key,
                single_client=sock is None,
            ) as (proxy, server):
                await warn_about_policy(policy, proxy.catalog)
                if sock is not None:
                    await _serve_http(
                        server, sock, host, auth_token, allowed_origins, resource_server
                    )
                else:
                    async with (
                        native_stdio() as pipes,
                        stdio_server(*pipes) as (read, write),
                    ):
                        await server.run(read, write, server.create_initialization_options())
        finally:
            # Shielded: a proxy stopped by Ctrl-C still writes the allows its audit queued.
            with anyio.CancelScope(shield=True):
                try:
                    await gate.aclose()
                finally:
                    await store.aclose()
    finally:
        if sock is not None:
            sock.close()


async def _serve_http(
    server: Any,
    sock: socket.socket,
    host: str,
    token: str | None,
    origins: tuple[str, ...],
    auth: ResourceServer | None = None,
) -> None:
    loopback = is_loopback(host)
    if not loopback and token is None and auth is None:
        logger.warning(
            "listening on %s without an auth token: anyone who can reach this port can call the "
            "upstream's tools (give --auth-token-file or $%s)",
            host,
            TOKEN_ENV,
        )
    # HttpGuard checks Origin and Host for every bind address, with the user's allowed origins;
    # the SDK's own check (loopback binds only, loopback origins only) would refuse those.
    unchecked = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    oauth: dict[str, Any] = {}
    if auth is not None:  # an OAuth resource server, with the SDK's pieces (see `oauth`)
        verifier = JwtVerifier(auth)
        await verifier.load()
        oauth = {
            "auth": auth.settings(),
            "token_verifier": verifier,
            "custom_starlette_routes": [auth.root_metadata_route()],
        }
    app = HttpGuard(
        server.streamable_http_app(host=host, transport_security=unchecked, **oauth),
        token=token,
        allowed_origins=origins,
        check_host=loopback,
    )
    url = socket_url(sock, "/mcp")
    await run_uvicorn(
        app,
        sock,
        log_level="warning",
        lifespan="on",
        on_ready=lambda: logger.warning("serving MCP over streamable HTTP at %s", url),
    )
