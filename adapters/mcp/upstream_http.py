"""A streamable-HTTP upstream: each message is a POST, whose answer (JSON, or an SSE stream that
also carries the requests and notifications that belong to it) comes back on that POST.

Handshake era: the session id the upstream gives at `initialize` goes on every request, and a
GET stream carries what the upstream sends outside any request. 2026 era: each request stands
alone and says what it is in its headers (`Mcp-Method`, `Mcp-Name`, and the `Mcp-Param-*`
headers its tool declares with `x-mcp-header`); closing a request's stream cancels it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import httpx

from . import jsonrpc as rpc
from .links import UPSTREAM_UNAVAILABLE, LinkOwner, UpstreamFailure, cannot_connect

logger = logging.getLogger("planfence.mcp")

SESSION = "mcp-session-id"
VERSION = "mcp-protocol-version"
# The params key each method mirrors into `Mcp-Name` (2026 era).
NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
X_MCP_HEADER = "x-mcp-header"
_PLAIN = re.compile(r"^[\x20-\x7E]*$")
_WRAPPED = re.compile(r"^=\?base64\?.*\?=$")


class HttpLink:
    """The HTTP transport of one upstream connection (see the module docstring)."""

    def __init__(self, upstream: LinkOwner, url: str) -> None:
        self.upstream = upstream
        self.url = url
        self.alive = False
        self.session_id: str | None = None
        self.version: str | None = None
        self.client: httpx.AsyncClient | None = None
        self._posts: dict[Any, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=None))
        self.alive = True

    def handshake_done(self, version: str) -> None:
        self.version = version
        if not self.upstream.modern and self.session_id is not None:
            self._spawn(self._listen())

    def send(self, message: dict[str, Any], raw: bytes | None, related: Any) -> None:
        body = raw if raw is not None else rpc.encode(message)
        request_id = message.get("id") if "method" in message else None
        task = self._spawn(self._post(message, body, related, request_id))
        if request_id is not None and self.upstream.modern:
            self._posts[request_id] = task

    def abort(self, upstream_id: Any) -> bool:
        if not self.upstream.modern:
            return False  # handshake era: the upstream is told with `notifications/cancelled`
        task = self._posts.pop(upstream_id, None)
        if task is not None:
            task.cancel()  # 2026 era: closing the request's stream is its cancellation
        return True

    async def close(self) -> None:
        self.alive = False
        for task in list(self._tasks):
            task.cancel()
        client = self.client
        if client is None:
            return
        if self.session_id is not None and not self.upstream.modern:
            with contextlib.suppress(httpx.HTTPError, TimeoutError):  # end the session
                await asyncio.wait_for(client.delete(self.url, headers=self._base()), 2.0)
        await client.aclose()

    def _spawn(self, work: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- requests --------------------------------------------------------------------------

    def _base(self) -> dict[str, str]:
        headers = {"accept": "application/json, text/event-stream"}
        if self.session_id is not None:
            headers[SESSION] = self.session_id
        if self.version is not None:
            headers[VERSION] = self.version
        return headers

    def _headers(self, message: dict[str, Any]) -> dict[str, str]:
        headers = {**self._base(), "content-type": "application/json"}
        method = message.get("method")
        params = rpc.params_of(message)
        version = rpc.meta_of(params).get(rpc.PROTOCOL_VERSION)
        if not isinstance(method, str) or version not in rpc.MODERN_VERSIONS:
            return headers
        headers[VERSION] = version
        headers["mcp-method"] = method
        named = params.get(NAMED.get(method, ""))
        if isinstance(named, str):
            headers["mcp-name"] = header_value(named)
        if method == "tools/call" and isinstance(named, str):
            arguments = params.get("arguments")
            schema = self.upstream.tool_schema(named)
            if isinstance(arguments, Mapping) and schema is not None:
                headers.update(param_headers(schema, arguments))
        return headers

    async def _post(
        self, message: dict[str, Any], body: bytes, related: Any, request_id: Any
    ) -> None:
        assert self.client is not None
        answered = False
        try:
            async with self.client.stream(
                "POST", self.url, content=body, headers=self._headers(message)
            ) as response:
                if message.get("method") == "initialize":
                    self.session_id = response.headers.get(SESSION) or self.session_id
                if request_id is None or response.status_code == 202:
                    return
                if response.status_code >= 400:
                    answered = await self._refused(response, request_id, related)
                    return
                async for data in _messages(response):
                    self.upstream.deliver(data, related)
                answered = request_id not in self.upstream.pending
        except httpx.HTTPError as exc:
            if request_id is not None:
                failure = UpstreamFailure(UPSTREAM_UNAVAILABLE, cannot_connect(self.url, exc))
                self.upstream.fail(related, failure)
            return
        finally:
            if self._posts.get(request_id) is asyncio.current_task():
                del self._posts[request_id]
        if not answered:
            failure = UpstreamFailure(UPSTREAM_UNAVAILABLE, "the upstream's answer stream ended")
            self.upstream.fail(related, failure)

    async def _refused(self, response: httpx.Response, request_id: Any, related: Any) -> bool:
        """An HTTP error status answering a request: its JSON-RPC error, as the answer."""
        body = await response.aread()
        if response.status_code == 404 and self.session_id is not None:
            self.alive = False  # the upstream forgot the session: connect again
            self.upstream.dead(self)
            return True
        found: Any = None
        if response.headers.get("content-type", "").startswith("application/json"):
            try:
                found = rpc.decode(body)
            except rpc.Malformed:
                found = None
        failure = found.get("error") if isinstance(found, dict) else None
        if not isinstance(failure, dict):
            code = rpc.METHOD_NOT_FOUND if response.status_code == 404 else rpc.INTERNAL_ERROR
            failure = {"code": code, "message": f"HTTP {response.status_code}"}
        self.upstream.deliver(rpc.encode({"jsonrpc": "2.0", "id": request_id, "error": failure}))
        return True

    async def _listen(self) -> None:
        """The handshake era's GET stream: what the upstream sends outside any request."""
        assert self.client is not None
        for _ in range(3):
            try:
                headers = self._base()
                async with self.client.stream("GET", self.url, headers=headers) as response:
                    if response.status_code >= 400:
                        return  # the upstream offers no such stream
                    async for data in _messages(response):
                        self.upstream.deliver(data, None)
            except httpx.HTTPError:
                logger.debug("the upstream's GET stream ended", exc_info=True)
            if not self.alive:
                return
            await asyncio.sleep(1.0)


