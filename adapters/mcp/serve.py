"""Run the proxy: start the upstream, open the store, build the gate, serve a transport.

The upstream is started first and the gate is loaded while it starts: an MCP server's cold start
is mostly its own imports, and the proxy's overlap them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from planfence.shared_memory.extras import extra_imports

from .links import UpstreamTarget
from .upstream import Upstream, UpstreamMode, stdio_upstream

with extra_imports("mcp", "the MCP proxy"):
    from ._extra import require

    require()

if TYPE_CHECKING:
    from planfence.plugins.gate import AuditMode
    from planfence.plugins.gate.fence import TokenSigner

    from .oauth import ResourceServer
    from .proxy import PlanfenceProxy

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
    audit: AuditMode = "deferred",
    resource_server: ResourceServer | None = None,
) -> None:
    """Serve until the client disconnects (stdio) or the process is stopped (HTTP).

    Raises:
        ConfigError: over HTTP, the port is busy or the address cannot be used (checked before
            the upstream starts or the store opens).
    """
    from planfence.adapters.cli.serving import listen_socket

    target: UpstreamTarget = upstream_url if upstream_url else stdio_upstream(command)
    sock = listen_socket(host, port) if transport == "http" else None
    try:
        upstream = Upstream(
            target, mode=upstream_mode, call_timeout=call_timeout, request_timeout=request_timeout
        )
        starting = asyncio.get_running_loop().create_task(upstream.ensure())
        await asyncio.sleep(0)  # the command starts now, before the gate is loaded
        try:
            from planfence.plugins.gate import Gate, Policy
            from planfence.shared_memory import open_async_store
            from planfence.shared_memory.factory import sqlite_on_loop

            from .policy_fit import warn_about_policy
            from .proxy import PlanfenceProxy

            policy = Policy.load(policy_path)
            # A mistyped path must not become a new, empty store: the proxy only reads what
            # exists. SQLite is read and written on the proxy's event loop (no hop per call).
            store = await open_async_store(sqlite_on_loop(store_url), create=False)
            gate = Gate(store, policy, audit=audit)
            try:
                await starting
                proxy = PlanfenceProxy(
                    gate, upstream, agent=agent, signing_key=signing_key, single_client=sock is None
                )
                proxy.start()
                if sock is not None:
                    await warn_about_policy(policy, proxy.catalog)
                    await _serve_http(
                        proxy, sock, host, auth_token, allowed_origins, resource_server
                    )
                else:  # the client is served while the policy is checked against the tools
                    from .stdio import serve_stdio

                    upstream.spawn(lambda: warn_about_policy(policy, proxy.catalog))
                    await serve_stdio(proxy)
            finally:
                # A proxy stopped by Ctrl-C still writes the allows its audit queued.
                await _to_the_end(_close_both(gate.aclose, store.aclose))
        finally:
            await _to_the_end(_stop(starting, upstream))
    finally:
        if sock is not None:
            sock.close()


async def _close_both(
    first: Callable[[], Awaitable[None]], then: Callable[[], Awaitable[None]]
) -> None:
    try:
        await first()
    finally:
        await then()


async def _stop(starting: asyncio.Task[None], upstream: Upstream) -> None:
    """Stop the upstream, also one still starting."""
    starting.cancel()
    with contextlib.suppress(BaseException):  # its failure was told already, or never matters
        await starting
    await upstream.aclose()


async def _to_the_end(work: Awaitable[None]) -> None:
    """Run `work` to its end even when this task is cancelled meanwhile (Ctrl-C), then let the
    cancellation go on."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    task.result()


async def _serve_http(
    proxy: PlanfenceProxy,
    sock: socket.socket,
    host: str,
    token: str | None,
    origins: tuple[str, ...],
    auth: ResourceServer | None = None,
) -> None:
    from planfence.adapters.cli.serving import run_uvicorn, socket_url

    from .http_front import HttpFront
    from .http_guard import TOKEN_ENV, HttpGuard, is_loopback

    loopback = is_loopback(host)
    if not loopback and token is None and auth is None:
        logger.warning(
            "listening on %s without an auth token: anyone who can reach this port can call the "
            "upstream's tools (give --auth-token-file or $%s)",
            host,
            TOKEN_ENV,
        )
    app: Any = HttpFront(proxy)
    if auth is not None:  # an OAuth resource server, with the SDK's pieces (see `oauth`)
        from .oauth import JwtVerifier, protect, scope_agent

        verifier = JwtVerifier(auth)
        await verifier.load()
        app = protect(HttpFront(proxy, agent_of=scope_agent), auth, verifier)
    guarded = HttpGuard(app, token=token, allowed_origins=origins, check_host=loopback)
    url = socket_url(sock, "/mcp")
    await run_uvicorn(
        guarded,
        sock,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=3,
        on_ready=lambda: logger.warning("serving MCP over streamable HTTP at %s", url),
    )
