"""The proxy's streamable-HTTP front: one ASGI app at `/mcp`, for clients of both eras.

- A POST carries one message (or a batch). One without a request is answered 202; otherwise
  the answer is JSON when it is ready before anything else belongs to the request, else an SSE
  stream that carries the request's progress, logs and the upstream's questions, then its answer.
- Handshake era: `initialize` starts a session (`Mcp-Session-Id`); the session's other requests
  carry its id (400 without one, 404 for a session the proxy does not know); a GET opens the
  session's stream for what belongs to no request; DELETE ends the session, and so does
  `idle_timeout` (30 minutes) without a request, an open stream or a call in progress (a client
  that vanished without DELETE leaves nothing behind; its next request is answered 404, and MCP
  clients then start a new session).
- 2026 era: each request stands alone (no session); closing its response stream cancels it.

A body over `MAX_BODY` (4 MiB) is answered 413 before it is read. Who may connect is the
business of the middleware in front (`http_guard.py`, `oauth.py`); the agent an OAuth access
token names travels with each message (`agent_of`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

from . import jsonrpc as rpc
from .peers import Peer
from .proxy import PlanfenceProxy

logger = logging.getLogger("planfence.mcp")

MAX_BODY = 4 * 1024 * 1024
SESSION = b"mcp-session-id"
BUFFERED = 256  # messages kept for a session's GET stream before it opens
IDLE_TIMEOUT = 30 * 60.0  # seconds a handshake-era session may sit unused before it is ended
SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
]

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


class Exchange:
    """One POST's messages on their way out; `final` is its answer."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[bytes, bool]] = asyncio.Queue()
        self.open = True

    def put(self, data: bytes, final: bool) -> None:
        if self.open:
            self.queue.put_nowait((data, final))


class _Session:
    """A handshake-era client's session: its peer and its stream of messages outside requests."""

    def __init__(self, session_id: str) -> None:
        self.id = session_id
        self.header = session_id.encode()
        self.peer: Peer | None = None
        self.outside: asyncio.Queue[bytes] = asyncio.Queue(BUFFERED)
        self.listening = False
        self.last_used = 0.0

    def idle_since(self, moment: float) -> bool:
        """Unused since `moment`: no request after it, no open stream, no call in progress."""
        busy = self.listening or (self.peer is not None and bool(self.peer.calls))
        return not busy and self.last_used < moment

    def deliver(self, data: bytes, call: Any, final: bool) -> None:
        exchange = getattr(call, "exchange", None)
        if isinstance(exchange, Exchange) and exchange.open:
            exchange.put(data, final)
        elif not final and data:
            try:
                self.outside.put_nowait(data)
            except asyncio.QueueFull:
                logger.debug("a session's message was dropped: its GET stream is not open")


def _request_deliver(data: bytes, call: Any, final: bool) -> None:
    exchange = getattr(call, "exchange", None)
    if isinstance(exchange, Exchange):
        exchange.put(data, final)


