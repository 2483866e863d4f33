"""The PlanFence MCP proxy: an MCP server that forwards to one upstream MCP server and passes
every `tools/call` through the gate first.

    client --(stdio | streamable HTTP, either protocol era)--> proxy --> upstream server

What the proxy changes on the way through, and nothing else:

- `tools/call` params `_meta` carries `dev.planfence/plan` (the plan record id; required for gated
  tools) and `dev.planfence/agent` (the calling agent, optional). The gate judges the call; a
  refused call is answered by the proxy (see `results.py`) and never reaches the upstream.
- Keys under `io.modelcontextprotocol/` are per-connection protocol envelope (protocol version,
  client info, the progress token's connection...) and are never forwarded; the proxy's own
  upstream connection stamps its own. Every other `_meta` key is forwarded, the planfence keys
  included, so an upstream can log which plan authorised its call.
- A forwarded call's result comes back as the upstream sent it, with
  `_meta["dev.planfence/decision"]` added (verdict, reason, decision id, plan). Protocol envelope
  keys of the upstream connection are dropped from result `_meta` for the same reason as above.
- Progress from the upstream is relayed to the caller's progress token; a caller's cancellation
  cancels the upstream request.

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
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.server import Server
from mcp.server.caching import CACHEABLE_METHODS, CacheableMethod, CacheHint
from mcp.server.context import ServerRequestContext
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
from pydantic import TypeAdapter

from planfence.plugins.gate import BLOCK, Gate, Policy, Verdict
from planfence.plugins.gate.gate import AUDIT_SOURCE
from planfence.shared_memory import AsyncStore, Decision, PlanFenceError, validate_agent

from .results import (
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


def _forward_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    out = dict(params or {})
    meta = forwardable_meta(out.pop("_meta", None))
    if meta:
        out["_meta"] = meta
    return out


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
    ) -> None:
        self.target = target
        self.mode: UpstreamMode = mode
        self.call_timeout = call_timeout
        self.request_timeout = request_timeout
        self._conn: _Connection | None = None
        self._lock = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None
        self._stack: AsyncExitStack | None = None
        self.connects = 0

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
        try:
            # No response cache: the proxy forwards, its callers decide what to cache.
            async with Client(
                self.target,
                mode=self.mode,
                cache=None,
                client_info=types.Implementation(name="planfence-proxy", version=_version()),
            ) as client:
                conn.client = client
                started = True
                task_status.started()
                await conn.closed.wait()
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
                with anyio.fail_after(self.request_timeout):
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
            return fresh

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
        request = _RawRequest(method=method, params=dict(params or {}))
        try:
            # The raw dict keeps every field the upstream sent and skips the client-side
            # output-schema check: the proxy returns results, it does not consume them.
            # (`send_request` takes a TypeAdapter at run time; its annotation only names models.)
            raw: dict[str, Any] = await conn.client.session.send_request(
                request,
                _RAW,  # type: ignore[type-var]
                request_read_timeout_seconds=read_timeout,
                progress_callback=on_progress,
            )
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


class PlanFenceProxy:
    """Builds the proxy's MCP server: handlers that gate `tools/call` and pass the rest through.

    Args:
        gate: judges each call (and audits it in its store's decision log).
        upstream: the connected upstream server.
        name: the name the proxy gives itself to its clients.
    """

    def __init__(self, gate: Gate, upstream: Upstream, *, name: str = "planfence-proxy") -> None:
        self.gate = gate
        self.upstream = upstream
        self.name = name

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
        server: Server[Any] = Server(
            self.name,
            # Fills the 2026-era freshness fields only where the upstream gave none (a
            # handshake-era upstream): immediately stale, never shared across callers.
            cache_hints=_NO_CACHE,
            version=_version(),
            title=f"{info.name} (gated by planfence)" if info is not None else None,
            instructions=self.upstream.client.instructions,
            **kwargs,
        )
        return server

    def _passthrough(
        self, method: str
    ) -> Callable[[ServerRequestContext[Any], Any], Awaitable[dict[str, Any]]]:
        async def handler(ctx: ServerRequestContext[Any], params: Any) -> dict[str, Any]:
            try:
                return await self.upstream.request(
                    method, _forward_params(ctx.params), read_timeout=self.upstream.request_timeout
                )
            except UpstreamFailure as exc:
                # Not a tool call: there is no result shape for a failure, so it is an error.
                raise MCPError(code=types.INTERNAL_ERROR, message=str(exc)) from None

        return handler

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

        verdict = await self.gate.check(tool, args, plan, agent=agent)
        if verdict.verdict != "allow":
            return to_wire_result(verdict)

        on_progress = None
        if meta.get(PROGRESS_TOKEN) is not None:

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                await ctx.session.report_progress(progress, total, message)

        try:
            result = await self.upstream.request(
                "tools/call",
                _forward_params(raw),
                read_timeout=self.upstream.call_timeout,
                on_progress=on_progress,
            )
        except UpstreamFailure as exc:
            return to_wire_result(ProxyFailure(exc.code, tool, str(exc), decision_meta(verdict)))
        out_meta = dict(result.get("_meta") or {})
        out_meta[META_DECISION] = decision_meta(verdict)
        result["_meta"] = out_meta
        return result

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
    async with Upstream(
        target, mode=mode, call_timeout=call_timeout, request_timeout=request_timeout
    ) as upstream:
        proxy = PlanFenceProxy(gate, upstream)
        yield proxy, proxy.build_server()
