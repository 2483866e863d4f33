"""The `_meta` keys planfence reads and writes.

The proxy forwards a request's `_meta` as it came, the planfence keys included, so an upstream
can log which plan authorised its call. On a `tools/call` the 2026-era envelope (keys under
`io.modelcontextprotocol/`) names the proxy, not the client (the client's own log-level opt-in
stays), and `dev.planfence/fence` is written by the gate only (the fencing token of the allow):
a client's own value is replaced, or dropped. `forwardable_meta` is what an application that
makes its own upstream connection should forward of a client's `_meta`: everything but the
connection's envelope and progress token.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
