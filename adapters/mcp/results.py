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
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planfence.plugins.gate import AllowPayload, RefusalPayload, Verdict

from .._records import for_model
from .meta import MALFORMED_META, META_REFUSAL
from .upstream import UPSTREAM_ERROR, UPSTREAM_TIMEOUT, UPSTREAM_UNAVAILABLE

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
