"""`tools/call` through the gate's seam: every call is judged before it goes upstream, and
judged again before each retry and before an answer to the upstream's question is handed over
(the plan may go stale while a client answers). An allowed call goes upstream with its fencing
token in `_meta["dev.planfence/fence"]`; its lease (if its policy declares one) is held until
the upstream answers. The result comes back as the upstream sent it, with
`_meta["dev.planfence/decision"]`; a refusal or a failure is answered by the proxy (`results.py`).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from planfence.plugins.gate import (
    AllowPayload,
    GateMiddleware,
    Judgement,
    Refused,
    ToolCall,
    Verdict,
)

from . import jsonrpc as rpc
from . import tracing
from .bridge import InputRefused, Revoked, exchange, to_client
from .meta import AGENT_MISMATCH, META_AGENT, META_DECISION, META_PLAN, call_of, with_fence
from .peers import Call
from .results import (
    INPUT_REFUSED,
    PROXY_ERROR,
    UPSTREAM_ERROR,
    ProxyFailure,
    fit_to_tool,
    for_model,
    to_wire_result,
)
from .upstream import UpstreamFailure, error_text

if TYPE_CHECKING:
    from .proxy import PlanFenceProxy

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
    """The proxy's `tools/call`: judged, then forwarded or refused."""

    def __init__(self, proxy: PlanFenceProxy) -> None:
        self.proxy = proxy
        self.gate = proxy.seam
        self.sessions = proxy.sessions
        self.catalog = proxy.catalog

    async def handle(self, call: Call, message: dict[str, Any]) -> None:
        params = rpc.params_of(message)
        tool, args = params.get("name"), params.get("arguments")
        if not isinstance(tool, str) or (args is not None and not isinstance(args, dict)):
            call.fail(rpc.INVALID_PARAMS, "tools/call takes a tool name and an arguments object")
            return
        try:
            with tracing.served(tool, rpc.meta_of(params), call.peer.traced):
                result = await self._call(call, message, tool, args or {})
        except Exception as exc:  # an exception here must not become a silent hang
            logger.exception("proxy failure on %s", tool)
            result = to_wire_result(ProxyFailure(PROXY_ERROR, tool, f"{type(exc).__name__}: {exc}"))
        result = await fit_to_tool(result, tool, self.catalog)
        call.reply(to_client(result, "tools/call", call.modern, self.proxy.upstream))

    async def _call(
        self, call: Call, message: dict[str, Any], tool: str, args: dict[str, Any]
    ) -> dict[str, Any]:
        meta = rpc.meta_of(rpc.params_of(message))
        caller, sessions = call.agent, self.sessions
        if caller is not None and sessions is not None and caller != sessions.agent:
            # The proxy reads, writes and stamps plans for its --agent: only that agent's token
            # may use it.
            text = f"this proxy acts for {sessions.agent!r}; the token is {caller!r}'s"
            refused = await self.gate.refuse(
                ToolCall(tool, args, None, caller), AGENT_MISMATCH, text, by="mcp-proxy"
            )
            return to_wire_result(refused.payload)
        if sessions is not None and sessions.serves(tool):
            return await sessions.call(call.peer, tool, args)
        judged_call = await call_of(self.gate, tool, args, meta, by="mcp-proxy")
        if isinstance(judged_call, Refused):
            return to_wire_result(judged_call.payload)
        if caller is not None:  # the agent an OAuth access token names
            if judged_call.agent is not None and judged_call.agent != caller:
                text = f"{META_AGENT} is {judged_call.agent!r}; the access token is {caller!r}'s"
                refused = await self.gate.refuse(judged_call, AGENT_MISMATCH, text, by="mcp-proxy")
                return to_wire_result(refused.payload)
            judged_call = replace(judged_call, agent=caller)
        if sessions is not None and judged_call.agent is None:
            # The proxy acts for its --agent: every decision on this call is that agent's, the
            # refusals that come before any plan (undeclared, missing plan) and ungated allows too.
            judged_call = replace(judged_call, agent=sessions.agent)
        stamped = False
        if sessions is not None and judged_call.plan is None and META_PLAN not in meta:
            plan = await sessions.plan_for(call.peer, tool)
            if plan is not None:
                judged_call, stamped = replace(judged_call, plan=plan), True
        judged = Judged(self.gate, judged_call)
        try:
            return await self._forward(call, message, judged, meta, stamped)
        finally:
            await judged.release()

    async def _forward(
        self,
        call: Call,
        message: dict[str, Any],
        judged: Judged,
        meta: dict[str, Any],
        stamped: bool,
    ) -> dict[str, Any]:
        tool = judged.call.tool

        def refused() -> dict[str, Any]:
            """The refusal as the model reads it: what changed, and the current values."""
            if self.sessions is not None:
                return to_wire_result(self.sessions.explain(call.peer, judged.verdict, stamped))
            return to_wire_result(for_model(judged.verdict))

        if not await judged.recheck():
            return refused()
        upstream = self.proxy.upstream
        # Forward exactly the call that was judged, whatever else the request carried, and the
        # fencing token of its allow (never one the client sent).
        params = {**rpc.params_of(message), "name": tool, "arguments": dict(judged.call.args)}
        sent = with_fence(meta, judged.fence_wire())
        if call.modern and upstream.modern:
            sent = upstream.envelope(sent)  # the proxy's identity, the client's log level
        elif call.modern:
            sent = {k: v for k, v in sent.items() if not k.startswith(rpc.ENVELOPE_PREFIX)}
        else:
            sent = _handshake_meta(sent, call, upstream)
        if sent or "_meta" in params:
            params["_meta"] = sent
        out = rpc.request(call.id, "tools/call", params)
        call.recheck = judged.recheck
        try:
            with tracing.sending(tool, sent):
                got = await self._exchange(call, out, judged)
        except Revoked:
            return refused()
        except UpstreamFailure as exc:
            if not judged.allowed:
                return refused()
            return to_wire_result(ProxyFailure(exc.code, tool, str(exc), judged.decision()))
        except InputRefused as exc:
            if not judged.allowed:
                return refused()
            text = f"the client did not answer the upstream's question: {exc.error.get('message')}"
            return to_wire_result(ProxyFailure(INPUT_REFUSED, tool, text, judged.decision()))
        finally:
            call.recheck = None
        if not judged.allowed or call.revoked:
            # Judged again mid-call (a handshake-era upstream's question) and refused: the
            # upstream got an error instead of the answer; its result is not the client's.
            return refused()
        result = got.get("result")
        if not isinstance(result, dict):
            failure = ProxyFailure(UPSTREAM_ERROR, tool, error_text(got.get("error")))
            return to_wire_result(replace(failure, decision=judged.decision()))
        out_meta = dict(result.get("_meta") or {})
        out_meta[META_DECISION] = judged.decision().wire()
        return {**result, "_meta": out_meta}

    async def _exchange(self, call: Call, out: dict[str, Any], judged: Judged) -> dict[str, Any]:
        timeout = self.proxy.upstream.call_timeout
        got = await exchange(
            self.proxy, call, out, timeout, recheck=judged.recheck, fence=judged.fence_wire
        )
        failure = got.get("error")
        if isinstance(failure, dict) and failure.get("code") == rpc.HEADER_MISMATCH:
            # The upstream's tools changed since they were listed (a 2026-era HTTP upstream
            # checks the headers their schemas declare): list them again and resend once.
            await self.catalog.refresh()
            got = await exchange(
                self.proxy, call, out, timeout, recheck=judged.recheck, fence=judged.fence_wire
            )
        return got


def _handshake_meta(sent: dict[str, Any], call: Call, upstream: Any) -> dict[str, Any]:
    """A handshake-era client's `_meta`, for the upstream's era."""
    if not upstream.modern:
        return sent
    from .relay import DEFAULT_LEGACY_LOG_LEVEL

    out = upstream.envelope(sent)
    out[rpc.LOG_LEVEL] = call.peer.log_level or DEFAULT_LEGACY_LOG_LEVEL
    return dict(out)
