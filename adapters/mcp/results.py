"""What a client sees when the proxy does not hand it the upstream's own result.

Refusals and proxy failures are tool results with `isError: true`, never JSON-RPC errors: the
model that made the call reads them and can replan (the MCP spec puts business failures in
results "so models can self-correct"). `to_wire_result` builds them from the gate's wire model
(`planfence.plugins.gate.RefusalPayload`) and `fit_to_tool` is the one place that decides what a
client receives.

A refusal must be a valid result for the tool it refuses. Clients built on the official TypeScript
SDK (desktop apps, the MCP Inspector) validate `structuredContent` against the tool's
`outputSchema` even when `isError` is true, so a refusal with a planfence body there reaches the
user as a schema error instead. Hence the refusal object always travels twice, as the text
content (JSON) and in `_meta["dev.planfence/refusal"]`, and as `structuredContent` only for a
tool known to declare no `outputSchema`.

A refusal (the gate said replan or block, or the call's `_meta` was malformed) is
`{"planfence": RefusalPayload}`; a failure after the gate allowed the call (upstream crashed,
hung, answered with an error, or asked the client a question it could not answer) is
`{"planfence": ProxyFailure}`, whose `decision` is the allow's `AllowPayload`.

`call_of` is the one translation of a `tools/call` into the gate's `ToolCall`, for the proxy and
the in-server gates alike, and `decision_wire` the allow's decision as it travels.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planfence.plugins.gate import (
    ALLOW,
    AllowPayload,
    GateMiddleware,
    RefusalPayload,
    Refused,
    ToolCall,
    Verdict,
)
from planfence.shared_memory import PlanfenceError
from planfence.shared_memory.records import validate_agent

from ..base import for_model
from .links import UPSTREAM_ERROR, UPSTREAM_TIMEOUT, UPSTREAM_UNAVAILABLE
from .meta import MALFORMED_META, META_AGENT, META_PLAN, META_REFUSAL

if TYPE_CHECKING:
    from .catalog import ToolCatalog

# Failure codes for calls the gate allowed but the upstream did not complete (the upstream's own
# are in `upstream.py`).
PROXY_ERROR = "proxy_error"
# The upstream asked the client a question (sampling, elicitation, roots) the client could not or
# would not answer.
INPUT_REFUSED = "input_refused"


@dataclass(frozen=True)
class ProxyFailure:
    """The gate allowed the call (or had no say) but no upstream result can be returned;
    `decision` is the allow's, when there was one."""

    code: str
    tool: str
    message: str
    decision: AllowPayload | Mapping[str, Any] | None = None

    def wire(self) -> dict[str, Any]:
        decision = self.decision
        if isinstance(decision, AllowPayload):
            decision = decision.wire()
        elif decision is not None:
            decision = dict(decision)
        return {
            "error": self.code,
            "tool": self.tool,
            "message": self.message,
            "decision": decision,
        }


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
        except PlanfenceError as exc:
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


def to_wire_result(problem: Verdict | RefusalPayload | ProxyFailure) -> dict[str, Any]:
    """The `CallToolResult` (wire form) for a refused call or a failed forwarded call."""
    if isinstance(problem, Verdict):
        problem = RefusalPayload.of(problem)
    payload = {"planfence": problem.wire()}
    return {
        "content": [{"type": "text", "text": json.dumps(payload, sort_keys=True)}],
        "structuredContent": payload,
        "isError": True,
        "resultType": "complete",
        "_meta": {META_REFUSAL: payload},
    }


async def fit_to_tool(result: dict[str, Any], tool: str, catalog: ToolCatalog) -> dict[str, Any]:
    """The `tools/call` result a client receives. The upstream's own results pass unchanged; a
    planfence refusal or failure keeps `structuredContent` only when the tool surely declares
    no `outputSchema`."""
    meta = result.get("_meta")
    if not (isinstance(meta, dict) and META_REFUSAL in meta):
        return result
    if await catalog.output_schema(tool) is False:
        return result
    return {k: v for k, v in result.items() if k != "structuredContent"}


__all__ = [
    "INPUT_REFUSED",
    "MALFORMED_META",
    "PROXY_ERROR",
    "UPSTREAM_ERROR",
    "UPSTREAM_TIMEOUT",
    "UPSTREAM_UNAVAILABLE",
    "ProxyFailure",
    "fit_to_tool",
    "for_model",
    "to_wire_result",
]
