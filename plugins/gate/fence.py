"""Fencing tokens: what an allow was checked against, handed to the tool so it can re-check at
commit time.

Every allow carries a `FenceToken`: for each key in D(a), the head record id (and the key's
epoch) the gate compared the plan with, the tool, the plan, the audit decision, a digest of the
arguments and, when the tool's policy leases its heads, the lease. A gate with a signing key
(an Ed25519 `SigningKey`) signs it as a detached JWS; a gate without one issues it unsigned and
says so (`signed` is false, `sig` is null).

The tool reads its token with `current()` (the adapters set it for the duration of the call; the
MCP proxy also forwards it in `_meta["dev.planfence/fence"]`), then, just before its effect:

- `await verify(token, store, keyring=ring)` checks that a gate the tool trusts signed it (the
  keyring's gate keys, or `gates={...}`), re-reads the heads and raises `StaleFenceError` when
  one moved;
- `await fenced_write(token, store, batch)` makes a write to the store conditional on the heads
  (atomic: no head can move between the check and the write);
- `conditions(token)` gives (key, head) pairs for the same conditional write in the tool's own
  SQL (see the docs, "Fencing tokens").
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planfence.shared_memory import (
    AsyncStore,
    HeadConflictError,
    KeyState,
    Lease,
    PlanfenceError,
    Store,
    UnknownKeyError,
    WriteBatch,
)
from planfence.shared_memory.leases import ExpectHead

from .call import args_digest
from .verdicts import Verdict

FENCE_TYPE = "planfence-fence/1"
"""The JWS `typ` of a signed token (so no other signed message passes as one)."""


class FenceError(PlanfenceError):
    """A fencing token that does not hold at commit time."""


class MalformedFenceError(FenceError, ValueError):
    """Not a fencing token, or a token issued for other arguments or another tool."""


class FenceSignatureError(FenceError):
    """A token without the signature the verifier requires, or with a bad one."""


class StaleFenceError(FenceError):
    """A key's head (or epoch) moved since the gate checked it; `moved` maps each such key to
    (the head in the token, the head now)."""

    def __init__(self, moved: Mapping[str, tuple[str | None, str | None]]) -> None:
        self.moved = dict(moved)
        shown = ", ".join(
            f"{k}: {(was or 'empty')[:12]} -> {(now or 'none')[:12]}"
            for k, (was, now) in moved.items()
        )
        super().__init__(f"heads moved since the check ({shown}): the effect must not happen")


class TokenSigner(Protocol):
    """Signs as one agent (an Ed25519 `SigningKey` from `planfence.adapters.owner_service`)."""

    agent: str

    def sign(self, typ: str, fields: Mapping[str, Any]) -> str: ...


class TokenVerifier(Protocol):
    """Checks agents' signatures (a `PublicKeyring` from `planfence.adapters.owner_service`; its
    `gates` attribute, when it has one, names the agents whose keys it marks as gate keys)."""

    def verify(self, agent: str, typ: str, fields: Mapping[str, Any], sig: str) -> bool: ...


def trusted_gates(keyring: TokenVerifier | None, gates: Collection[str] | None) -> frozenset[str]:
    """The signers a verifier accepts a token from: `gates` when given, else the keyring's gate
    keys (none for a keyring that marks no gate: it then verifies no token)."""
    if gates is not None:
        if isinstance(gates, str):
            raise TypeError("gates= is a collection of agent ids, not one string")
        return frozenset(gates)
    marked = getattr(keyring, "gates", None)
    return frozenset(marked) if isinstance(marked, (set, frozenset)) else frozenset()


class FencedHead(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    head: str | None
    epoch: int = 0


class FencedLease(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    id: str = Field(max_length=64)
    ttl_ms: int


class FenceToken(BaseModel):
    """What one allow was checked against (crosses process boundaries: JSON via `to_wire`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    v: int = 1
    tool: str
    plan: str | None
    agent: str | None = None
    decision: int | None = None
    args_digest: str
    heads: dict[str, FencedHead]
    lease: FencedLease | None = None
    issued_at: float
    gate: str | None = None
    """The agent whose key signed the token (None: unsigned)."""
    sig: str | None = None

    @property
    def signed(self) -> bool:
        return self.sig is not None

    def signed_fields(self) -> dict[str, Any]:
        return self.model_dump(exclude={"sig"})

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump()

    @classmethod
    def parse(cls, token: FenceToken | Mapping[str, Any] | str | bytes) -> FenceToken:
        """A token from its wire form (a dict or JSON text). Raises `MalformedFenceError`."""
        if isinstance(token, FenceToken):
            return token
        try:
            data = json.loads(token) if isinstance(token, (str, bytes)) else dict(token)
            return cls.model_validate(data)
        except (ValueError, TypeError, ValidationError) as exc:
            raise MalformedFenceError(f"not a fencing token: {exc}") from None


def token_epoch(verdict: Verdict, key: str) -> int:
    """The owner epoch of `key` the gate checked (0 when the verdict does not say: no key has
    epoch 0, so such a token never verifies)."""
    return int(verdict.epochs.get(key, 0))


def key_epoch(state: KeyState) -> int:
    """A key's owner epoch now, as the store reports it."""
    return state.epoch


def issue(
    verdict: Verdict, *, lease: Lease | None = None, signer: TokenSigner | None = None
) -> FenceToken:
    """The token for an allowed call: its D(a) with the heads the gate checked (signed by
    `signer` when given)."""
    token = FenceToken(
        tool=verdict.tool,
        plan=verdict.plan,
        agent=verdict.agent,
        decision=verdict.decision_id,
        args_digest=verdict.args_digest,
        heads={
            k: FencedHead(head=verdict.heads.get(k), epoch=token_epoch(verdict, k))
            for k in verdict.scope
        },
        lease=FencedLease(id=lease.id, ttl_ms=lease.ttl_ms) if lease is not None else None,
        issued_at=round(time.time(), 3),
        gate=signer.agent if signer is not None else None,
    )
    if signer is None:
        return token
    return token.model_copy(update={"sig": signer.sign(FENCE_TYPE, token.signed_fields())})


# ---- the token of the call running now

_CURRENT: ContextVar[FenceToken | None] = ContextVar("planfence_fence", default=None)


def current() -> FenceToken | None:
    """The fencing token of the tool call running now (None: not inside a fenced call)."""
    return _CURRENT.get()


@contextmanager
def bound(token: FenceToken | None) -> Iterator[FenceToken | None]:
    """Make `token` the one `current()` returns inside the block (and in tasks it starts)."""
    reset = _CURRENT.set(token)
    try:
        yield token
    finally:
        try:
            _CURRENT.reset(reset)
        except ValueError:  # the block ended in another context
            _CURRENT.set(None)


# ---- re-checking at commit time


def _checked(
    token: FenceToken | Mapping[str, Any] | str | bytes,
    keyring: TokenVerifier | None,
    require_signature: bool | None,
    args: Mapping[str, Any] | None,
    tool: str | None = None,
    gates: Collection[str] | None = None,
) -> FenceToken:
    parsed = FenceToken.parse(token)
    if tool is not None and parsed.tool != tool:
        raise MalformedFenceError(f"the token was issued for tool {parsed.tool!r}, not {tool!r}")
    required = (
        (keyring is not None or gates is not None)
        if require_signature is None
        else require_signature
    )
    if required:
        if parsed.sig is None or parsed.gate is None:
            raise FenceSignatureError("the token is unsigned (the gate has no signing key)")
        if keyring is None:
            raise FenceSignatureError("a signature is required but no keyring was given")
        trusted = trusted_gates(keyring, gates)
        if not trusted:
            raise FenceSignatureError(
                "no gate is trusted: name the gates (gates={...}) or give a keyring that marks "
                "gate keys (planfence keys generate --gate); a keyring of agents alone verifies "
                "no token"
            )
        if parsed.gate not in trusted:
            raise FenceSignatureError(
                f"the token is signed as {parsed.gate!r}, not by a trusted gate "
                f"({', '.join(sorted(trusted))})"
            )
        if not keyring.verify(parsed.gate, FENCE_TYPE, parsed.signed_fields(), parsed.sig):
            raise FenceSignatureError(f"bad signature on the token (signed as {parsed.gate!r})")
    if args is not None and args_digest(args) != parsed.args_digest:
        raise MalformedFenceError("the token was issued for other arguments")
    return parsed


def _unmoved(token: FenceToken, states: Mapping[str, KeyState]) -> FenceToken:
    """`token`, when every head (and epoch) it names is the one in `states`; else
    `StaleFenceError` naming what moved."""
    moved: dict[str, tuple[str | None, str | None]] = {}
    for key, fenced in token.heads.items():
        state = states.get(key)
        if state is None or state.head != fenced.head or key_epoch(state) != fenced.epoch:
            moved[key] = (fenced.head, state.head if state is not None else None)
    if moved:
        raise StaleFenceError(moved)
    return token


async def verify(
    token: FenceToken | Mapping[str, Any] | str | bytes,
    store: AsyncStore,
    *,
    keyring: TokenVerifier | None = None,
    gates: Collection[str] | None = None,
    require_signature: bool | None = None,
    args: Mapping[str, Any] | None = None,
    tool: str | None = None,
) -> FenceToken:
    """Re-check a token against the store now: every head (and epoch) it names is unchanged.

    Args:
        token: the token (`current()`, or the `_meta` value an MCP tool received).
        store: the store the gate checked against.
        keyring: public keys to check the gate's signature with; required whenever the token
            crossed a boundary you do not trust (it came in a request). Only a gate's signature
            counts: a key the keyring marks `"role": "gate"`, or an agent named in `gates`.
        gates: the agents whose tokens this tool trusts (default: the keyring's gate keys). A
            token signed by anyone else (the executor whose call was gated, another gate) is
            refused, and so is every token when no gate is trusted.
        require_signature: default: required when a keyring (or `gates`) is given.
        args: the arguments the tool runs with: they must be those the gate judged.
        tool: the tool's name: the token must have been issued for it.

    Returns:
        The parsed token.

    A token stays valid for as long as every head (and epoch) it names is unchanged, whatever
    its lease: the lease only holds the owners back while the tool runs.

    Raises:
        StaleFenceError: a head moved; the effect must not happen.
        FenceSignatureError: unsigned, not signed by a trusted gate, or a bad signature.
        MalformedFenceError: the token does not parse.
    """
    parsed = _checked(token, keyring, require_signature, args, tool, gates)
    return _unmoved(parsed, await store.states(parsed.heads))


def verify_sync(
    token: FenceToken | Mapping[str, Any] | str | bytes,
    store: Store,
    *,
    keyring: TokenVerifier | None = None,
    gates: Collection[str] | None = None,
    require_signature: bool | None = None,
    args: Mapping[str, Any] | None = None,
    tool: str | None = None,
) -> FenceToken:
    """`verify` for synchronous tools, over a sync `Store`."""
    parsed = _checked(token, keyring, require_signature, args, tool, gates)
    return _unmoved(parsed, store.states(parsed.heads))


def conditions(token: FenceToken | Mapping[str, Any] | str | bytes) -> tuple[ExpectHead, ...]:
    """The token's heads as conditions of a store write (`WriteBatch(expect=...)`)."""
    parsed = FenceToken.parse(token)
    return tuple(ExpectHead(k, h.head, h.epoch) for k, h in sorted(parsed.heads.items()))


async def fenced_write(
    token: FenceToken | Mapping[str, Any] | str | bytes,
    store: AsyncStore,
    batch: WriteBatch,
    *,
    keyring: TokenVerifier | None = None,
    gates: Collection[str] | None = None,
    require_signature: bool | None = None,
    args: Mapping[str, Any] | None = None,
    tool: str | None = None,
) -> None:
    """Write `batch` only if every head in the token is unchanged, atomically (the store
    checks the heads inside the write's own transaction).

    Raises:
        StaleFenceError: a head moved; nothing was written.
        FenceSignatureError: as for `verify`.
        MalformedFenceError: as for `verify`.
        PlanfenceError: what `store.write` raises.
    """
    parsed = _checked(token, keyring, require_signature, args, tool, gates)
    expect = (*batch.expect, *conditions(parsed))
    # The call's own lease holds other writers back, not the call's own effect.
    held = (*batch.held, parsed.lease.id) if parsed.lease is not None else batch.held
    try:
        await store.write(replace(batch, expect=expect, held=held))
    except (HeadConflictError, UnknownKeyError) as exc:
        key = exc.key
        if key not in parsed.heads:
            raise
        now = exc.current if isinstance(exc, HeadConflictError) else None
        raise StaleFenceError({key: (parsed.heads[key].head, now)}) from None


__all__ = [
    "FENCE_TYPE",
    "FenceError",
    "FenceSignatureError",
    "FenceToken",
    "FencedHead",
    "FencedLease",
    "MalformedFenceError",
    "StaleFenceError",
    "TokenSigner",
    "TokenVerifier",
    "bound",
    "conditions",
    "current",
    "fenced_write",
    "issue",
    "key_epoch",
    "token_epoch",
    "trusted_gates",
    "verify",
    "verify_sync",
]
