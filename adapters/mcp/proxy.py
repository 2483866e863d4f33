"""The PlanFence MCP proxy: an MCP server that forwards to one upstream MCP server and passes
every `tools/call` through the gate first.

    client --(stdio | streamable HTTP, either protocol era)--> proxy --> upstream server

What the proxy changes on the way through, and nothing else:

- `tools/call` params `_meta` carries `dev.planfence/plan` (the plan record id; required for gated
  tools) and `dev.planfence/agent` (the calling agent, optional). The gate judges the call; a
  refused call is answered by the proxy (see `results.py`) and never reaches the upstream. An
  allowed call goes upstream with `dev.planfence/fence`, the allow's fencing token (signed with
  the proxy's `signing_key` when it has one); a lease its policy declares is held until the
  upstream answers.
- Keys under `io.modelcontextprotocol/` are per-connection protocol envelope (protocol version,
  client info, the progress token's connection...) and are not forwarded; the proxy's own
  upstream connection stamps its own. The one exception is the log level a 2026-era upstream
  needs to send logs at all: the client's own choice (see `relay.py`). Every other `_meta` key
  is forwarded, the planfence keys included, so an upstream can log which plan authorised its
  call.
- A forwarded call's result comes back as the upstream sent it, with
  `_meta["dev.planfence/decision"]` added (verdict, reason, decision id, plan). Protocol envelope
  keys of the upstream connection are dropped from result `_meta` for the same reason as above.
- Progress from the upstream is relayed to the caller's progress token; a caller's cancellation
  cancels the upstream request. The upstream's questions, logs and change notices are relayed by
  `relay.py`.

`tools/list`, resources, prompts and completions pass through unchanged. The parts: `upstream.py`
(the connection), `forwarding.py` (requests sent upstream), `gating.py` (`tools/call` on the
gate's seam), `subscriptions.py` (connection-level requests), `relay.py` and `peers.py` (what
the upstream sends back), `meta.py` and `results.py` (what goes over the wire).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

from planfence.plugins.gate import Gate, GateMiddleware, Middleware, Policy
from planfence.plugins.gate.fence import TokenSigner
from planfence.shared_memory import AsyncStore
from planfence.shared_memory.extras import extra_imports

with extra_imports("mcp", "the MCP proxy"):
    import mcp  # noqa: F401  (the `mcp` extra)

import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import ListenHandler
from mcp.shared.exceptions import MCPError

from .catalog import ToolCatalog
from .forwarding import Forwarder, InputRefused
from .gating import GatedCalls
from .relay import Relay
from .sessions import SessionPlans
from .subscriptions import Subscriptions
from .upstream import _NO_CACHE, Upstream, UpstreamFailure, UpstreamMode, UpstreamTarget, _version

__all__ = ["PlanfenceProxy", "open_proxy"]


class PlanfenceProxy:
    """Builds the proxy's MCP server: handlers that gate `tools/call` and pass the rest through.

    Args:
        gate: judges each call (and audits it in its store's decision log).
        upstream: the connected upstream server.
        name: the name the proxy gives itself to its clients.
        relay: delivers what the upstream sends besides answers (the upstream's own relay).
        middleware: middleware around the gate, outermost first (see `GateMiddleware`).
        agent: serve the proxy's own record tools and stamp plans for calls without one, as
            this agent (see `sessions.py`); None: every plan comes in `_meta`.
        signing_key: signs the fencing tokens sent upstream (an Ed25519 `SigningKey`).
    """

    def __init__(
        self,
        gate: Gate,
        upstream: Upstream,
        *,
        name: str = "planfence-proxy",
        relay: Relay | None = None,
        middleware: Iterable[Middleware] = (),
        agent: str | None = None,
        signing_key: TokenSigner | None = None,
    ) -> None:
        self.gate = gate
        self.upstream = upstream
        self.name = name
        self.relay = relay or upstream.relay or Relay()
        self.seam = seam = GateMiddleware(
            gate.store, gate.policy, gate=gate, middleware=middleware, signing_key=signing_key
        )
        self.catalog = ToolCatalog(upstream)
        self.forwarder = Forwarder(upstream, self.relay)
        # `--agent`: the proxy's own tools and plans stamped per session (see `sessions.py`).
        self.sessions = SessionPlans(gate.store, gate.policy, agent) if agent else None
        self.calls = GatedCalls(seam, self.forwarder, self.catalog, self.sessions)
        self.subscriptions = Subscriptions(upstream, self.relay)

    @property
    def policy(self) -> Policy:
        return self.gate.policy

    @property
    def store(self) -> AsyncStore:
        return self.gate.store

    def build_server(self) -> Server[Any]:
        """A low-level MCP server mirroring the upstream's capabilities."""
        caps = self.upstream.client.server_capabilities
        info = self.upstream.client.server_info
        legacy_upstream = not self.upstream.modern
        kwargs: dict[str, Any] = {
            "on_list_tools": self._list_tools,
            "on_call_tool": self.calls.call_tool,
        }
        if caps.resources is not None:
            kwargs["on_list_resources"] = self._passthrough("resources/list")
            kwargs["on_list_resource_templates"] = self._passthrough("resources/templates/list")
            kwargs["on_read_resource"] = self._passthrough("resources/read")
        if caps.prompts is not None:
            kwargs["on_list_prompts"] = self._passthrough("prompts/list")
            kwargs["on_get_prompt"] = self._passthrough("prompts/get")
        if caps.completions is not None:
            kwargs["on_completion"] = self._passthrough("completion/complete")
        notices = NotificationOptions(
            prompts_changed=bool(caps.prompts and caps.prompts.list_changed),
            resources_changed=bool(caps.resources and caps.resources.list_changed),
            tools_changed=bool(caps.tools and caps.tools.list_changed),
        )
        subscribe = bool(caps.resources and caps.resources.subscribe) and legacy_upstream
        changes = (notices.tools_changed, notices.prompts_changed, notices.resources_changed)
        if subscribe or any(changes):
            # 2026-era clients receive change notices on listen streams.
            kwargs["on_subscriptions_listen"] = ListenHandler(self.relay.bus)
        server: Server[Any] = _ProxyServer(
            self.name,
            notices,
            # Fills the 2026-era freshness fields only where the upstream gave none (a
            # handshake-era upstream): immediately stale, never shared across callers.
            cache_hints=_NO_CACHE,
            version=_version(),
            title=f"{info.name} (gated by planfence)" if info is not None else None,
            instructions=self.upstream.client.instructions,
            **kwargs,
        )
        subs = self.subscriptions
        if subscribe:
            server.add_request_handler(
                "resources/subscribe", types.SubscribeRequestParams, subs.subscribe
            )
            server.add_request_handler(
                "resources/unsubscribe", types.UnsubscribeRequestParams, subs.unsubscribe
            )
        # Handshake-era clients choose their log level; registered here rather than as a
        # constructor argument, which warns that 2026-era logging is per request.
        server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, subs.set_level)
        server.add_notification_handler(
            "notifications/roots/list_changed", types.NotificationParams, subs.roots_changed
        )
        server.add_notification_handler(
            "notifications/initialized", types.NotificationParams, self.relay.client_initialized
        )
        return server

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> dict[str, Any]:
        listing = await self._passthrough("tools/list")(ctx, params)
        self.catalog.observe(listing)
        if self.sessions is not None and not (params and params.cursor):
            listing = {**listing, "tools": [*listing.get("tools", []), *self.sessions.tools()]}
        return listing

    def _passthrough(
        self, method: str
    ) -> Callable[[ServerRequestContext[Any], Any], Awaitable[dict[str, Any]]]:
        async def handler(ctx: ServerRequestContext[Any], params: Any) -> dict[str, Any]:
            with self.relay.forwarding(ctx) as origin:
                try:
                    return await self.forwarder.forward(
                        origin, method, ctx.params, self.upstream.request_timeout
                    )
                except UpstreamFailure as exc:
                    # Not a tool call: there is no result shape for a failure, so it is an error.
                    raise MCPError(code=types.INTERNAL_ERROR, message=str(exc)) from None
                except InputRefused as exc:
                    raise MCPError.from_error_data(exc.error) from None

        return handler

    def uncovered_tools(self, tools: list[str]) -> list[str]:
        """Upstream tools the policy says nothing about (every call to them will be blocked)."""
        return self.policy.uncovered_tools(tools)


class _ProxyServer(Server[Any]):
    """The proxy's server: advertises the upstream's change notices to handshake-era clients."""

    def __init__(self, name: str, notices: NotificationOptions, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._notices = notices

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or self._notices, experimental_capabilities, extensions
        )


@asynccontextmanager
async def open_proxy(
    gate: Gate,
    target: UpstreamTarget,
    *,
    mode: UpstreamMode = "auto",
    call_timeout: float | None = 60.0,
    request_timeout: float | None = 30.0,
    middleware: Iterable[Middleware] = (),
    agent: str | None = None,
    signing_key: TokenSigner | None = None,
    single_client: bool = False,
) -> AsyncIterator[tuple[PlanfenceProxy, Server[Any]]]:
    """Connect the upstream and build the proxy's server; the upstream closes on exit.

    Args:
        gate: judges each call (and audits it in its store's decision log).
        target: the upstream: a URL, or a stdio command (`stdio_upstream([...])`).
        mode: how to reach a URL upstream ("auto" tries streamable HTTP first).
        call_timeout: seconds a forwarded tool call may take (None: no limit).
        request_timeout: seconds any other forwarded request may take.
        middleware: middleware around the gate, outermost first.
        agent: serve the proxy's own record tools and stamp plans per session, as this agent.
        signing_key: signs the fencing tokens sent upstream.
        single_client: the proxy serves exactly one client (a stdio front): the upstream's
            requests made outside any forwarded request (roots, elicitation, sampling) go to it.

    Yields:
        The proxy and its MCP server, ready to `run` on a transport.
    """
    relay = Relay(ask_timeout=call_timeout, single_client=single_client)
    async with Upstream(
        target,
        mode=mode,
        call_timeout=call_timeout,
        request_timeout=request_timeout,
        relay=relay,
    ) as upstream:
        proxy = PlanfenceProxy(
            gate, upstream, relay=relay, middleware=middleware, agent=agent, signing_key=signing_key
        )
        yield proxy, proxy.build_server()
