"""The gate inside a FastMCP server (the `fastmcp` extra): FastMCP's own middleware.

    mcp.add_middleware(PlanfenceFastMCPMiddleware("sqlite:///team.db", "policy.toml"))

Same contract as the proxy and `PlanfenceServerMiddleware`: the plan comes in the call's `_meta`, a
refused call never reaches the tool and gets the proxy's refusal result (fitted to the tool's
`outputSchema`), an allowed call's result carries `_meta["dev.planfence/decision"]`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

from planfence.plugins.gate import DEFAULT_AUDIT, AuditMode, Gate
from planfence.plugins.gate import Middleware as GateLayer
from planfence.plugins.gate.fence import TokenSigner
from planfence.shared_memory import AsyncStore, Store, StoreBridge
from planfence.shared_memory.extras import extra_imports

from .in_server import PolicySource, ToolJudge, with_decision

with extra_imports("fastmcp", "the FastMCP middleware"):
    import fastmcp  # noqa: F401  (the `fastmcp` extra)

import mcp_types as mt
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import ToolResult


def _request_meta(context: MiddlewareContext[Any]) -> Mapping[str, Any] | None:
    # FastMCP leaves the client's `_meta` off the message; the request context has it.
    meta = getattr(context.message, "meta", None)
    if meta is None and context.fastmcp_context is not None:
        request = context.fastmcp_context.request_context
        meta = getattr(request, "meta", None) if request is not None else None
    if isinstance(meta, Mapping):
        return meta
    if meta is not None and hasattr(meta, "model_dump"):
        dumped: dict[str, Any] = meta.model_dump(by_alias=True, exclude_none=True)
        return dumped
    return None


class PlanfenceFastMCPMiddleware(Middleware):  # type: ignore[misc,unused-ignore]
    """The gate as FastMCP middleware: every `tools/call` is judged first.

    Args:
        store: the store: a `Store`, an `AsyncStore`, a URL or a `StoreBridge` (a URL is
            opened here, a SQLite one with its calls on the server's event loop: see
            `sqlite_on_loop`).
        policy: the declared scopes (a `Policy`, its dict form, TOML text, or a TOML file's
            path).
        gate: a `Gate` configured beyond these settings (see `Adapter.attach_gate`).
        middleware: gate middleware, outermost first.
        audit: how the gate records its decisions (see `Adapter.attach_gate`).
        signing_key: signs each allow's fencing token (an Ed25519 `SigningKey`).
        agent: who calls, when a call's `_meta` does not say.
    """

    def __init__(
        self,
        store: AsyncStore | Store | StoreBridge | str,
        policy: PolicySource,
        *,
        agent: str | None = None,
        gate: Gate | None = None,
        middleware: Iterable[GateLayer] = (),
        audit: AuditMode = DEFAULT_AUDIT,
        signing_key: TokenSigner | None = None,
    ) -> None:
        self.judge = ToolJudge(
            store,
            policy,
            agent=agent,
            gate=gate,
            middleware=middleware,
            audit=audit,
            signing_key=signing_key,
        )

    async def aclose(self) -> None:
        """Close the gate: a deferred audit writes what it queued."""
        await self.judge.aclose()

    def lifespan(self, server: Any) -> AbstractAsyncContextManager[dict[str, Any]]:
        """`FastMCP(name, lifespan=gate.lifespan)`: closes the gate when the server stops."""
        return self.judge.lifespan(server)

    async def on_call_tool(
        self,
        context: MiddlewareContext[mt.CallToolRequestParams],
        call_next: CallNext[mt.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        params = context.message
        async with self.judge.guard(params.name, params.arguments, _request_meta(context)) as (
            refusal,
            decision,
        ):
            if refusal is None:  # the tool runs with the fencing token, holding the lease
                result = await call_next(context)
                result.meta = with_decision({"_meta": result.meta or {}}, decision)["_meta"]
                return result
        await self._learn_schema(context, params.name)
        fitted = await self.judge.fit(refusal, params.name)
        return ToolResult.from_mcp_result(mt.CallToolResult.model_validate(fitted))

    async def _learn_schema(self, context: MiddlewareContext[Any], name: str) -> None:
        """Tell the catalog whether the tool declares an `outputSchema` (FastMCP knows)."""
        server = context.fastmcp_context.fastmcp if context.fastmcp_context else None
        try:
            tool = await server.get_tool(name) if server is not None else None
        except Exception:  # no such tool: the refusal then carries no structured content
            return
        if tool is not None:
            listing = {"name": name, "outputSchema": tool.output_schema}
            self.judge.catalog.observe({"tools": [listing]})


__all__ = ["PlanfenceFastMCPMiddleware"]
