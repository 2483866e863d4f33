"""The `_meta` keys planfence reads and writes.

The proxy forwards a request's `_meta` as it came, the planfence keys included, so an upstream
can log which plan authorised its call. On a `tools/call` the 2026-era envelope (keys under
`io.modelcontextprotocol/`) names the proxy, not the client (the client's own log-level opt-in
stays), and `dev.planfence/fence` is written by the gate only (the fencing token of the allow):
a client's own value is replaced, or dropped. `forwardable_meta` is what an application that
makes its own upstream connection should forward of a client's `_meta`: everything but the
connection's envelope and progress token.

`call_of` is the one translation of a `tools/call` into the gate's `ToolCall`, for the proxy and
the in-server gates alike.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from planfence.plugins.gate import (
    ALLOW,
    AllowPayload,
    GateMiddleware,
    Refused,
    ToolCall,
    Verdict,
)
from planfence.shared_memory import PlanFenceError, validate_agent

META_PLAN = "dev.planfence/plan"
META_AGENT = "dev.planfence/agent"
META_DECISION = "dev.planfence/decision"
META_REFUSAL = "dev.planfence/refusal"
META_FENCE = "dev.planfence/fence"
RESERVED_PREFIX = "io.modelcontextprotocol/"
PROGRESS_TOKEN = "progressToken"
# The reason codes the MCP adapters add to the gate's: `_meta` planfence keys of the wrong type,
# and an agent that is not the one the caller's OAuth access token names.
MALFORMED_META = "malformed_meta"
AGENT_MISMATCH = "agent_mismatch"


async def call_of(
    gate: GateMiddleware,
    tool: str,
    args: Mapping[str, Any] | None,
    meta: Mapping[str, Any] | None,
    *,
    by: str,
) -> ToolCall | Refused:
    """The gate's view of a `tools/call`: the plan and agent from its `_meta`. An agent id that
    is not one is refused with `malformed_meta`, on the record (`by` names who refused)."""
    meta = meta if isinstance(meta, Mapping) else {}
    call = ToolCall(tool, dict(args or {}), meta.get(META_PLAN), meta.get(META_AGENT))
    if call.agent is not None:
        try:
            validate_agent(call.agent)
        except PlanFenceError as exc:
            return await gate.refuse(call, MALFORMED_META, f"{META_AGENT}: {exc}", by=by)
    return call


def decision_wire(verdict: Verdict) -> dict[str, Any]:
    """An allow's `_meta["dev.planfence/decision"]`, the gate's `AllowPayload` in wire form
    (the same decision, as a call repeats, is built once)."""
    return dict(
        _decision_wire(str(verdict.reason), verdict.tool, verdict.plan, verdict.decision_id)
    )


@functools.lru_cache(maxsize=1024)
def _decision_wire(
    reason: str, tool: str, plan: str | None, decision_id: int | None
) -> dict[str, Any]:
    verdict = Verdict(ALLOW, reason, tool, plan, decision_id=decision_id)
    return AllowPayload.of(verdict).wire()


def with_fence(meta: Mapping[str, Any], token: Mapping[str, Any] | None) -> dict[str, Any]:
    """`meta` carrying the gate's fencing token, and never one a client put there."""
    out = {k: v for k, v in meta.items() if k != META_FENCE}
    if token is not None:
        out[META_FENCE] = dict(token)
    return out


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
