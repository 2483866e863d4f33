"""planfence.fence: fencing tokens for tool authors (re-exported from `planfence.plugins.gate`).

Inside a gated tool call:

    from planfence import fence

    token = fence.current()                       # what the allow was checked against
    await fence.verify(token, store)              # raises StaleFenceError if a head moved
    await fence.fenced_write(token, store, batch) # a store write conditional on those heads

An MCP server behind the proxy finds the token in the call's `_meta["dev.planfence/fence"]`;
check that a gate it trusts signed it: `verify(meta_token, store, keyring=gate_keyring)` (a
keyring whose keys are marked as gate keys, `planfence keys generate --gate`), or
`verify(meta_token, store, keyring=ring, gates={"gate-1"})`.
"""

from planfence.plugins.gate.fence import (
    FENCE_TYPE,
    FenceError,
    FenceSignatureError,
    FenceToken,
    MalformedFenceError,
    StaleFenceError,
    TokenSigner,
    TokenVerifier,
    bound,
    conditions,
    current,
    fenced_write,
    issue,
    verify,
    verify_sync,
)

__all__ = [
    "FENCE_TYPE",
    "FenceError",
    "FenceSignatureError",
    "FenceToken",
    "MalformedFenceError",
    "StaleFenceError",
    "TokenSigner",
    "TokenVerifier",
    "bound",
    "conditions",
    "current",
    "fenced_write",
    "issue",
    "verify",
    "verify_sync",
]
