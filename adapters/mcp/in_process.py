"""The proxy as an in-process MCP server, for `mcp.Client(server)` (tests, and applications that
embed the proxy): what `open_proxy` yields.

Over the SDK's in-memory transport (a handshake-era client), the client's messages go to the
proxy as they are, and the proxy's come back as they are. Over the SDK's direct path (a 2026-era
client, no JSON-RPC framing) each request reaches the proxy from inside the SDK's server span,
through one server middleware that hands it over and returns the proxy's answer.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server import Server
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types.methods import MONOLITH_NOTIFICATIONS

from . import jsonrpc as rpc
from .peers import Peer

if TYPE_CHECKING:
    from .proxy import PlanfenceProxy


class InProcessServer(Server[Any]):
    """An MCP `Server` whose every message is the proxy's to route (see the module docstring)."""

    def __init__(self, proxy: PlanfenceProxy) -> None:
        super().__init__(proxy.name)
        self.proxy = proxy
        self.middleware.append(self._relay)  # inside the SDK's OpenTelemetry middleware
        self._direct: Peer | None = None

    async def run(
        self,
        read_stream: Any,
        write_stream: Any,
        initialization_options: Any = None,
        raise_exceptions: bool = False,
        **_: Any,
    ) -> None:
        """Serve one in-memory connection: raw messages both ways, until the client closes."""
        outbox: asyncio.Queue[bytes] = asyncio.Queue()
        peer = self.proxy.connect(lambda data, call, final: outbox.put_nowait(data))

        async def write() -> None:
            while True:
                value = rpc.decode(await outbox.get())
                for message in value if isinstance(value, list) else [value]:
                    typed = types.jsonrpc_message_adapter.validate_python(message, by_name=False)
                    await write_stream.send(SessionMessage(typed))

        writer = asyncio.get_running_loop().create_task(write())
        try:
            async for item in read_stream:
                if isinstance(item, Exception):
                    continue
                message = item.message.model_dump(by_alias=True, mode="json", exclude_unset=True)
                self.proxy.receive_message(peer, message)
        finally:
            self.proxy.disconnect(peer)
            writer.cancel()

    async def _relay(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """One message of a 2026-era in-process client, to the proxy and back."""
        if self._direct is None:
            self._direct = self.proxy.connect(_direct_deliver, modern=True)
            self._direct.traced = True  # the SDK's middleware made the request's span
        message: dict[str, Any] = {"jsonrpc": rpc.JSONRPC, "method": ctx.method}
        if ctx.params is not None:
            message["params"] = dict(ctx.params)
        if ctx.request_id is None:
            self.proxy.receive_message(self._direct, message)
            return None
        message["id"] = ctx.request_id
        exchange = _Direct(ctx)
        self.proxy.receive_message(self._direct, message, exchange=exchange)
        answer = rpc.decode(await exchange.answer)
        failure = answer.get("error")
        if isinstance(failure, dict):
            raise MCPError(failure.get("code", rpc.INTERNAL_ERROR), str(failure.get("message")))
        result: dict[str, Any] = answer.get("result") or {}
        return result


class _Direct:
    """One direct request: its answer, and what belongs to it on the way."""

    def __init__(self, ctx: ServerRequestContext[Any, Any]) -> None:
        self.ctx = ctx
        self.answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.tasks: set[asyncio.Task[None]] = set()

    def notify(self, data: bytes) -> None:
        message = rpc.decode(data)
        model = MONOLITH_NOTIFICATIONS.get(message.get("method"))
        if model is None:
            return
        typed: Any = model.model_validate(message, by_name=False)
        send = self.ctx.session.send_notification(typed, related_request_id=self.ctx.request_id)
        task = asyncio.get_running_loop().create_task(send)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


def _direct_deliver(data: bytes, call: Any, final: bool) -> None:
    exchange = getattr(call, "exchange", None)
    if not isinstance(exchange, _Direct) or not data:
        return
    if final:
        if not exchange.answer.done():
            exchange.answer.set_result(data)
    else:
        exchange.notify(data)
