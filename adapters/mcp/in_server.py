"""The gate inside an MCP server built on the official SDK: no proxy process.

    server.middleware.append(PlanfenceServerMiddleware("sqlite:///team.db", "policy.toml"))

`PlanfenceServerMiddleware` is the SDK's own server middleware (`Server.middleware`, and
`MCPServer`'s `middleware=` argument or property), so it works for the low-level `Server` and the
high-level `MCPServer` alike. It follows the proxy's contract: the plan comes in the call's
`_meta["dev.planfence/plan"]` (the agent in `dev.planfence/agent`); a refused call never reaches
the tool and is answered with the proxy's refusal result (`results.py`), fitted to the tool's
`outputSchema`; an allowed call's result carries `_meta["dev.planfence/decision"]`. The policy
is the same TOML file the proxy reads. The tool runs with the allow's fencing token as
`planfence.fence.current()`, and the lease its policy declares is held until it returns.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import anyio

from planfence.plugins.gate import (
    DEFAULT_AUDIT,
    Allowed,
    AuditMode,
    Gate,
    Judgement,
    Middleware,
    Policy,
    Refused,
)
from planfence.plugins.gate.fence import TokenSigner, bound
from planfence.shared_memory import AsyncStore, Store, StoreBridge
from planfence.shared_memory.extras import extra_imports
from planfence.shared_memory.factory import sqlite_on_loop

with extra_imports("mcp", "the MCP server middleware"):
    import mcp  # noqa: F401  (the `mcp` extra)

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp_types.methods import serialize_server_result

from ..base import Adapter
from .catalog import ToolCatalog
from .meta import META_DECISION
from .results import call_of, decision_wire, fit_to_tool, for_model, to_wire_result

PolicySource = Policy | Mapping[str, Any] | str | os.PathLike[str]


def load_policy(policy: PolicySource) -> Policy:
    """A `Policy`; a string or path names the TOML file (as `planfence proxy --policy`)."""
    if isinstance(policy, (str, os.PathLike)):
        return Policy.load(os.fspath(policy))
    return Policy.coerce(policy)


class _NoLister:
    """The catalog learns a server's tools from its own `tools/list`, never from a connection."""

    request_timeout: float | None = None

    async def request(
        self, method: str, params: Mapping[str, Any] | None, *, read_timeout: float | None = None
    ) -> dict[str, Any]:
        raise LookupError("the tools are listed through the server itself")


