"""The proxy's one connection to its upstream MCP server: held open, restarted after a crash, and
shared by every client. It carries JSON-RPC messages as they are; the proxy's own requests
(the handshake, listings, subscriptions) are the only ones it makes itself.

    Upstream(stdio_upstream(["mcp-server-git"])) | Upstream("http://127.0.0.1:9000/mcp")

The connection is opened in the upstream's newest era: `mode="auto"` asks `server/discover` first
(the 2026-07-28 protocol) and falls back to the `initialize` handshake; `"legacy"` always uses the
handshake. Each request in flight has an entry in `pending` under the id it has upstream, which
the proxy chooses (`register`); what comes back is handed to the proxy through three callbacks:
`on_response(entry, message, raw)`, `on_message(message, raw, related)` for the upstream's own
requests and notifications (`related` is the client request they came with, when the transport
says: over streamable HTTP it does, over stdio never), and `on_lost(entry, failure)` for every
request in flight when the connection dies. Failures surface as `UpstreamFailure` with a code.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

import planfence

from . import jsonrpc as rpc
from .links import (
    UPSTREAM_ERROR,
    UPSTREAM_TIMEOUT,
    UPSTREAM_UNAVAILABLE,
    Link,
    StdioTarget,
    UpstreamFailure,
    UpstreamTarget,
    cannot_connect,
    named,
)
from .upstream_stdio import StdioLink

logger = logging.getLogger("planfence.mcp")

UpstreamMode = Literal["auto", "legacy"]
# What the proxy declares to its upstream: it asks its own clients these questions for it.
CAPABILITIES: dict[str, Any] = {
    "sampling": {},
    "elicitation": {"form": {}, "url": {}},
    "roots": {"listChanged": True},
}


def stdio_upstream(command: list[str], *, cwd: str | None = None) -> StdioTarget:
    """Spawn parameters for an upstream command; it inherits the proxy's environment, as it
    would if the MCP client had launched it directly."""
    if not command:
        raise ValueError("an upstream command is required")
    return StdioTarget(command[0], list(command[1:]), dict(os.environ), cwd)


class _Own:
    """One of the proxy's own requests in flight."""

    def __init__(self) -> None:
        self.future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()


def _ignore(*_: Any) -> None:
    return None