class HttpFront:
    """The ASGI app (see the module docstring).

    Args:
        proxy: the proxy its clients talk to.
        agent_of: the agent an ASGI request's validated access token names (OAuth mode).
        idle_timeout: seconds after which an unused session is ended (None: never).
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        proxy: PlanfenceProxy,
        *,
        agent_of: Callable[[Scope], str | None] | None = None,
        idle_timeout: float | None = IDLE_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if idle_timeout is not None and not idle_timeout > 0:
            raise ValueError(f"idle_timeout must be positive seconds, not {idle_timeout!r}")
        self.proxy = proxy
        self.agent_of = agent_of
        self.sessions: dict[str, _Session] = {}
        self.idle_timeout = idle_timeout
        self.clock = clock
        self._swept = clock()

    def _end(self, session: _Session) -> None:
        if self.sessions.pop(session.id, None) is None:
            return
        if session.peer is not None:
            self.proxy.disconnect(session.peer)
        with contextlib.suppress(asyncio.QueueFull):
            session.outside.put_nowait(b"")  # wakes its open stream, which then ends

    def _sweep(self) -> None:
        """End the sessions unused for `idle_timeout`; looks at most four times a timeout."""
        if self.idle_timeout is None:
            return
        now = self.clock()
        if now - self._swept < self.idle_timeout / 4:
            return
        self._swept = now
        for session in [s for s in self.sessions.values() if s.idle_since(now - self.idle_timeout)]:
            logger.info("ended MCP session %s: unused for %.0f s", session.id, self.idle_timeout)
            self._end(session)

    def _use(self, session: _Session) -> None:
        session.last_used = self.clock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope.get("path", "").rstrip("/") not in ("/mcp", ""):
            await _plain(send, 404, b"Not Found")
            return
        self._sweep()
        method = scope["method"]
        if method == "POST":
            await self._post(scope, receive, send)
        elif method == "GET":
            await self._get(scope, receive, send)
        elif method == "DELETE":
            session = self.sessions.get(_header(scope, SESSION) or "")
            if session is not None:
                self._end(session)
            await _plain(send, 200 if session is not None else 404, b"")
        else:
            await _plain(send, 405, b"Method Not Allowed", [(b"allow", b"GET, POST, DELETE")])

    async def _post(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _body(scope, receive, send)
        if body is None:
            return
        try:
            value = rpc.decode(body)
        except rpc.Malformed as exc:
            await _json(send, rpc.encode(exc.reply()), 400)
            return
        session_id = _header(scope, SESSION)
        modern = _header(scope, b"mcp-protocol-version") in rpc.MODERN_VERSIONS or (
            isinstance(value, dict) and rpc.is_modern(value)
        )
        session: _Session | None = None
        if session_id is not None:
            session = self.sessions.get(session_id)
            if session is None:
                error = rpc.error(None, rpc.INVALID_REQUEST, "Session not found")
                await _json(send, rpc.encode(error), 404)
                return
        elif isinstance(value, dict) and value.get("method") == "initialize":
            session = _Session(secrets.token_hex(16))
            session.peer = self.proxy.connect(session.deliver)
            self.sessions[session.id] = session
        elif not modern:
            error = rpc.error(None, rpc.INVALID_REQUEST, "Bad Request: Missing session ID")
            await _json(send, rpc.encode(error), 400)
            return
        if session is not None:
            assert session.peer is not None
            self._use(session)
            peer, own = session.peer, False
        else:
            peer, own = self.proxy.connect(_request_deliver, session=False, modern=True), True
        exchange = Exchange()
        agent = self.agent_of(scope) if self.agent_of is not None else None
        try:
            answered = self.proxy.receive_message(peer, value, body, exchange=exchange, agent=agent)
            extra = [(SESSION, session.header)] if session is not None else []
            if not answered:
                await _plain(send, 202, b"", extra)
            else:
                await self._answer(exchange, receive, send, extra)
        finally:
            exchange.open = False
            if session is not None:
                self._use(session)  # idle from the end of its last request, not the start
            if own:
                self.proxy.disconnect(peer)  # a 2026-era request ends with its stream

    async def _answer(
        self, exchange: Exchange, receive: Receive, send: Send, extra: list[tuple[bytes, bytes]]
    ) -> None:
        gone = asyncio.get_running_loop().create_task(_disconnected(receive))
        try:
            data, final = await _next(exchange, gone)
            if final and data:
                await _json(send, data, 200, extra)
                return
            if final:  # every request of a batch was cancelled: nothing is owed
                await _plain(send, 202, b"", extra)
                return
            start = {"type": "http.response.start", "status": 200, "headers": SSE_HEADERS + extra}
            await send(start)
            while True:
                if data:
                    await send(
                        {"type": "http.response.body", "body": _event(data), "more_body": True}
                    )
                if final:
                    break
                data, final = await _next(exchange, gone)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except _Gone:
            return  # the client closed the stream: its requests were abandoned
        finally:
            gone.cancel()

    async def _get(self, scope: Scope, receive: Receive, send: Send) -> None:
        session = self.sessions.get(_header(scope, SESSION) or "")
        if session is None:
            await _plain(send, 405 if _header(scope, SESSION) is None else 404, b"")
            return
        if session.listening:
            await _plain(send, 409, b"Conflict: the session's stream is already open")
            return
        session.listening = True
        # The stream ends when its client goes away (it may never send DELETE).
        gone = asyncio.get_running_loop().create_task(_disconnected(receive))
        try:
            headers = [*SSE_HEADERS, (SESSION, session.header)]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            while session.id in self.sessions:
                item = asyncio.get_running_loop().create_task(session.outside.get())
                done, _ = await asyncio.wait({item, gone}, return_when=asyncio.FIRST_COMPLETED)
                if item not in done:
                    item.cancel()
                    return
                data = item.result()
                if not data:
                    break  # the session was ended
                await send({"type": "http.response.body", "body": _event(data), "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            gone.cancel()
            session.listening = False
            self._use(session)


class _Gone(Exception):
    pass


async def _next(exchange: Exchange, gone: asyncio.Task[None]) -> tuple[bytes, bool]:
    if not exchange.queue.empty():
        return exchange.queue.get_nowait()
    item = asyncio.get_running_loop().create_task(exchange.queue.get())
    done, _ = await asyncio.wait({item, gone}, return_when=asyncio.FIRST_COMPLETED)
    if item in done:
        return item.result()
    item.cancel()
    raise _Gone


async def _disconnected(receive: Receive) -> None:
    while (await receive()).get("type") != "http.disconnect":
        pass


def _event(data: bytes) -> bytes:
    lines = data.split(b"\n")
    return b"event: message\r\n" + b"".join(b"data: " + line + b"\r\n" for line in lines) + b"\r\n"


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


async def _body(scope: Scope, receive: Receive, send: Send) -> bytes | None:
    """The request body, or None when it was too large (answered 413)."""
    length = _header(scope, b"content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY:
        await _plain(send, 413, b"Request body too large")
        return None
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            await _plain(send, 413, b"Request body too large")
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _plain(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    head = [(b"content-type", b"text/plain; charset=utf-8"), *(headers or [])]
    head.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def _json(
    send: Send, body: bytes, status: int, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    head = [(b"content-type", b"application/json"), *(headers or [])]
    head.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
