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
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

import anyio
import anyio.abc

from planfence.shared_memory.extras import extra_imports

with extra_imports("mcp", "the MCP proxy"):
    import mcp  # noqa: F401  (the `mcp` extra)

import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.server import Server
from mcp.server.caching import CACHEABLE_METHODS, CacheableMethod, CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import ListenHandler
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, HEADER_MISMATCH, LOG_LEVEL_META_KEY, REQUEST_TIMEOUT
from pydantic import TypeAdapter

from planfence.plugins.gate import BLOCK, Gate, Policy, Verdict
from planfence.plugins.gate.gate import AUDIT_SOURCE
from planfence.shared_memory import AsyncStore, Decision, PlanFenceError, validate_agent

from .relay import DEFAULT_LEGACY_LOG_LEVEL, Origin, Peer, Relay, is_modern, no_origin
from .results import (
    INPUT_REFUSED,
    MALFORMED_META,
    PROXY_ERROR,
    UPSTREAM_ERROR,
    UPSTREAM_TIMEOUT,
    UPSTREAM_UNAVAILABLE,
    ProxyFailure,
    decision_meta,
    to_wire_result,
)

logger = logging.getLogger("planfence.mcp")

META_PLAN = "dev.planfence/plan"
META_AGENT = "dev.planfence/agent"
META_DECISION = "dev.planfence/decision"
RESERVED_PREFIX = "io.modelcontextprotocol/"
PROGRESS_TOKEN = "progressToken"

UpstreamMode = Literal["auto", "legacy"]
UpstreamTarget = StdioServerParameters | str

_RAW = TypeAdapter(dict[str, Any])
_NO_CACHE = cast(
    "dict[CacheableMethod, CacheHint]",
    {m: CacheHint(ttl_ms=0, scope="private") for m in CACHEABLE_METHODS},
)
# Parametrised once: building a generic pydantic class per call costs more than the call.
_RawRequest = types.Request[dict[str, Any], str]


