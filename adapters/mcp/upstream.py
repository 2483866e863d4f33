"""The proxy's connection to its one upstream MCP server: held open, restarted after a crash,
and shared by every client's requests. Failures surface as `UpstreamFailure` with a code."""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import anyio
import anyio.abc

from planfence.shared_memory.extras import extra_imports

with extra_imports("mcp", "the MCP proxy"):
    import mcp  # noqa: F401  (the `mcp` extra)

import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.server.caching import CACHEABLE_METHODS, CacheableMethod, CacheHint
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, HEADER_MISMATCH, REQUEST_TIMEOUT
from pydantic import TypeAdapter

from planfence.shared_memory import PlanfenceError
from planfence.shared_memory.urls import redact_url

from .meta import clean_result_meta
from .peers import is_modern, no_origin
from .relay import Relay
from .results import (
    UPSTREAM_ERROR,
    UPSTREAM_TIMEOUT,
    UPSTREAM_UNAVAILABLE,
)

logger = logging.getLogger("planfence.mcp")

UpstreamMode = Literal["auto", "legacy"]
UpstreamTarget = StdioServerParameters | str

_RAW = TypeAdapter(dict[str, Any])
_NO_CACHE = cast(
    "dict[CacheableMethod, CacheHint]",
    {m: CacheHint(ttl_ms=0, scope="private") for m in CACHEABLE_METHODS},
)
# Parametrised once: building a generic pydantic class per call costs more than the call.
_RawRequest = types.Request[dict[str, Any], str]


class UpstreamFailure(PlanfenceError):
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
                    UPSTREAM_UNAVAILABLE,
                    f"the upstream server {_named(self.target)} did not answer in time",
                ) from None
            except Exception as exc:
                fresh.closed.set()
                raise UpstreamFailure(
                    UPSTREAM_UNAVAILABLE, _cannot_connect(self.target, exc)
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
        result = clean_result_meta(dict(raw))
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


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("planfence")
    except Exception:
        return "0"


def _leaf(exc: BaseException) -> str:
    """The first underlying error of a (possibly nested) exception group, as text."""
    return str(_first(exc)) or type(_first(exc)).__name__


def _first(exc: BaseException) -> BaseException:
    while (inner := getattr(exc, "exceptions", None)) and isinstance(inner[0], BaseException):
        exc = inner[0]
    return exc


def _named(target: UpstreamTarget) -> str:
    """The upstream as its user gave it: the URL (its password hidden) or the command."""
    if isinstance(target, str):
        return f"at {redact_url(target)}"
    return f"({target.command})"


def _cannot_connect(target: UpstreamTarget, exc: BaseException) -> str:
    """Why the upstream could not be reached, naming it; a command that is not found says
    where it was looked for (a desktop client starts the proxy with a PATH of its own)."""
    if not isinstance(target, str) and isinstance(_first(exc), FileNotFoundError):
        command = target.command
        if os.sep in command:
            return f"cannot start the upstream server: {command} does not exist"
        return (
            f"cannot start the upstream server: {command!r} is not on the PATH the proxy was "
            "started with (an MCP client that starts the proxy has a PATH of its own): give its "
            "absolute path"
        )
    if isinstance(target, str):
        return f"cannot connect to the upstream server at {redact_url(target)}: {_leaf(exc)}"
    return f"cannot start the upstream server ({target.command}): {_leaf(exc)}"
