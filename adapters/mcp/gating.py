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
from functools import partial
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
from .links import UpstreamFailure
from .meta import (
    AGENT_MISMATCH,
    META_AGENT,
    META_DECISION,
    META_PLAN,
    META_REFUSAL,
    with_fence,
)
from .peers import Call
from .results import (
    INPUT_REFUSED,
    PROXY_ERROR,
    UPSTREAM_ERROR,
    ProxyFailure,
    call_of,
    decision_wire,
    fit_to_tool,
    for_model,
    to_wire_result,
)
from .upstream import error_text

if TYPE_CHECKING:
    from .proxy import PlanfenceProxy

logger = logging.getLogger("planfence.mcp")


class Judged:
    """The latest judgement of one gated call; `recheck` judges it again."""

    def __init__(self, gate: GateMiddleware, call: ToolCall) -> None:
        self.gate = gate
        self.call = call
        self.latest: Judgement | None = None
        self.handed = False  # its lease is released by the task that waits for the upstream

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

    def __init__(self, proxy: PlanfenceProxy) -> None:
        self.proxy = proxy
        self.gate = proxy.seam
        self.sessions = proxy.sessions
        self.catalog = proxy.catalog

    async def handle(self, call: Call, message: dict[str, Any], inline: bool = False) -> None:
        """Judge and forward one `tools/call`. `inline`: the caller reads the client's next
        message only when this returns, so nothing here waits for the upstream (a call whose
        answer needs more than writing it is finished by a task of its own)."""
        params = rpc.params_of(message)
        tool, args = params.get("name"), params.get("arguments")
        if not isinstance(tool, str) or (args is not None and not isinstance(args, dict)):
            call.fail(rpc.INVALID_PARAMS, "tools/call takes a tool name and an arguments object")
            return
        try:
            if call.peer.traced or tracing.quiet():
                result = await self._call(call, message, tool, args or {}, inline)
            else:
                with tracing.served(tool, rpc.meta_of(params)):
                    result = await self._call(call, message, tool, args or {}, inline)
        except Exception as exc:  # an exception here must not become a silent hang
            logger.exception("proxy failure on %s", tool)
            result = to_wire_result(ProxyFailure(PROXY_ERROR, tool, f"{type(exc).__name__}: {exc}"))
        if result is not None:  # else forwarded: answered when the upstream answers
            await self._reply(call, result, tool)

    async def _call(
        self, call: Call, message: dict[str, Any], tool: str, args: dict[str, Any], inline: bool
    ) -> dict[str, Any] | None:
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
            return await self._forward(call, message, judged, meta, stamped, inline)
        finally:
            if not judged.handed:
                await judged.release()

    async def _forward(
        self,
        call: Call,
        message: dict[str, Any],
        judged: Judged,
        meta: dict[str, Any],
        stamped: bool,
        inline: bool,
    ) -> dict[str, Any] | None:
        """The call judged and, when allowed, forwarded: its result, or None when the result
        is written as soon as the upstream answers (`_finished`), or by a task (`_awaited`)."""
        if not await judged.recheck():
            return self._outcome(call, judged, stamped, None)
        upstream = self.proxy.upstream
        out = self._outgoing(call, message, judged, meta)
        call.recheck = judged.recheck
        if self._direct(call, judged):
            call.finish = partial(self._finished, call, judged, stamped, out)
            try:
                if not upstream.alive:
                    await upstream.ensure()  # a crashed upstream is restarted for the call
                self.proxy.flight.send(call, out, None, upstream.call_timeout)
            except UpstreamFailure as exc:
                call.finish = call.recheck = None
                return self._outcome(call, judged, stamped, None, exc)
            call.note = (judged.latest, decision_wire(judged.verdict))  # as the upstream works
            return None
        if inline:
            judged.handed = True  # the task releases the lease
            call.task = self.proxy.spawn(self._awaited(call, judged, stamped, out))
            return None
        return await self._answer_of(call, judged, stamped, out)

    async def _awaited(
        self, call: Call, judged: Judged, stamped: bool, out: dict[str, Any]
    ) -> None:
        try:
            result = await self._answer_of(call, judged, stamped, out)
        finally:
            await judged.release()
        await self._reply(call, result, judged.call.tool)

    async def _answer_of(
        self, call: Call, judged: Judged, stamped: bool, out: dict[str, Any]
    ) -> dict[str, Any]:
        """Forward the call and wait for the upstream's answer (bridged and rechecked)."""
        try:
            with tracing.sending(judged.call.tool, out["params"]):
                got = await self._exchange(call, out, judged)
        except Revoked:
            return self._outcome(call, judged, stamped, None)
        except UpstreamFailure as exc:
            return self._outcome(call, judged, stamped, None, exc)
        except InputRefused as exc:
            text = f"the client did not answer the upstream's question: {exc.error.get('message')}"
            return self._outcome(call, judged, stamped, None, ProxyFailure(INPUT_REFUSED, "", text))
        finally:
            call.recheck = None
        return self._outcome(call, judged, stamped, got)

    def _outgoing(
        self, call: Call, message: dict[str, Any], judged: Judged, meta: dict[str, Any]
    ) -> dict[str, Any]:
        """Exactly the call that was judged, whatever else the request carried, with the
        fencing token of its allow (never one the client sent), in the upstream's era."""
        upstream = self.proxy.upstream
        params = {**rpc.params_of(message), "name": judged.call.tool}
        params["arguments"] = dict(judged.call.args)
        sent = with_fence(meta, judged.fence_wire())
        if call.modern and upstream.modern:
            sent = upstream.envelope(sent)  # the proxy's identity, the client's log level
        elif call.modern:
            sent = {k: v for k, v in sent.items() if not k.startswith(rpc.ENVELOPE_PREFIX)}
        else:
            sent = _handshake_meta(sent, call, upstream)
        if sent or "_meta" in params:
            params["_meta"] = sent
        return rpc.request(call.id, "tools/call", params)

    def _direct(self, call: Call, judged: Judged) -> bool:
        """Whether the answer can be written the moment it comes: the client speaks the
        upstream's era (no questions to bridge), no lease to release, no span to close."""
        upstream = self.proxy.upstream
        lease = getattr(judged.latest, "lease", None)
        return call.modern == upstream.modern and lease is None and tracing.quiet()

    def _outcome(
        self,
        call: Call,
        judged: Judged,
        stamped: bool,
        got: dict[str, Any] | None,
        failure: UpstreamFailure | ProxyFailure | None = None,
    ) -> dict[str, Any]:
        """The result the client gets for a judged call."""
        tool = judged.call.tool
        if not judged.allowed or call.revoked:
            # Refused, maybe judged again mid-call (a handshake-era upstream's question): the
            # upstream got an error instead of the answer; its result is not the client's.
            if self.sessions is not None:
                return to_wire_result(self.sessions.explain(call.peer, judged.verdict, stamped))
            return to_wire_result(for_model(judged.verdict))
        if isinstance(failure, ProxyFailure):
            return to_wire_result(replace(failure, tool=tool, decision=judged.decision()))
        if failure is not None:
            return to_wire_result(ProxyFailure(failure.code, tool, str(failure), judged.decision()))
        result = got.get("result") if got is not None else None
        if not isinstance(result, dict):
            text = error_text(got.get("error") if got is not None else None)
            return to_wire_result(ProxyFailure(UPSTREAM_ERROR, tool, text, judged.decision()))
        made = call.note
        fresh = isinstance(made, tuple) and made[0] is judged.latest  # not judged again since
        decision = made[1] if fresh else decision_wire(judged.verdict)
        meta = result.get("_meta")
        return {
            **result,
            "_meta": {**(meta if isinstance(meta, dict) else {}), META_DECISION: decision},
        }

    def _finished(
        self,
        call: Call,
        judged: Judged,
        stamped: bool,
        out: dict[str, Any],
        got: dict[str, Any] | None,
        failure: UpstreamFailure | None = None,
    ) -> None:
        """The upstream's answer to a call forwarded directly, written at once."""
        call.finish = call.recheck = None
        error = got.get("error") if got is not None else None
        if isinstance(error, dict) and error.get("code") == rpc.HEADER_MISMATCH:
            call.task = self.proxy.spawn(self._again(call, judged, stamped, out))
            return
        result = self._outcome(call, judged, stamped, got, failure)
        if META_REFUSAL in result["_meta"]:  # a refusal or failure, fitted to the tool first
            call.task = self.proxy.spawn(self._reply(call, result, judged.call.tool))
        else:
            call.reply(result)

    async def _again(self, call: Call, judged: Judged, stamped: bool, out: dict[str, Any]) -> None:
        """The upstream's tools changed since they were listed (a 2026-era HTTP upstream checks
        the headers their schemas declare): list them again and resend once."""
        await self.catalog.refresh()
        call.recheck = judged.recheck
        try:
            got = await self._exchange(call, out, judged)
        except UpstreamFailure as exc:
            result = self._outcome(call, judged, stamped, None, exc)
        else:
            result = self._outcome(call, judged, stamped, got)
        finally:
            call.recheck = None
        await self._reply(call, result, judged.call.tool)

    async def _reply(self, call: Call, result: dict[str, Any], tool: str) -> None:
        result = await fit_to_tool(result, tool, self.catalog)
        call.reply(to_client(result, "tools/call", call.modern, self.proxy.upstream))

    async def _exchange(self, call: Call, out: dict[str, Any], judged: Judged) -> dict[str, Any]:
        timeout = self.proxy.upstream.call_timeout
        got = await exchange(
            self.proxy, call, out, timeout, recheck=judged.recheck, fence=judged.fence_wire
        )
        failure = got.get("error")
        if isinstance(failure, dict) and failure.get("code") == rpc.HEADER_MISMATCH:
            await self.catalog.refresh()  # see `_again`
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