class UpstreamFailure(PlanFenceError):
    """The upstream could not answer: it is gone, it timed out, or it answered with an error."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


def stdio_upstream(command: list[str], *, cwd: str | None = None) -> StdioServerParameters:
    """Spawn parameters for an upstream command; it inherits the proxy's environment, as it
    would if the MCP client had launched it directly."""
    if not command:
        raise ValueError("an upstream command is required")
    return StdioServerParameters(
        command=command[0], args=command[1:], env=dict(os.environ), cwd=cwd
    )


def forwardable_meta(meta: Any) -> dict[str, Any] | None:
    """The `_meta` to send upstream: everything but the protocol envelope and progress token
    (the proxy's upstream connection mints its own token when the caller asked for progress)."""
    if not isinstance(meta, Mapping):
        return None
    out = {
        k: v
        for k, v in meta.items()
        if isinstance(k, str) and not k.startswith(RESERVED_PREFIX) and k != PROGRESS_TOKEN
    }
    return out or None


def _clean_result_meta(result: dict[str, Any]) -> dict[str, Any]:
    meta = result.get("_meta")
    if isinstance(meta, Mapping):
        kept = {k: v for k, v in meta.items() if not str(k).startswith(RESERVED_PREFIX)}
        if kept:
            result["_meta"] = kept
        else:
            result.pop("_meta", None)
    return result


@dataclass
class _Connection:
    client: Client | None = None
    closed: anyio.Event = field(default_factory=anyio.Event)
    dead: bool = False


class Upstream:
    """One connection to the upstream MCP server, shared by every client of the proxy and
    reopened (the command respawned) on the next request after it dies.

    Args:
        target: spawn parameters of a stdio server, or the URL of a streamable-HTTP server.
        mode: "auto" discovers the upstream's protocol era and falls back to the initialize
            handshake; "legacy" always uses the handshake.
        call_timeout: seconds before a `tools/call` is abandoned (and cancelled upstream).
        request_timeout: the same for listing, reading and the other pass-through requests.
    """

    def __init__(
        self,
        target: UpstreamTarget,
        *,
        mode: UpstreamMode = "auto",
        call_timeout: float | None = 60.0,
        request_timeout: float | None = 30.0,
        relay: Relay | None = None,
    ) -> None:
        self.target = target
        self.mode: UpstreamMode = mode
        self.call_timeout = call_timeout
        self.request_timeout = request_timeout
        self.relay = relay
        self._conn: _Connection | None = None
        self._modern = False
        self._lock = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None
        self._stack: AsyncExitStack | None = None
        self.connects = 0
        # Run (in the background) after the upstream was reconnected: state the old
        # connection held, such as resource subscriptions, is re-established.
        self.on_reconnect: Callable[[], Awaitable[None]] | None = None

    async def __aenter__(self) -> Upstream:
        self._stack = AsyncExitStack()
        self._tg = await self._stack.enter_async_context(anyio.create_task_group())
        try:
            await self._connection()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._conn is not None:
            self._conn.closed.set()
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()
        self._tg = None

    @property
    def client(self) -> Client:
        """The current upstream client (for its negotiated era, capabilities and identity)."""
        if self._conn is None or self._conn.client is None:
            raise RuntimeError("the upstream is not connected")
        return self._conn.client

    async def _hold(self, conn: _Connection, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        started = False
        relay = self.relay
        callbacks: dict[str, Any] = {}
        if relay is not None:
            # The proxy answers the upstream's requests by asking its own clients, so it
            # declares sampling, elicitation and roots; a client without them gets the
            # upstream's question refused with the usual "not supported" error.
            callbacks = {
                "sampling_callback": relay.on_sampling,
                "elicitation_callback": relay.on_elicitation,
                "list_roots_callback": relay.on_list_roots,
                "logging_callback": relay.on_log,
                "message_handler": relay.on_notification,
            }
        try:
            # No response cache: the proxy forwards, its callers decide what to cache.
            async with (
                Client(
                    self.target,
                    mode=self.mode,
                    cache=None,
                    client_info=types.Implementation(name="planfence-proxy", version=_version()),
                    **callbacks,
                ) as client,
                anyio.create_task_group() as tg,
            ):
                conn.client = client
                self._modern = is_modern(client.protocol_version)
                if isinstance(self.target, str) and self._modern:
                    # A 2026-era HTTP upstream checks the `Mcp-Param-*` headers its tools
                    # declare (`x-mcp-header`); the client mirrors them from its listing.
                    await self._learn_tool_headers(client)
                started = True
                task_status.started()
                if relay is not None and is_modern(client.protocol_version):
                    tg.start_soon(self._listen, client, relay)
                await conn.closed.wait()
                tg.cancel_scope.cancel()
        except Exception:
            if not started:
                raise
            # The connection died under us; the next request reconnects.
            logger.debug("upstream connection closed with an error", exc_info=True)
        finally:
            conn.dead = True

    async def _connection(self) -> _Connection:
        conn = self._conn
        if conn is not None and not conn.dead:
            return conn
        async with self._lock:
            conn = self._conn
            if conn is not None and not conn.dead:
                return conn
            if conn is not None:
                conn.closed.set()
            if self._tg is None:
                raise UpstreamFailure(UPSTREAM_UNAVAILABLE, "the proxy is shutting down")
            fresh = _Connection()
            try:
                # The connection's tasks outlive the request that happens to open it.
                with anyio.fail_after(self.request_timeout), no_origin():
                    await self._tg.start(self._hold, fresh)
            except TimeoutError:
                fresh.closed.set()
                raise UpstreamFailure(
                    UPSTREAM_UNAVAILABLE, "the upstream server did not start in time"
                ) from None
            except Exception as exc:
                fresh.closed.set()
                raise UpstreamFailure(
                    UPSTREAM_UNAVAILABLE, f"cannot connect to the upstream server: {_leaf(exc)}"
                ) from exc
            self._conn = fresh
            self.connects += 1
            if self.connects > 1 and self.on_reconnect is not None:
                self.spawn(self.on_reconnect)
            return fresh

    def spawn(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run `work` in the background, tied to no client request (dropped when closing)."""
        if self._tg is None:
            return

        async def run() -> None:
            try:
                await work()
            except Exception:
                logger.debug("background upstream work failed", exc_info=True)

        with no_origin():
            self._tg.start_soon(run)

    async def _learn_tool_headers(self, client: Client) -> None:
        """List the upstream's tools through the client session, which records the headers
        each tool's calls must carry."""
        cursor: str | None = None
        try:
            with anyio.fail_after(self.request_timeout):
                for _ in range(100):
                    page = await client.session.list_tools(
                        params=types.PaginatedRequestParams(cursor=cursor)
                    )
                    cursor = page.next_cursor
                    if cursor is None:
                        return
        except Exception:
            logger.debug("could not list the upstream's tools", exc_info=True)

    async def _listen(self, client: Client, relay: Relay) -> None:
        """Relay a 2026-era upstream's change events (it sends them only on a listen stream)."""
        caps = client.server_capabilities
        tools = bool(caps.tools and caps.tools.list_changed)
        prompts = bool(caps.prompts and caps.prompts.list_changed)
        resources = bool(caps.resources and caps.resources.list_changed)
        if not (tools or prompts or resources):
            return
        try:
            async with client.listen(
                tools_list_changed=tools,
                prompts_list_changed=prompts,
                resources_list_changed=resources,
            ) as subscription:
                async for event in subscription:
                    await relay.publish(event)
        except Exception:
            logger.debug("the upstream's change-event stream ended", exc_info=True)

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        read_timeout: float | None = None,
        on_progress: ProgressFnT | None = None,
    ) -> dict[str, Any]:
        """Send one request upstream and return its raw result.

        Raises:
            UpstreamFailure: the upstream is gone, timed out, or answered with an error.
        """
        conn = await self._connection()
        assert conn.client is not None
        client = conn.client
        request = _RawRequest(method=method, params=dict(params or {}))
        try:
            try:
                raw = await self._send(client, request, read_timeout, on_progress)
            except MCPError as exc:
                if exc.code != HEADER_MISMATCH or method != "tools/call":
                    raise
                # The upstream's tools changed since they were listed: the SDK's own recovery
                # is to list them again and resend once.
                await self._learn_tool_headers(client)
                raw = await self._send(client, request, read_timeout, on_progress)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                conn.dead = True
                conn.closed.set()
                raise UpstreamFailure(
                    UPSTREAM_UNAVAILABLE, f"the upstream server went away during {method}"
                ) from exc
            if exc.code == REQUEST_TIMEOUT:
                raise UpstreamFailure(
                    UPSTREAM_TIMEOUT,
                    f"the upstream server did not answer {method} in {read_timeout} s",
                ) from exc
            raise UpstreamFailure(UPSTREAM_ERROR, f"{exc.error.message} (code {exc.code})") from exc
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            conn.dead = True
            conn.closed.set()
            raise UpstreamFailure(
                UPSTREAM_UNAVAILABLE, f"the upstream server went away: {exc}"
            ) from exc
        result = _clean_result_meta(dict(raw))
        # Results of handshake-era upstreams are complete by definition; 2026-era callers
        # require the field (handshake-era callers never see it).
        result.setdefault("resultType", "complete")
        return result

    @staticmethod
    async def _send(
        client: Client,
        request: _RawRequest,
        read_timeout: float | None,
        on_progress: ProgressFnT | None,
    ) -> dict[str, Any]:
        # The raw dict keeps every field the upstream sent and skips the client-side
        # output-schema check: the proxy returns results, it does not consume them.
        # (`send_request` takes a TypeAdapter at run time; its annotation only names models.)
        raw: dict[str, Any] = await client.session.send_request(
            request,
            _RAW,  # type: ignore[type-var]
            request_read_timeout_seconds=read_timeout,
            progress_callback=on_progress,
        )
        return raw

    @property
    def modern(self) -> bool:
        """Whether the upstream speaks the 2026-07-28 protocol (as of its last connection)."""
        return self._modern


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
        return await self._passthrough("tools/list")(ctx, params)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> dict[str, Any]:
        tool = params.name
        try:
            return await self._gated_call(ctx, tool, params)
        except Exception as exc:  # a handler exception would become a protocol error
            logger.exception("proxy failure on %s", tool)
            return to_wire_result(ProxyFailure(PROXY_ERROR, tool, f"{type(exc).__name__}: {exc}"))

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
        return [t for t in tools if self.policy.get(t) is None]


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


def _leaf(exc: BaseException) -> str:
    """The first underlying error of a (possibly nested) exception group, as text."""
    while (inner := getattr(exc, "exceptions", None)) and isinstance(inner[0], BaseException):
        exc = inner[0]
    return str(exc) or type(exc).__name__


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("planfence")
    except Exception:
        return "0"


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