class Upstream:
    """One connection to the upstream MCP server, shared by every client of the proxy and
    reopened (the command respawned) on the next request after it dies.

    Args:
        target: a stdio command (`stdio_upstream`), or the URL of a streamable-HTTP server.
        mode: "auto" opens the upstream's newest era, falling back to the initialize handshake;
            "legacy" always uses the handshake.
        call_timeout: seconds before a `tools/call` is abandoned (and cancelled upstream).
        request_timeout: the same for connecting and for the other requests.
    """

    def __init__(
        self,
        target: UpstreamTarget,
        *,
        mode: UpstreamMode = "auto",
        call_timeout: float | None = 60.0,
        request_timeout: float | None = 30.0,
    ) -> None:
        self.target = target
        self.mode: UpstreamMode = mode
        self.call_timeout = call_timeout
        self.request_timeout = request_timeout
        self.pending: dict[Any, Any] = {}
        self.modern = False
        self.version = rpc.LATEST_HANDSHAKE
        self.info: dict[str, Any] = {}  # the handshake's answer: capabilities, serverInfo, ...
        self.connects = 0
        self.link: Link | None = None
        self.on_response: Callable[[Any, dict[str, Any], bytes | None], None] = _ignore
        self.on_message: Callable[[dict[str, Any], bytes | None, Any], None] = _ignore
        self.on_lost: Callable[[Any, UpstreamFailure], None] = _ignore
        # Run after every connection is made (subscriptions renewed, change events listened to).
        self.on_connect: Callable[[], Awaitable[None]] | None = None
        # A tool's input schema, for the headers a 2026-era HTTP upstream wants mirrored.
        self.tool_schema: Callable[[str], Any] = _ignore
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()
        self._ready = False
        self._closed = False
        self._tasks: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> Upstream:
        try:
            await self.ensure()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def alive(self) -> bool:
        return self._ready and self.link is not None and self.link.alive

    @property
    def server_info(self) -> dict[str, Any]:
        found = self.info.get("serverInfo") or rpc.meta_of(self.info).get(rpc.SERVER_INFO)
        return found if isinstance(found, dict) else {}

    @property
    def capabilities(self) -> dict[str, Any]:
        caps = self.info.get("capabilities")
        return caps if isinstance(caps, dict) else {}

    # -- the connection ---------------------------------------------------------------------

    async def ensure(self) -> None:
        """Connect, or reconnect a connection that died.

        Raises:
            UpstreamFailure: the upstream cannot be reached (or the proxy is closing).
        """
        if self.alive:
            return
        async with self._lock:
            if self.alive:
                return
            if self._closed:
                raise UpstreamFailure(UPSTREAM_UNAVAILABLE, "the proxy is shutting down")
            old, self.link, self._ready = self.link, None, False
            if old is not None:
                await old.close()
            self.link = link = self._make_link()
            try:
                await link.start()  # a command is started at once, with no wait before
                await asyncio.wait_for(self._open(link), self.request_timeout)
            except BaseException as exc:
                self.link = None
                await link.close()
                if isinstance(exc, UpstreamFailure):
                    raise
                if isinstance(exc, TimeoutError):
                    raise UpstreamFailure(
                        UPSTREAM_UNAVAILABLE,
                        f"the upstream server {named(self.target)} did not answer in time",
                    ) from None
                if isinstance(exc, Exception):
                    raise UpstreamFailure(
                        UPSTREAM_UNAVAILABLE, cannot_connect(self.target, exc)
                    ) from exc
                raise
            self._ready = True
            self.connects += 1
        if self.on_connect is not None:
            self.spawn(self.on_connect)

    def _make_link(self) -> Link:
        if isinstance(self.target, str):
            from .upstream_http import HttpLink

            return HttpLink(self, self.target)
        return StdioLink(self, self.target)

    async def _open(self, link: Link) -> None:
        """The handshake, in the upstream's newest era."""
        if self.mode == "auto":
            envelope = {rpc.PROTOCOL_VERSION: rpc.LATEST_MODERN, **self._identity()}
            try:
                found = await self._ask(link, "server/discover", {"_meta": envelope})
            except UpstreamFailure as exc:
                if exc.code != UPSTREAM_ERROR:
                    raise
            else:
                if any(v in rpc.MODERN_VERSIONS for v in found.get("supportedVersions") or ()):
                    self.modern, self.version, self.info = True, rpc.LATEST_MODERN, found
                    link.handshake_done(self.version)
                    return
        params = {
            "protocolVersion": rpc.LATEST_HANDSHAKE,
            "capabilities": CAPABILITIES,
            "clientInfo": proxy_info(),
        }
        found = await self._ask(link, "initialize", params)
        version = found.get("protocolVersion")
        self.modern = False
        self.version = version if isinstance(version, str) else rpc.LATEST_HANDSHAKE
        self.info = found
        link.handshake_done(self.version)
        link.send(rpc.notification("notifications/initialized"), None, None)

    def _identity(self) -> dict[str, Any]:
        return {rpc.CLIENT_INFO: proxy_info(), rpc.CLIENT_CAPABILITIES: CAPABILITIES}

    def envelope(self, meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """`meta` with the proxy's own 2026-era envelope (its identity and capabilities)."""
        return {**(meta or {}), rpc.PROTOCOL_VERSION: self.version, **self._identity()}

    def spawn(self, work: Callable[[], Awaitable[None]]) -> None:
        """Run `work` in the background, tied to no client request (dropped when closing)."""
        if self._closed:
            return

        async def run() -> None:
            try:
                await work()
            except Exception:
                logger.debug("background upstream work failed", exc_info=True)

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        link, self.link, self._ready = self.link, None, False
        if link is not None:
            await link.close()
        self._lost(UpstreamFailure(UPSTREAM_UNAVAILABLE, "the proxy is shutting down"))

    # -- requests in flight -----------------------------------------------------------------

    def register(self, entry: Any, preferred: Any) -> Any:
        """File `entry` as in flight under `preferred` (a client's own id) when that id is free
        upstream, else under a new one; the id it has upstream."""
        upstream_id = preferred if preferred not in self.pending else self.new_id()
        self.pending[upstream_id] = entry
        return upstream_id

    def new_id(self) -> str:
        while True:
            candidate = f"planfence-{next(self._ids)}"
            if candidate not in self.pending:
                return candidate

    def send(self, message: dict[str, Any], raw: bytes | None = None, related: Any = None) -> None:
        """Send a message on the open connection (`alive`).

        Raises:
            UpstreamFailure: the connection is gone.
        """
        link = self.link
        if link is None or not self._ready or not link.alive:
            raise UpstreamFailure(UPSTREAM_UNAVAILABLE, "the upstream server went away")
        link.send(message, raw, related)

    def cancel(
        self,
        upstream_id: Any,
        reason: str = "cancelled by the client",
        notice: dict[str, Any] | None = None,
        raw: bytes | None = None,
    ) -> None:
        """Give up a request in flight: cancelled upstream (with the client's own `notice`
        when it names the request as the upstream knows it), its answer, if any, dropped."""
        self.pending.pop(upstream_id, None)
        link = self.link
        if link is None or not self.alive or link.abort(upstream_id):
            return
        if notice is None:
            params = {"requestId": upstream_id, "reason": reason}
            notice, raw = rpc.notification("notifications/cancelled", params), None
        link.send(notice, raw, None)

    async def request(
        self, method: str, params: Mapping[str, Any] | None, *, read_timeout: float | None = None
    ) -> dict[str, Any]:
        """One request of the proxy's own; its result.

        Raises:
            UpstreamFailure: the upstream is gone, timed out, or answered with an error.
        """
        await self.ensure()
        assert self.link is not None
        out = dict(params or {})
        if self.modern:
            out["_meta"] = self.envelope(out.get("_meta"))
        return await self._ask(self.link, method, out, read_timeout)

    async def _ask(
        self,
        link: Link,
        method: str,
        params: dict[str, Any],
        read_timeout: float | None = None,
    ) -> dict[str, Any]:
        own = _Own()
        upstream_id = self.new_id()
        self.pending[upstream_id] = own
        try:
            link.send(rpc.request(upstream_id, method, params), None, own)
            got = await asyncio.wait_for(own.future, read_timeout)
        except TimeoutError:
            self.cancel(upstream_id, "timed out")
            raise UpstreamFailure(
                UPSTREAM_TIMEOUT, f"the upstream server did not answer {method} in {read_timeout} s"
            ) from None
        finally:
            self.pending.pop(upstream_id, None)
        failure = got.get("error")
        if failure is not None:
            raise UpstreamFailure(UPSTREAM_ERROR, error_text(failure), failure)
        found = got.get("result")
        return found if isinstance(found, dict) else {}

    # -- what the link delivers ---------------------------------------------------------------

    def deliver(self, raw: bytes, related: Any = None) -> None:
        """One message (or batch) from the upstream, as it came."""
        try:
            value = rpc.decode(raw)
        except rpc.Malformed:
            logger.warning("the upstream sent a line that is not JSON; dropped")
            return
        if isinstance(value, list):
            for message in value:
                self._one(message, None, related)
        else:
            self._one(value, raw, related)

    def _one(self, message: Any, raw: bytes | None, related: Any) -> None:
        try:
            kind = rpc.check(message)
        except rpc.Malformed:
            logger.warning("the upstream sent a message that is not JSON-RPC; dropped")
            return
        if kind == "response":
            upstream_id = message.get("id")
            entry = self.pending.pop(upstream_id, None) if rpc.valid_id(upstream_id) else None
            if isinstance(entry, _Own):
                if not entry.future.done():
                    entry.future.set_result(message)
            elif entry is not None:
                self.on_response(entry, message, raw)
            return
        self.on_message(message, raw, None if isinstance(related, _Own) else related)

    def fail(self, entry: Any, failure: UpstreamFailure) -> None:
        """A request the transport could not deliver, or whose answer cannot come."""
        for upstream_id, found in list(self.pending.items()):
            if found is entry:
                del self.pending[upstream_id]
                break
        else:
            return
        if isinstance(entry, _Own):
            if not entry.future.done():
                entry.future.set_exception(failure)
        else:
            self.on_lost(entry, failure)

    def dead(self, link: Link) -> None:
        """The link's connection died: every request in flight fails."""
        if link is not self.link:
            return
        self._ready = False
        self._lost(UpstreamFailure(UPSTREAM_UNAVAILABLE, "the upstream server went away"))

    def _lost(self, failure: UpstreamFailure) -> None:
        pending, self.pending = self.pending, {}
        for entry in pending.values():
            if isinstance(entry, _Own):
                if not entry.future.done():
                    entry.future.set_exception(failure)
            else:
                self.on_lost(entry, failure)


def error_text(failure: Any) -> str:
    """A JSON-RPC error object as a line of text."""
    if isinstance(failure, Mapping):
        return f"{failure.get('message')} (code {failure.get('code')})"
    return str(failure)


def proxy_info() -> dict[str, Any]:
    return {"name": "planfence-proxy", "version": _version()}


def _version() -> str:
    return planfence.__version__
