"""The PlanFence MCP proxy: between MCP clients and one upstream MCP server, it passes every
message on as it came, except that each `tools/call` goes through the gate first.

    client --(stdio | streamable HTTP | in-process, either protocol era)--> proxy --> upstream

It reads only enough of each JSON-RPC message to route it (`jsonrpc.py`):

- `tools/call` (in either era, alone or in a batch, task-augmented or not) is judged by the gate
  (`gating.py`); a refused call is answered by the proxy (`results.py`) and never reaches the
  upstream; an allowed one goes upstream with its fencing token, and its result comes back with
  `_meta["dev.planfence/decision"]`.
- `tools/list` comes back as the upstream answered it, with the proxy's own tools added for
  `--agent` (`sessions.py`).
- The handshake (`initialize`, `server/discover`) is answered by the proxy from the upstream's,
  so the proxy knows each client's era; so are the requests about the client's own connection
  (log level, resource subscriptions, `subscriptions/listen`), which `relay.py` keeps.
- Every other request, notification, answer, progress and cancellation passes byte for byte in
  both directions; only a request's id (or progress token) is renamed when another client's in
  flight has it, and only its envelope when its era is not the upstream's (`bridge.py`).
- A method the proxy cannot classify is refused (`METHOD_NOT_FOUND`), never forwarded, and so is
  a malformed message: a protocol revision cannot open a path around the gate.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from planfence.plugins.gate import Gate, GateMiddleware, Middleware, Policy
from planfence.plugins.gate.fence import TokenSigner
from planfence.shared_memory import AsyncStore
from planfence.shared_memory.extras import extra_imports

from . import bridge, tracing
from . import jsonrpc as rpc
from .catalog import ToolCatalog
from .gating import GatedCalls
from .inflight import InFlight
from .links import UpstreamFailure, UpstreamTarget
from .peers import Batch, Call, Deliver, Loose, Peer
from .relay import Relay
from .sessions import SessionPlans
from .upstream import Upstream, UpstreamMode

if TYPE_CHECKING:
    from mcp.server import Server

with extra_imports("mcp", "the MCP proxy"):
    from ._extra import require

    require()

logger = logging.getLogger("planfence.mcp")

__all__ = ["PlanfenceProxy", "open_proxy"]


class PlanfenceProxy:
    """Routes the messages of the proxy's clients and its upstream (see the module docstring).

    Args:
        gate: judges each call (and audits it in its store's decision log).
        upstream: the upstream connection (`Upstream`).
        name: the name the proxy gives itself to its clients.
        middleware: middleware around the gate, outermost first (see `GateMiddleware`).
        agent: serve the proxy's own record tools and stamp plans for calls without one, as
            this agent (see `sessions.py`); None: every plan comes in `_meta`.
        signing_key: signs the fencing tokens sent upstream (an Ed25519 `SigningKey`).
        single_client: the proxy serves exactly one client (a stdio front): the upstream's
            requests made outside any forwarded request (roots, elicitation, sampling) go to it.
    """

    def __init__(
        self,
        gate: Gate,
        upstream: Upstream,
        *,
        name: str = "planfence-proxy",
        middleware: Iterable[Middleware] = (),
        agent: str | None = None,
        signing_key: TokenSigner | None = None,
        single_client: bool = False,
    ) -> None:
        self.gate = gate
        self.upstream = upstream
        self.name = name
        self.seam = GateMiddleware(
            gate.store, gate.policy, gate=gate, middleware=middleware, signing_key=signing_key
        )
        self.catalog = ToolCatalog(upstream)
        self.sessions = SessionPlans(gate.store, gate.policy, agent) if agent else None
        self.relay = Relay(self, single_client=single_client, ask_timeout=upstream.call_timeout)
        self.calls = GatedCalls(self)
        self.peers: list[Peer] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self.flight = InFlight(self)
        upstream.on_response = self.flight.answered
        upstream.on_message = self.relay.on_message
        upstream.on_lost = self.flight.lost
        upstream.on_connect = self._connected
        upstream.tool_schema = self.catalog.input_schema

    @property
    def policy(self) -> Policy:
        return self.gate.policy

    @property
    def store(self) -> AsyncStore:
        return self.gate.store

    def start(self) -> None:
        """For an upstream connected before the proxy was built: what follows a connection."""
        if self.upstream.alive:
            self.upstream.spawn(self._connected)

    def uncovered_tools(self, tools: list[str]) -> list[str]:
        """Upstream tools the policy says nothing about (every call to them will be blocked)."""
        return self.policy.uncovered_tools(tools)

    # -- clients ------------------------------------------------------------------------------

    def connect(self, deliver: Deliver, *, session: bool = True, modern: bool = False) -> Peer:
        """A new client connection; `deliver` puts the proxy's messages on its wire."""
        peer = Peer(deliver, session=session, modern=modern)
        self.peers.append(peer)
        return peer

    def disconnect(self, peer: Peer) -> None:
        """The client went away: its requests are abandoned (cancelled upstream)."""
        if peer.closed:
            return
        peer.closed = True
        if peer in self.peers:
            self.peers.remove(peer)
        for call in list(peer.calls.values()):
            del peer.calls[call.id]
            self._abandon(call, "the client went away")
        self.relay.forget(peer)

    def receive(
        self, peer: Peer, data: bytes, *, exchange: Any = None, agent: str | None = None
    ) -> bool:
        """One message (or batch) from a client, as it came; whether an answer will follow."""
        try:
            value = rpc.decode(data)
        except rpc.Malformed as exc:
            peer.send(exc.reply(), Loose(exchange), final=True)
            return True
        return self.receive_message(peer, value, data, exchange=exchange, agent=agent)

    def take(self, peer: Peer, data: bytes) -> Coroutine[Any, Any, None] | None:
        """`receive`, for a front that reads its client's messages one after the other: the
        judging of a single `tools/call` is returned for the front to await before it reads
        the next message (no task, no wait for the upstream in it)."""
        try:
            value = rpc.decode(data)
        except rpc.Malformed as exc:
            peer.send(exc.reply(), Loose(None), final=True)
            return None
        if isinstance(value, list):
            self.receive_message(peer, value, data)
            return None
        work: list[Coroutine[Any, Any, None]] = []
        self._dispatch(peer, value, data, None, None, None, work)
        return work[0] if work else None

    def receive_message(
        self,
        peer: Peer,
        value: Any,
        raw: bytes | None = None,
        *,
        exchange: Any = None,
        agent: str | None = None,
    ) -> bool:
        """One decoded message (or batch) from a client; whether an answer will follow."""
        if not isinstance(value, list):
            return self._dispatch(peer, value, raw, exchange, agent, None)
        if not value:
            reply = rpc.error(None, rpc.INVALID_REQUEST, "Invalid Request: empty batch")
            peer.send(reply, Loose(exchange), final=True)
            return True
        batch = Batch(peer, exchange)
        answered = [self._dispatch(peer, m, None, exchange, agent, batch) for m in value]
        batch.sealed = True
        batch.flush()
        return any(answered)

    def _dispatch(
        self,
        peer: Peer,
        message: Any,
        raw: bytes | None,
        exchange: Any,
        agent: str | None,
        batch: Batch | None,
        inline: list[Coroutine[Any, Any, None]] | None = None,
    ) -> bool:
        try:
            kind = rpc.check(message)
        except rpc.Malformed as exc:
            self._loose(peer, exc.reply(), exchange, batch)
            return True
        if kind == "response":
            self.relay.answered(peer, message, raw)
            return False
        if kind == "notification":
            self._notified(peer, message, raw)
            return False
        method, msg_id = message["method"], message["id"]
        if msg_id in peer.calls:
            reply = rpc.error(msg_id, rpc.INVALID_REQUEST, "a request with this id is in flight")
            self._loose(peer, reply, exchange, batch)
            return True
        modern = rpc.is_modern(message)
        if modern and not peer.initialized:
            peer.modern = True
            self.relay.first_client.set()
        call = Call(peer, msg_id, method, modern)
        call.exchange, call.agent = exchange, agent
        if modern:  # the client's log-level opt-in, for this request alone
            call.log_level = message["params"]["_meta"].get(rpc.LOG_LEVEL)
        if batch is not None:
            call.batch = batch
            batch.expect()
        peer.calls[msg_id] = call
        route = rpc.CLIENT.get(method)
        if route == rpc.GATED and inline is not None and tracing.quiet():
            inline.append(self.calls.handle(call, message, inline=True))
        elif route == rpc.GATED:
            call.task = self.spawn(self.calls.handle(call, message))
        elif route == rpc.FORWARD:
            self.flight.forward(call, message, raw)
        elif route == rpc.LOCAL:
            self._local(call, rpc.params_of(message))
        else:
            call.fail(rpc.METHOD_NOT_FOUND, f"Method not found: {method} (refused by the proxy)")
        return True

    def _loose(self, peer: Peer, reply: dict[str, Any], exchange: Any, batch: Batch | None) -> None:
        if batch is not None:
            batch.add(None, reply)
        else:
            peer.send(reply, Loose(exchange), final=True)

    def _notified(self, peer: Peer, message: dict[str, Any], raw: bytes | None) -> None:
        method = message["method"]
        params = rpc.params_of(message)
        if method == "notifications/initialized":
            peer.initialized, peer.modern = True, False
            self.relay.first_client.set()
        elif method == "notifications/cancelled":
            request_id = params.get("requestId")
            call = peer.calls.pop(request_id, None) if rpc.valid_id(request_id) else None
            if call is not None:
                reason = str(params.get("reason") or "cancelled by the client")
                self._abandon(call, reason, message, raw)
        elif method in rpc.CLIENT_NOTIFICATIONS:
            upstream = self.upstream
            if upstream.modern and method == "notifications/roots/list_changed":
                return  # 2026-era servers ask for roots with each request that needs them
            if rpc.is_modern(message) != upstream.modern and "params" in message:
                message, raw = (
                    bridge.to_upstream(message, not upstream.modern, peer, upstream),
                    None,
                )
            try:
                upstream.send(message, raw)
            except UpstreamFailure:
                logger.debug("could not pass %s on: the upstream is gone", method)
        else:
            logger.debug("dropped a client notification the proxy does not know: %s", method)

    def _abandon(
        self,
        call: Call,
        reason: str,
        notice: dict[str, Any] | None = None,
        raw: bytes | None = None,
    ) -> None:
        """The client cancelled its request (or went away): nothing more is sent for it. The
        client's cancellation (`notice`) goes upstream as it came when the ids match."""
        self.relay.unlisten(call)
        if call.task is not None and not call.task.done():
            self.flight.settle(call)
            call.task.cancel()
        else:
            self.flight.abandon(call, reason, notice, raw)
        if call.batch is not None:
            call.batch.waiting -= 1
            call.batch.flush()

    # -- what the proxy answers itself -----------------------------------------------------

    def _local(self, call: Call, params: dict[str, Any]) -> None:
        upstream, method = self.upstream, call.method
        if method == "initialize":
            call.peer.modern = False
            capabilities = params.get("capabilities")
            call.peer.capabilities = capabilities if isinstance(capabilities, dict) else {}
            call.reply(bridge.initialize_result(upstream, params.get("protocolVersion")))
        elif method == "server/discover":
            call.reply(bridge.discover_result(upstream))
        elif method == "subscriptions/listen":
            self.relay.listen(call, params)
        elif method == "logging/setLevel":
            level = params.get("level")
            if level not in rpc.LEVELS:
                call.fail(rpc.INVALID_PARAMS, f"not a log level: {level!r}")
            else:
                call.task = self.spawn(self._connection(call, self.relay.set_level(call, level)))
        else:  # resources/subscribe, resources/unsubscribe
            uri = params.get("uri")
            resources = upstream.capabilities.get("resources")
            if upstream.modern or not (isinstance(resources, dict) and resources.get("subscribe")):
                call.fail(rpc.METHOD_NOT_FOUND, f"Method not found: {method}")
            elif not isinstance(uri, str):
                call.fail(rpc.INVALID_PARAMS, f"{method} takes a resource uri")
            elif method == "resources/subscribe":
                call.task = self.spawn(self._connection(call, self.relay.subscribe(call, uri)))
            else:
                call.task = self.spawn(self._connection(call, self.relay.unsubscribe(call, uri)))

    async def _connection(self, call: Call, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        except UpstreamFailure as exc:
            call.fail(rpc.INTERNAL_ERROR, str(exc))
        else:
            call.reply({})

    async def _connected(self) -> None:
        """After each connection to the upstream: renew what the clients watch."""
        if self.upstream.connects > 1:
            await self.relay.resubscribe()
        if self.upstream.modern:
            await self.relay.own_listen()

    def spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("proxy task failed", exc_info=task.exception())

    async def aclose(self) -> None:
        for peer in list(self.peers):
            self.disconnect(peer)
        for task in list(self._tasks):
            task.cancel()


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
    """Connect the upstream and build the proxy; the upstream closes on exit.

    Args:
        gate: judges each call (and audits it in its store's decision log).
        target: the upstream: a URL, or a stdio command (`stdio_upstream([...])`).
        mode: how to reach the upstream ("auto": its newest protocol era).
        call_timeout: seconds a forwarded tool call may take (None: no limit).
        request_timeout: seconds any other forwarded request may take.
        middleware: middleware around the gate, outermost first.
        agent: serve the proxy's own record tools and stamp plans per session, as this agent.
        signing_key: signs the fencing tokens sent upstream.
        single_client: the proxy serves exactly one client (see `PlanfenceProxy`).

    Yields:
        The proxy, and the proxy as an in-process MCP server, for `mcp.Client(server)`
        (`serve.py` serves the proxy on stdio or HTTP instead).
    """
    from .in_process import InProcessServer

    upstream = Upstream(
        target, mode=mode, call_timeout=call_timeout, request_timeout=request_timeout
    )
    proxy = PlanfenceProxy(
        gate,
        upstream,
        middleware=middleware,
        agent=agent,
        signing_key=signing_key,
        single_client=single_client,
    )
    async with upstream:
        try:
            yield proxy, InProcessServer(proxy)
        finally:
            await proxy.aclose()
