"""`tools/call` through the gate's seam: every call is judged before it goes upstream, and
judged again before each retry and before an answer to the upstream's question is handed over
(the plan may go stale while a client answers). An allowed call goes upstream with its fencing
token in `_meta["dev.planfence/fence"]`; its lease (if its policy declares one) is held until
the upstream answers."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from planfence.plugins.gate import (
    AllowPayload,
    GateMiddleware,
    Judgement,
    Refused,
    ToolCall,
    Verdict,
)
from planfence.shared_memory.extras import extra_imports

with extra_imports("mcp", "the MCP proxy"):
    import mcp  # noqa: F401  (the `mcp` extra)

import mcp_types as types
from mcp.server.context import ServerRequestContext

from .catalog import ToolCatalog
from .forwarding import Forwarder, InputRefused, Revoked
from .meta import META_AGENT, META_DECISION, META_PLAN, PROGRESS_TOKEN, call_of, with_fence
from .oauth import AGENT_MISMATCH, token_agent
from .results import (
    INPUT_REFUSED,
    PROXY_ERROR,
    ProxyFailure,
    fit_to_tool,
    for_model,
    to_wire_result,
)
from .sessions import SessionPlans
from .upstream import UpstreamFailure

logger = logging.getLogger("planfence.mcp")


class Judged:
    """The latest judgement of one gated call; `recheck` judges it again."""

    def __init__(self, gate: GateMiddleware, call: ToolCall) -> None:
        self.gate = gate
        self.call = call
        self.latest: Judgement | None = None

    @property
    def verdict(self) -> Verdict:
        assert self.latest is not None, "judged before the first check"
        return self.latest.verdict

    @property
    def allowed(self) -> bool:
        return self.latest is not None and self.latest.allowed

    async def recheck(self) -> bool:
        """Judge again; the lease of the judgement before (if any) is released."""
        before, self.latest = self.latest, await self.gate.judge(self.call)
        await self.gate.release(before)
        return self.allowed

    async def release(self) -> None:
        await self.gate.release(self.latest)

    def decision(self) -> AllowPayload:
        """The latest allow's decision, in the gate's wire model."""
        return AllowPayload.of(self.verdict)

    def fence_wire(self) -> dict[str, Any] | None:
        """The latest allow's fencing token, as `_meta` carries it."""
        fence = getattr(self.latest, "fence", None)
        return None if fence is None else fence.to_wire()


class GatedCalls:
    """The proxy's `tools/call` handler."""

    def __init__(
        self,
        gate: GateMiddleware,
        forwarder: Forwarder,
        catalog: ToolCatalog,
        sessions: SessionPlans | None = None,
    ) -> None:
        self.gate = gate
        self.forwarder = forwarder
        self.catalog = catalog
        self.sessions = sessions

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> dict[str, Any]:
        tool = params.name
        try:
            caller = token_agent(ctx.request)
            if caller is not None and self.sessions is not None and caller != self.sessions.agent:
                # The proxy reads, writes and stamps plans for its --agent: only that agent's
                # token may use it.
                message = f"this proxy acts for {self.sessions.agent!r}; the token is {caller!r}'s"
                call = ToolCall(tool, params.arguments or {}, None, caller)
                refused = await self.gate.refuse(call, AGENT_MISMATCH, message, by="mcp-proxy")
                return await fit_to_tool(to_wire_result(refused.payload), tool, self.catalog)
            if self.sessions is not None and self.sessions.serves(tool):
                return await self.sessions.call(ctx, tool, params.arguments or {})
            result = await self._gated_call(ctx, tool, params)
        except Exception as exc:  # a handler exception would become a protocol error
            logger.exception("proxy failure on %s", tool)
            result = to_wire_result(ProxyFailure(PROXY_ERROR, tool, f"{type(exc).__name__}: {exc}"))
        return await fit_to_tool(result, tool, self.catalog)

    async def _gated_call(
        self, ctx: ServerRequestContext[Any], tool: str, params: types.CallToolRequestParams
    ) -> dict[str, Any]:
        raw = dict(ctx.params or {})
        meta = raw.get("_meta")
        meta = meta if isinstance(meta, Mapping) else {}
        call = await call_of(self.gate, tool, params.arguments, meta, by="mcp-proxy")
        if isinstance(call, Refused):
            return to_wire_result(call.payload)
        caller = token_agent(ctx.request)  # the agent an OAuth access token names, if any
        if caller is not None:
            if call.agent is not None and call.agent != caller:
                message = f"{META_AGENT} is {call.agent!r}; the access token is {caller!r}'s"
                refused = await self.gate.refuse(call, AGENT_MISMATCH, message, by="mcp-proxy")
                return to_wire_result(refused.payload)
            call = replace(call, agent=caller)

        if self.sessions is not None and call.agent is None:
            # The proxy acts for its --agent: every decision on this call is that agent's, the
            # refusals that come before any plan (undeclared, missing plan) and ungated allows too.
            call = replace(call, agent=self.sessions.agent)
        stamped = False
        if self.sessions is not None and call.plan is None and META_PLAN not in meta:
            plan = await self.sessions.plan_for(ctx, tool)
            if plan is not None:
                call = replace(call, plan=plan)
                stamped = True

        judged = Judged(self.gate, call)
        try:
            return await self._forward_judged(ctx, judged, raw, meta, stamped)
        finally:
            await judged.release()

    async def _forward_judged(
        self,
        ctx: ServerRequestContext[Any],
        judged: Judged,
        raw: dict[str, Any],
        meta: Mapping[str, Any],
        stamped: bool,
    ) -> dict[str, Any]:
        tool, call = judged.call.tool, judged.call

        def refused() -> dict[str, Any]:
            """The refusal as the model reads it: what changed, and the current values."""
            if self.sessions is not None:
                return to_wire_result(self.sessions.explain(ctx, judged.verdict, stamped))
            return to_wire_result(for_model(judged.verdict))

        if not await judged.recheck():
            return refused()
        # Forward exactly the call that was judged, whatever else the raw request carried, and
        # the fencing token of its allow (never one the client sent).
        raw["name"] = tool
        raw["arguments"] = dict(call.args)
        sent_meta = with_fence(meta, judged.fence_wire())
        if sent_meta or "_meta" in raw:
            raw["_meta"] = sent_meta

        on_progress = None
        if meta.get(PROGRESS_TOKEN) is not None:

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                await ctx.session.report_progress(progress, total, message)

        upstream = self.forwarder.upstream
        with self.forwarder.relay.forwarding(ctx, judged.recheck, judged.fence_wire) as origin:
            try:
                result = await self.forwarder.forward(
                    origin, "tools/call", raw, upstream.call_timeout, on_progress
                )
            except Revoked:
                return refused()
            except UpstreamFailure as exc:
                if not judged.allowed:
                    return refused()
                return to_wire_result(ProxyFailure(exc.code, tool, str(exc), judged.decision()))
            except InputRefused as exc:
                if not judged.allowed:
                    return refused()
                message = f"the client did not answer the upstream's question: {exc.error.message}"
                return to_wire_result(ProxyFailure(INPUT_REFUSED, tool, message, judged.decision()))
        if not judged.allowed:
            # Judged again mid-call (a handshake-era upstream's question) and refused: the
            # upstream got an error instead of the answer; its result is not the client's.
            return refused()
        out_meta = dict(result.get("_meta") or {})
        out_meta[META_DECISION] = judged.decision().wire()
        result["_meta"] = out_meta
        return result