class ToolJudge(Adapter):
    """What every in-server adapter shares: a tool call in, a refusal result or None out, and
    the allowed result stamped with the decision.

    Args:
        store, policy, gate, middleware, audit, signing_key: the gate's settings, as for
            `Adapter.attach_gate` (a store URL is opened here, a SQLite one with its calls on the
            server's event loop: see `sqlite_on_loop`; the policy may be a TOML file's path).
            Call `aclose()` when the server stops.
        agent: who calls, when a call's `_meta` does not say.
    """

    def __init__(
        self,
        store: AsyncStore | Store | StoreBridge | str,
        policy: PolicySource,
        *,
        agent: str | None = None,
        gate: Gate | None = None,
        middleware: Iterable[Middleware] = (),
        audit: AuditMode = DEFAULT_AUDIT,
        signing_key: TokenSigner | None = None,
    ) -> None:
        if isinstance(store, str):  # opened here: SQLite on the server's loop, no hop per call
            store = sqlite_on_loop(store)
        self.attach_gate(
            store,
            load_policy(policy),
            agent=agent,
            gate=gate,
            middleware=middleware,
            audit=audit,
            signing_key=signing_key,
        )
        self.catalog = ToolCatalog(_NoLister())

    @property
    def policy(self) -> Policy:
        return self.gate.policy

    async def judge(
        self, tool: str, args: Mapping[str, Any] | None, meta: Mapping[str, Any] | None
    ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """(refusal result or None, the decision `_meta` for an allowed call); a lease the
        allow took is released at once (run the tool inside `guard` to hold it)."""
        async with self.guard(tool, args, meta) as judged:
            return judged

    @asynccontextmanager
    async def guard(
        self, tool: str, args: Mapping[str, Any] | None, meta: Mapping[str, Any] | None
    ) -> AsyncIterator[tuple[dict[str, Any] | None, dict[str, Any]]]:
        """`judge`, for a tool that runs inside the block: with the allow's fencing token as
        `planfence.fence.current()`, and its lease held until the block ends."""
        judged = await self.judged(tool, args, meta)
        if not isinstance(judged, Allowed):
            yield self.refusal(judged), {}
            return
        try:
            with bound(judged.fence):
                yield None, decision_wire(judged.verdict)
        finally:
            if judged.lease is not None:
                await self.gate.release(judged)

    async def judged(
        self, tool: str, args: Mapping[str, Any] | None, meta: Mapping[str, Any] | None
    ) -> Judgement:
        """The gate's judgement of a `tools/call` (an allow may hold a lease: release it)."""
        call = await call_of(self.gate, tool, args, meta, by="mcp-server")
        if isinstance(call, Refused):
            return call
        return await self.gate.judge(call)

    def refusal(self, judged: Refused) -> dict[str, Any]:
        """A refusal as the proxy answers it (a replan's says what changed, and how)."""
        return to_wire_result(for_model(judged.verdict))

    async def fit(self, refusal: dict[str, Any], tool: str) -> dict[str, Any]:
        return await fit_to_tool(refusal, tool, self.catalog)

    async def aclose(self) -> None:
        """Close the gate (a deferred audit writes what it queued); call it when the server
        stops, or give `lifespan` to the server, which does."""
        with anyio.CancelScope(shield=True):  # a server stopped by Ctrl-C still writes them
            await self.gate.aclose()

    @asynccontextmanager
    async def lifespan(self, server: Any) -> AsyncIterator[dict[str, Any]]:
        """A server lifespan that closes this gate when the server stops:
        `MCPServer(name, lifespan=gate.lifespan)`, `FastMCP(name, lifespan=gate.lifespan)`."""
        try:
            yield {}
        finally:
            await self.aclose()


def with_decision(result: Mapping[str, Any], decision: Mapping[str, Any]) -> dict[str, Any]:
    meta = result.get("_meta")
    return {
        **result,
        "_meta": {**meta, META_DECISION: decision}
        if isinstance(meta, Mapping)
        else {META_DECISION: decision},
    }


class PlanfenceServerMiddleware(ToolJudge):
    """The gate as an official-SDK server middleware: every `tools/call` is judged first.

    `server.middleware.append(PlanfenceServerMiddleware(store, "policy.toml"))` on a low-level
    `Server`; `MCPServer(name, middleware=[PlanfenceServerMiddleware(...)])` or
    `mcp.middleware.append(...)` on the high-level one. Arguments as `ToolJudge`.
    """

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method != "tools/call":
            result = await call_next(ctx)
            if ctx.method == "tools/list" and isinstance(result, Mapping):
                self.catalog.observe(result)
            return result
        params = ctx.params or {}
        tool = params.get("name")
        if not isinstance(tool, str):
            return await call_next(ctx)  # the SDK answers a malformed call itself
        args, meta = params.get("arguments"), params.get("_meta")
        judged = await self.judged(
            tool,
            args if isinstance(args, Mapping) else None,
            meta if isinstance(meta, Mapping) else None,
        )
        if isinstance(judged, Allowed):  # the tool runs with the fencing token, holding the lease
            try:
                with bound(judged.fence):
                    result = await call_next(ctx)
            finally:
                if judged.lease is not None:
                    await self.gate.release(judged)
            if isinstance(result, Mapping):
                return with_decision(result, decision_wire(judged.verdict))
            return result
        refusal = self.refusal(judged)
        if not self.catalog.loaded:
            listed = await call_next(_listing(ctx))
            if isinstance(listed, Mapping):
                self.catalog.observe(listed)
        fitted = await self.fit(refusal, tool)
        # A result that skips the handler is shaped for the wire here, for the caller's era.
        return serialize_server_result("tools/call", ctx.protocol_version, fitted)


def _listing(ctx: ServerRequestContext[Any, Any]) -> ServerRequestContext[Any, Any]:
    return replace(ctx, method="tools/list", params={})


__all__ = ["PlanfenceServerMiddleware", "ToolJudge", "load_policy", "with_decision"]
