"""The `_meta` keys planfence reads and writes, and what of a request's `_meta` is forwarded.

Keys under `io.modelcontextprotocol/` belong to one connection (protocol version, client info,
the progress token's connection) and are never forwarded; every other key is, the planfence keys
included, so an upstream can log which plan authorised its call. On a `tools/call`,
`dev.planfence/fence` is written by the gate only (the fencing token of the allow): a client's
own value is replaced, or dropped.
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


def clean_result_meta(result: dict[str, Any]) -> dict[str, Any]:
    meta = result.get("_meta")
    if isinstance(meta, Mapping):
        kept = {k: v for k, v in meta.items() if not str(k).startswith(RESERVED_PREFIX)}
        if kept:
            result["_meta"] = kept
        else:
            result.pop("_meta", None)
    return result
