"""The proxy's clients (`Peer`) and their requests in flight (`Call`).

A peer is one client connection: the stdio pipe, one streamable-HTTP session, or one 2026-era
HTTP request (which stands alone). Its front (stdio, HTTP, in-memory) gives it a `deliver`
function that puts bytes on the wire: a message that belongs to a request goes with that request
(over HTTP, on the request's own response stream), the request's answer last (`final`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from . import jsonrpc as rpc

# (data, the request it belongs to (anything with an `exchange`) or None, whether it is the answer)
Deliver = Callable[[bytes, Any, bool], None]
# A client's answer to a question the proxy put to it: the message, and its bytes when known.
Answer = tuple[dict[str, Any], bytes | None]


class Peer:
    """One client connection of the proxy.

    Args:
        deliver: puts one message on the wire: `(data, call, final)`.
        session: whether requests share state (stdio, an HTTP session): the proxy remembers
            what the session read (`--agent`); a 2026-era HTTP request has none.
        modern: the connection speaks the 2026-07-28 protocol (known from its first request).
    """

    def __init__(self, deliver: Deliver, *, session: bool = True, modern: bool = False) -> None:
        self.deliver = deliver
        self.session = session
        self.modern = modern
        self.initialized = False  # a handshake-era client that finished its handshake
        self.capabilities: dict[str, Any] = {}
        self.log_level: str | None = None
        self.subscriptions: set[str] = set()
        self.calls: dict[Any, Call] = {}  # by the client's own request id
        # Requests sent to this client, by the id they carry: (waiter, the upstream's id or None)
        self.asked: dict[Any, tuple[asyncio.Future[Answer], Any]] = {}
        self.state: dict[str, Any] = {}  # per-session state (the reads of `--agent`)
        self.closed = False
        self.traced = False  # its requests arrive inside a span of their own (an SDK server's)
        self._ids = 0

    def send(self, message: Any, call: Any = None, final: bool = False) -> None:
        if not self.closed:
            self.deliver(rpc.encode(message), call, final)

    def forward(self, raw: bytes, call: Any = None, final: bool = False) -> None:
        if not self.closed:
            self.deliver(raw, call, final)

    def new_id(self, preferred: Any = None) -> Any:
        """An id for a request to this client that no request in flight to it has."""
        if preferred is not None and preferred not in self.asked:
            return preferred
        while True:
            self._ids += 1
            candidate = f"planfence-{self._ids}"
            if candidate not in self.asked:
                return candidate

    def can(self, capability: str) -> bool:
        """Whether this client declared `capability` (sampling, elicitation, roots)."""
        return not self.modern and isinstance(self.capabilities.get(capability), dict)


class Call:
    """A client request the proxy is handling: forwarded upstream, judged, or answered locally.

    `upstream_id` is its id upstream while it is in flight there; `token` and `upstream_token`
    its progress token as the client sent it and as it went upstream; `exchange` what the front
    needs to answer it (the HTTP request it came in); `recheck`, for a gated call, judges it
    again (see `relay.py`).
    """

    __slots__ = (
        "agent",
        "batch",
        "exchange",
        "finish",
        "id",
        "log_level",
        "method",
        "modern",
        "note",
        "peer",
        "recheck",
        "revoked",
        "task",
        "timer",
        "token",
        "upstream_id",
        "upstream_token",
        "waiter",
    )

    def __init__(self, peer: Peer, msg_id: Any, method: str, modern: bool) -> None:
        self.peer = peer
        self.id = msg_id
        self.method = method
        self.modern = modern
        self.upstream_id: Any = None
        self.token: Any = None
        self.upstream_token: Any = None
        self.log_level: Any = None
        self.exchange: Any = None
        self.agent: str | None = None  # the agent an OAuth access token names
        self.batch: Batch | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[Any] | None = None
        self.waiter: asyncio.Future[dict[str, Any]] | None = None
        self.recheck: Callable[[], Any] | None = None
        self.revoked = False
        self.note: Any = None  # what a method's answer needs to know of its request
        # Writes the answer of a gated call when the upstream answers (or fails):
        # `finish(message, failure)`.
        self.finish: Callable[[dict[str, Any] | None, Any], None] | None = None

    def answer(self, message: dict[str, Any] | None, raw: bytes | None = None) -> None:
        """Send the client this request's answer (once), and forget the request."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.peer.calls.get(self.id) is not self:
            return  # answered already, or cancelled by the client
        del self.peer.calls[self.id]
        if self.batch is not None:
            self.batch.add(self, message if message is not None else rpc.decode(raw or b"null"))
        elif raw is not None:
            self.peer.forward(raw, self, final=True)
        elif message is not None:
            self.peer.send(message, self, final=True)

    def reply(self, value: dict[str, Any]) -> None:
        self.answer(rpc.result(self.id, value))

    def fail(self, code: int, message: str, data: Any = None) -> None:
        self.answer(rpc.error(self.id, code, message, data))


class Batch:
    """The requests of one JSON-RPC batch: their answers go back as one array (nothing when
    none is owed; an empty `deliver` when its requests were all cancelled)."""

    def __init__(self, peer: Peer, exchange: Any) -> None:
        self.peer = peer
        self.exchange = exchange
        self.waiting = 0
        self.requests = 0
        self.answers: list[Any] = []
        self.sealed = False  # every message of the batch has been read
        self.done = False

    def expect(self) -> None:
        self.waiting += 1
        self.requests += 1

    def add(self, call: Call | None, answer: Any) -> None:
        self.answers.append(answer)
        if call is not None:
            self.waiting -= 1
        self.flush()

    def flush(self) -> None:
        if self.sealed and self.waiting == 0 and not self.done:
            self.done = True
            if self.answers or self.requests:
                data = rpc.encode(self.answers) if self.answers else b""
                self.peer.deliver(data, Loose(self.exchange), True)


class Loose:
    """What an answer that belongs to no single request (a batch's, or an error about a
    message the proxy could not read) goes with: the front's exchange it came in."""

    __slots__ = ("exchange",)

    def __init__(self, exchange: Any) -> None:
        self.exchange = exchange