async def _messages(response: httpx.Response) -> AsyncIterator[bytes]:
    """The JSON-RPC messages of a response: its body, or each SSE `message` event's data."""
    kind = response.headers.get("content-type", "")
    if not kind.startswith("text/event-stream"):
        yield await response.aread()
        return
    data: list[str] = []
    event = "message"
    async for line in response.aiter_lines():
        if not line:
            if data and event == "message":
                yield "\n".join(data).encode()
            data, event = [], "message"
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    if data and event == "message":
        yield "\n".join(data).encode()


def header_value(value: str) -> str:
    """A value for an HTTP header: as it is when it survives the trip, else base64-wrapped."""
    if _PLAIN.fullmatch(value) and value == value.strip() and not _WRAPPED.fullmatch(value):
        return value
    return f"=?base64?{base64.b64encode(value.encode()).decode('ascii')}?="


def param_headers(schema: Any, arguments: Mapping[str, Any]) -> dict[str, str]:
    """The `Mcp-Param-*` headers a call mirrors from its arguments (the properties its input
    schema marks with `x-mcp-header`, reached through `properties` alone)."""
    headers: dict[str, str] = {}
    for path, token in _annotated(schema, ()):
        value: Any = arguments
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str | int | float):
            text = str(value)
        else:
            continue
        headers[f"Mcp-Param-{token}"] = header_value(text)
    return headers


def _annotated(schema: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str]]:
    if not isinstance(schema, Mapping):
        return
    token = schema.get(X_MCP_HEADER)
    if path and isinstance(token, str):
        yield path, token
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for name, sub in properties.items():
            yield from _annotated(sub, (*path, name))
