"""What the proxy does with the connection-level requests and notices of handshake-era clients:
resource subscriptions (one upstream subscription per resource, however many clients watch
it), log levels and roots changes."""

from __future__ import annotations

import logging
from typing import Any

from planfence.shared_memory.extras import extra_imports

with extra_imports("mcp", "the MCP proxy"):
    import mcp  # noqa: F401  (the `mcp` extra)

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from .peers import DEFAULT_LEGACY_LOG_LEVEL, Peer
from .relay import Relay
from .upstream import Upstream, UpstreamFailure

logger = logging.getLogger("planfence.mcp")

_LOG_ORDER = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]


class Subscriptions:
    """Handlers for subscriptions, log levels and roots notices; re-subscribes after the
    upstream restarts and releases a closed client's subscriptions."""

    def __init__(self, upstream: Upstream, relay: Relay) -> None:
        self.upstream = upstream
        self.relay = relay
        self.watchers: dict[str, int] = {}
        relay.on_forget = self.release
        upstream.on_reconnect = self.resubscribe

    async def subscribe(
        self, ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams
    ) -> dict[str, Any]:
        peer = self.relay.peer(ctx)
        uri = params.uri
        if uri not in peer.subscriptions:
            if self.watchers.get(uri, 0) == 0:
                await self._upstream_or_error("resources/subscribe", {"uri": uri})
            self.watchers[uri] = self.watchers.get(uri, 0) + 1
            peer.subscriptions.add(uri)
        return {}

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams
    ) -> dict[str, Any]:
        peer = self.relay.peer(ctx)
        uri = params.uri
        if uri in peer.subscriptions:
            peer.subscriptions.discard(uri)
            left = self.watchers.get(uri, 1) - 1
            if left <= 0:
                self.watchers.pop(uri, None)
                await self._upstream_or_error("resources/unsubscribe", {"uri": uri})
            else:
                self.watchers[uri] = left
        return {}

    def release(self, peer: Peer) -> None:
        """A client connection closed: drop its subscriptions (upstream too, if it was the last
        client watching a resource)."""
        for uri in sorted(peer.subscriptions):
            left = self.watchers.get(uri, 1) - 1
            if left > 0:
                self.watchers[uri] = left
                continue
            self.watchers.pop(uri, None)

            async def unsubscribe(uri: str = uri) -> None:
                if self.watchers.get(uri, 0) == 0:  # unless a client subscribed again
                    await self.upstream.request(
                        "resources/unsubscribe",
                        {"uri": uri},
                        read_timeout=self.upstream.request_timeout,
                    )

            self.upstream.spawn(unsubscribe)
        peer.subscriptions.clear()

    async def resubscribe(self) -> None:
        """The upstream was restarted: subscribe again to what the proxy's clients watch."""
        for uri in list(self.watchers):
            try:
                await self.upstream.request(
                    "resources/subscribe", {"uri": uri}, read_timeout=self.upstream.request_timeout
                )
            except UpstreamFailure as exc:
                logger.warning("could not subscribe again to %s: %s", uri, exc)

    async def set_level(
        self, ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams
    ) -> dict[str, Any]:
        peer = self.relay.peer(ctx)
        peer.log_level = params.level
        caps = self.upstream.client.server_capabilities
        if not self.upstream.modern and caps.logging is not None:
            # The upstream connection is shared: the lowest level any client asked for, so
            # each client still gets what it asked for (the proxy filters per client).
            levels = [p.log_level or DEFAULT_LEGACY_LOG_LEVEL for p in self.relay.peers()]
            lowest = min(levels, key=_LOG_ORDER.index, default=params.level)
            await self._upstream_or_error("logging/setLevel", {"level": lowest})
        return {}

    async def roots_changed(self, ctx: ServerRequestContext[Any], params: Any) -> None:
        if self.upstream.modern:
            return  # 2026-era servers ask for roots with each request that needs them
        try:
            await self.upstream.client.session.send_notification(
                types.RootsListChangedNotification()
            )
        except Exception:
            logger.debug("could not tell the upstream its roots changed", exc_info=True)

    async def _upstream_or_error(self, method: str, params: dict[str, Any]) -> None:
        try:
            await self.upstream.request(method, params, read_timeout=self.upstream.request_timeout)
        except UpstreamFailure as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=str(exc)) from None
