"""The PlanFence MCP proxy: an MCP server that forwards to one upstream MCP server and passes
every `tools/call` through the gate first.

    client --(stdio | streamable HTTP, either protocol era)--> proxy --> upstream server

What the proxy changes on the way through, and nothing else:

- `tools/call` params `_meta` carries `dev.planfence/plan` (the plan record id; required for gated
  tools) and `dev.planfence/agent` (the calling agent, optional). The gate judges the call; a
  refused call is answered by the proxy (see `results.py`) and never reaches the upstream.
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

`tools/list`, resources, prompts and completions pass through unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import anyio
import anyio.abc

from planfence.shared_memory.extras import extra_imports

with extra_imports("mcp", "the MCP proxy"):
    import mcp  # noqa: F401  (the `mcp` extra)

import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import ListenHandler
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types import LOG_LEVEL_META_KEY

from planfence.plugins.gate import BLOCK, Decision, Gate, Policy, Verdict
from planfence.plugins.gate.gate import AUDIT_SOURCE
from planfence.shared_memory import AsyncStore, PlanFenceError, validate_agent

from .catalog import ToolCatalog
from .meta import (
    META_AGENT,
    META_DECISION,
    META_PLAN,
    PROGRESS_TOKEN,
    forwardable_meta,
)
from .relay import DEFAULT_LEGACY_LOG_LEVEL, Origin, Peer, Relay
from .results import (
    INPUT_REFUSED,
    MALFORMED_META,
    PROXY_ERROR,
    UPSTREAM_ERROR,
    ProxyFailure,
    decision_meta,
    fit_to_tool,
    to_wire_result,
)
from .upstream import (
    _NO_CACHE,
    Upstream,
    UpstreamFailure,
    UpstreamMode,
    UpstreamTarget,
    _version,
    stdio_upstream,
)

logger = logging.getLogger("planfence.mcp")

__all__ = [
    "PlanFenceProxy",
    "UpstreamFailure",
    "UpstreamMode",
    "UpstreamTarget",
    "forwardable_meta",
    "open_proxy",
    "stdio_upstream",
]


class PlanFenceProxy:
    """Builds the proxy's MCP server: handlers that gate `tools/call` and pass the rest through.

    Args:
        gate: judges each call (and audits it in its store's decision log).
        upstream: the connected upstream server.
        name: the name the proxy gives itself to its clients.
        relay: delivers what the upstream sends besides answers (the upstream's own relay).
    """

    def __init__(
        self,
        gate: Gate,
        upstream: Upstream,
        *,
        name: str = "planfence-proxy",
        relay: Relay | None = None,
    ) -> None:
        self.gate = gate
        self.upstream = upstream
        self.name = name
        self.relay = relay or upstream.relay or Relay()
        self._subscribers: dict[str, int] = {}
        self.catalog = ToolCatalog(upstream)
        self.relay.on_forget = self._release
        upstream.on_reconnect = self._resubscribe

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
            "on_call_tool": self._call_tool,
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
        if subscribe:
            server.add_request_handler(
                "resources/subscribe", types.SubscribeRequestParams, self._subscribe
            )
            server.add_request_handler(
                "resources/unsubscribe", types.UnsubscribeRequestParams, self._unsubscribe
            )
        # Handshake-era clients choose their log level; registered here rather than as a
        # constructor argument, which warns that 2026-era logging is per request.
        server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, self._set_level)
        server.add_notification_handler(
            "notifications/roots/list_changed", types.NotificationParams, self._roots_changed
        )
        return server

    def _passthrough(
        self, method: str
    ) -> Callable[[ServerRequestContext[Any], Any], Awaitable[dict[str, Any]]]:
        async def handler(ctx: ServerRequestContext[Any], params: Any) -> dict[str, Any]:
            with self.relay.forwarding(ctx) as origin:
                try:
                    return await self._forward(
                        origin, method, ctx.params, self.upstream.request_timeout
                    )
                except UpstreamFailure as exc:
                    # Not a tool call: there is no result shape for a failure, so it is an error.
                    raise MCPError(code=types.INTERNAL_ERROR, message=str(exc)) from None
                except _InputRefused as exc:
                    raise MCPError.from_error_data(exc.error) from None

        return handler

    async def _forward(
        self,
        origin: Origin,
        method: str,
        params: Mapping[str, Any] | None,
        read_timeout: float | None,
        on_progress: ProgressFnT | None = None,
    ) -> dict[str, Any]:
        """Send a client's request upstream; for a handshake-era client, also answer the
        questions a 2026-era upstream asks back (`input_required`) by asking the client.

        Every retry is a new upstream request: a gated call is judged again before each one
        (`origin.recheck`), as the plan may have gone stale while the client answered.

        Raises:
            UpstreamFailure: the upstream could not answer.
            _InputRefused: the client could not or would not answer the upstream's question.
            _Revoked: the gate no longer allows the call; nothing more was sent upstream.
        """
        out = self._forward_params(origin, params)
        result = await self.upstream.request(
            method, out, read_timeout=read_timeout, on_progress=on_progress
        )
        rounds = 0
        delay = 0.05
        while result.get("resultType") == "input_required" and not origin.peer.modern:
            rounds += 1
            if rounds > MAX_INPUT_ROUNDS:
                message = f"the upstream asked for input more than {MAX_INPUT_ROUNDS} times"
                raise UpstreamFailure(UPSTREAM_ERROR, message)
            requests = result.get("inputRequests")
            retry = dict(out)
            retry.pop("inputResponses", None)
            retry.pop("requestState", None)
            if isinstance(requests, Mapping) and requests:
                answers = await self.relay.answer_input_requests(origin, requests)
                if isinstance(answers, types.ErrorData):
                    raise _InputRefused(answers)
                retry["inputResponses"] = answers
                delay = 0.05
            else:
                await anyio.sleep(delay)
                delay = min(delay * 2, 0.25)
            if result.get("requestState") is not None:
                retry["requestState"] = result["requestState"]
            if origin.recheck is not None and not await origin.recheck():
                raise _Revoked
            result = await self.upstream.request(
                method, retry, read_timeout=read_timeout, on_progress=on_progress
            )
        return result

    def _forward_params(self, origin: Origin, params: Mapping[str, Any] | None) -> dict[str, Any]:
        out = dict(params or {})
        raw_meta = out.pop("_meta", None)
        meta = forwardable_meta(raw_meta)
        if self.upstream.modern:
            # A 2026-era upstream sends logs only to requests that opt in: a 2026-era client's
            # own choice is kept, a handshake-era client gets the level it set (or every level).
            if origin.peer.modern:
                level = raw_meta.get(LOG_LEVEL_META_KEY) if isinstance(raw_meta, Mapping) else None
            else:
                level = origin.peer.log_level or DEFAULT_LEGACY_LOG_LEVEL
            if level is not None:
                meta = {**(meta or {}), LOG_LEVEL_META_KEY: level}
        if meta:
            out["_meta"] = meta
        return out

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> dict[str, Any]:
        listing = await self._passthrough("tools/list")(ctx, params)
        self.catalog.observe(listing)
        return listing

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> dict[str, Any]:
        tool = params.name
        try:
            result = await self._gated_call(ctx, tool, params)
        except Exception as exc:  # a handler exception would become a protocol error
            logger.exception("proxy failure on %s", tool)
            result = to_wire_result(ProxyFailure(PROXY_ERROR, tool, f"{type(exc).__name__}: {exc}"))
        return await fit_to_tool(result, tool, self.catalog)

    async def _gated_call(
        self, ctx: ServerRequestContext[Any], tool: str, params: types.CallToolRequestParams
    ) -> dict[str, Any]:
        raw = dict(ctx.params or {})
        meta = raw.get("_meta")
        meta = meta if isinstance(meta, Mapping) else {}
        args = params.arguments or {}
        plan = meta.get(META_PLAN)
        agent = meta.get(META_AGENT)
        if agent is not None:
            try:
                validate_agent(agent)
            except PlanFenceError as exc:
                return to_wire_result(await self._malformed(tool, plan, f"{META_AGENT}: {exc}"))

        judge = _Judge(self.gate, tool, args, plan, agent)
        if not await judge.recheck():
            return to_wire_result(judge.verdict)
        # Forward exactly the call that was judged, whatever else the raw request carried.
        raw["name"] = tool
        raw["arguments"] = dict(args)

        on_progress = None
        if meta.get(PROGRESS_TOKEN) is not None:

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                await ctx.session.report_progress(progress, total, message)

        with self.relay.forwarding(ctx, judge.recheck) as origin:
            try:
                result = await self._forward(
                    origin, "tools/call", raw, self.upstream.call_timeout, on_progress
                )
            except _Revoked:
                return to_wire_result(judge.verdict)
            except UpstreamFailure as exc:
                if not judge.allowed:
                    return to_wire_result(judge.verdict)
                return to_wire_result(
                    ProxyFailure(exc.code, tool, str(exc), decision_meta(judge.verdict))
                )
            except _InputRefused as exc:
                if not judge.allowed:
                    return to_wire_result(judge.verdict)
                message = f"the client did not answer the upstream's question: {exc.error.message}"
                return to_wire_result(
                    ProxyFailure(INPUT_REFUSED, tool, message, decision_meta(judge.verdict))
                )
        if not judge.allowed:
            # Judged again mid-call (a handshake-era upstream's question) and refused: the
            # upstream got an error instead of the answer; its result is not the client's.
            return to_wire_result(judge.verdict)
        out_meta = dict(result.get("_meta") or {})
        out_meta[META_DECISION] = decision_meta(judge.verdict)
        result["_meta"] = out_meta
        return result

    # -- handshake-era client requests and notices that concern the connection ------------------

    async def _subscribe(
        self, ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams
    ) -> dict[str, Any]:
        peer = self.relay.peer(ctx)
        uri = params.uri
        if uri not in peer.subscriptions:
            # One upstream subscription per resource, however many clients watch it.
            if self._subscribers.get(uri, 0) == 0:
                await self._upstream_or_error("resources/subscribe", {"uri": uri})
            self._subscribers[uri] = self._subscribers.get(uri, 0) + 1
            peer.subscriptions.add(uri)
        return {}

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams
    ) -> dict[str, Any]:
        peer = self.relay.peer(ctx)
        uri = params.uri
        if uri in peer.subscriptions:
            peer.subscriptions.discard(uri)
            left = self._subscribers.get(uri, 1) - 1
            if left <= 0:
                self._subscribers.pop(uri, None)
                await self._upstream_or_error("resources/unsubscribe", {"uri": uri})
            else:
                self._subscribers[uri] = left
        return {}

    def _release(self, peer: Peer) -> None:
        """A client connection closed: drop its subscriptions (upstream too, if it was the last
        client watching a resource)."""
        for uri in sorted(peer.subscriptions):
            left = self._subscribers.get(uri, 1) - 1
            if left > 0:
                self._subscribers[uri] = left
                continue
            self._subscribers.pop(uri, None)

            async def unsubscribe(uri: str = uri) -> None:
                if self._subscribers.get(uri, 0) == 0:  # unless a client subscribed again
                    await self.upstream.request(
                        "resources/unsubscribe",
                        {"uri": uri},
                        read_timeout=self.upstream.request_timeout,
                    )

            self.upstream.spawn(unsubscribe)
        peer.subscriptions.clear()

    async def _resubscribe(self) -> None:
        """The upstream was restarted: subscribe again to what the proxy's clients watch."""
        for uri in list(self._subscribers):
            try:
                await self.upstream.request(
                    "resources/subscribe", {"uri": uri}, read_timeout=self.upstream.request_timeout
                )
            except UpstreamFailure as exc:
                logger.warning("could not subscribe again to %s: %s", uri, exc)

    async def _set_level(
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

    async def _roots_changed(self, ctx: ServerRequestContext[Any], params: Any) -> None:
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

    async def _malformed(self, tool: str, plan: Any, message: str) -> Verdict:
        """Refuse a call whose planfence `_meta` has the wrong shape, and audit the refusal."""
        verdict = Verdict(
            BLOCK, MALFORMED_META, tool, plan if isinstance(plan, str) else None, message=message
        )
        try:
            decision_id = await self.store.log(
                Decision(
                    source=AUDIT_SOURCE,
                    verdict=BLOCK,
                    reason=MALFORMED_META,
                    tool=tool,
                    plan=verdict.plan,
                    payload={"message": message, "executor": "mcp-proxy"},
                )
            )
            verdict = replace(verdict, decision_id=decision_id)
        except PlanFenceError:
            logger.warning("could not record a malformed-meta refusal", exc_info=True)
        return verdict

    def uncovered_tools(self, tools: list[str]) -> list[str]:
        """Upstream tools the policy says nothing about (every call to them will be blocked)."""
        return self.policy.uncovered_tools(tools)


MAX_INPUT_ROUNDS = 10  # the official client's limit on input_required rounds
_LOG_ORDER = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]


class _Judge:
    """The gate's latest verdict on one gated call, which `recheck` judges again."""

    __slots__ = ("_verdict", "agent", "args", "gate", "plan", "tool")

    def __init__(
        self, gate: Gate, tool: str, args: Mapping[str, Any], plan: Any, agent: Any
    ) -> None:
        self.gate = gate
        self.tool = tool
        self.args = args
        self.plan = plan
        self.agent = agent
        self._verdict: Verdict | None = None

    @property
    def verdict(self) -> Verdict:
        assert self._verdict is not None, "judged before the first check"
        return self._verdict

    @property
    def allowed(self) -> bool:
        return self._verdict is not None and self._verdict.verdict == "allow"

    async def recheck(self) -> bool:
        self._verdict = await self.gate.check(self.tool, self.args, self.plan, agent=self.agent)
        return self.allowed


class _Revoked(Exception):
    """The gate no longer allows a call that is waiting on the client's answers."""


class _InputRefused(Exception):
    """The client could not or would not answer a question the upstream asked."""

    def __init__(self, error: types.ErrorData) -> None:
        self.error = error
        super().__init__(error.message)


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
) -> AsyncIterator[tuple[PlanFenceProxy, Server[Any]]]:
    """Connect the upstream and build the proxy's server; the upstream closes on exit."""
    relay = Relay(ask_timeout=call_timeout)
    async with Upstream(
        target,
        mode=mode,
        call_timeout=call_timeout,
        request_timeout=request_timeout,
        relay=relay,
    ) as upstream:
        proxy = PlanFenceProxy(gate, upstream, relay=relay)
        yield proxy, proxy.build_server()
