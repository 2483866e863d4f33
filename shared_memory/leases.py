"""Head leases and conditional writes: what closes the window between a check and its effect.

A lease is a short, shared hold on some keys: while it lives, their owners' head advances wait
(or fail with `LeaseHeldError` for a writer that asked not to wait). Several holders may lease
the same key at once; a lease ends when its holder drops it or when its time runs out, so a
holder that crashes blocks nobody for longer than the lease's duration.

An owner that has to wait first announces its advance (a lease of kind `advance`, which only the
key's owner may take): from then on no new lease is granted on the key, so the owner waits at
most for the leases already held. The announcement is dropped in the same write as the advance.

`ExpectHead` makes any write batch conditional: it commits only if the key's head is still the
one expected. Leases are written with it (a lease is granted only on the heads that were
checked), and so are fenced effects (`planfence.fence`).

Everything here is pure except `write_waiting`, the retry loop every backend shares; backends
store the rows (`LeaseRow`) and call `plan_leases` inside their write transaction.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from .errors import (
    AdvancePendingError,
    HeadConflictError,
    LeaseHeldError,
    NotOwnerError,
    UnknownKeyError,
)
from .model import KeyState

HOLD: Literal["hold"] = "hold"
ADVANCE: Literal["advance"] = "advance"
LeaseKind = Literal["hold", "advance"]
MAX_LEASE_MS = 600_000
"""The longest lease a store grants (ten minutes): a lease is meant to cover one tool call."""
WAIT_POLL_S = 0.005
"""How often a waiting writer tries again (leases are usually released well before they end)."""
ANNOUNCE_MARGIN_S = 1.0
"""An owner's announcement outlives the leases it waits for by this much (if the owner crashes
while waiting, new leases are refused for at most that long after the last one ended)."""


@dataclass(frozen=True)
class HoldKey:
    """Take (or renew) lease `lease` on `key` for `ttl_ms` milliseconds."""

    key: str
    lease: str
    holder: str
    ttl_ms: int
    kind: LeaseKind = HOLD


@dataclass(frozen=True)
class DropLease:
    """End lease `lease` on `key` (nothing happens if it already ended)."""

    key: str
    lease: str


@dataclass(frozen=True)
class ExpectHead:
    """The batch commits only if `key`'s head is `head` (None: the key has no version yet) and,
    when `epoch` is given, the key is still in that owner epoch (no transfer since)."""

    key: str
    head: str | None
    epoch: int | None = None


LeaseOp = HoldKey | DropLease


@dataclass(frozen=True)
class LeaseRow:
    """One stored lease on one key; `expires` is in seconds on the backend's clock."""

    key: str
    lease: str
    holder: str
    kind: LeaseKind
    expires: float


@dataclass(frozen=True)
class Lease:
    """A lease a holder took on some keys (`AsyncStore.lease`); drop it with `store.release`."""

    id: str
    keys: tuple[str, ...]
    holder: str
    ttl_ms: int
    taken_at: float = field(default_factory=time.monotonic, compare=False)

    @property
    def deadline(self) -> float:
        """When the lease ends at the latest, on this process's `time.monotonic()` clock."""
        return self.taken_at + self.ttl_ms / 1000

    def to_dict(self) -> dict[str, object]:
        keys = list(self.keys)
        return {"id": self.id, "keys": keys, "holder": self.holder, "ttl_ms": self.ttl_ms}


@dataclass(frozen=True)
class LeasePlan:
    """What a backend changes in its lease table: rows to upsert, (key, lease) pairs to delete."""

    upsert: list[LeaseRow] = field(default_factory=list)
    delete: list[tuple[str, str]] = field(default_factory=list)


def new_lease_id() -> str:
    return uuid.uuid4().hex


def check_ttl(ttl_ms: object) -> int:
    """A lease duration: a whole number of milliseconds, 1 to `MAX_LEASE_MS`."""
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or not 0 < ttl_ms <= MAX_LEASE_MS:
        raise ValueError(f"a lease lasts 1 to {MAX_LEASE_MS} ms (a whole number), not {ttl_ms!r}")
    return ttl_ms


def check_expectations(expect: Sequence[ExpectHead], states: Mapping[str, KeyState]) -> None:
    """Raise `HeadConflictError` (or `UnknownKeyError`) unless every expected head holds."""
    for e in expect:
        state = states.get(e.key)
        if state is None:
            raise UnknownKeyError(e.key)
        if state.head != e.head or (e.epoch is not None and state.epoch != e.epoch):
            raise HeadConflictError(e.key, e.head, state.head)


def plan_leases(
    leases: Sequence[LeaseOp],
    advancing: Iterable[str],
    states: Mapping[str, KeyState],
    rows: Iterable[LeaseRow],
    now: float,
    held_by_writer: Iterable[str] = (),
) -> LeasePlan:
    """Check a batch's lease ops and head advances against the live leases; pure.

    Args:
        leases: the batch's lease ops.
        advancing: the keys whose heads the batch advances.
        states: the touched keys' current states (a lease needs a key with an owner).
        rows: the stored leases of the touched keys, expired ones included.
        now: the backend's clock, in seconds.
        held_by_writer: ids of leases the writer itself holds (a fenced tool writing a key of
            its own scope): they do not hold its advances back.

    Raises:
        LeaseHeldError: a head advance on a key with a live lease held by someone.
        AdvancePendingError: a lease asked on a key whose owner announced an advance.
        UnknownKeyError, NotOwnerError: a lease on a key without an owner; an announcement
            by someone other than the owner.
    """
    dropped = {(op.key, op.lease) for op in leases if isinstance(op, DropLease)}
    live = [r for r in rows if r.expires > now and (r.key, r.lease) not in dropped]
    plan = LeasePlan(delete=sorted(dropped))
    for op in leases:
        if isinstance(op, DropLease):
            continue
        state = states.get(op.key)
        if state is None:
            raise UnknownKeyError(op.key)
        if op.kind == ADVANCE:
            if op.holder != state.owner:
                raise NotOwnerError(op.key, op.holder, state.owner)
        else:
            pending = [r for r in live if r.key == op.key and r.kind == ADVANCE]
            if pending:
                raise AdvancePendingError(op.key, max(r.expires for r in pending) - now)
        plan.upsert.append(LeaseRow(op.key, op.lease, op.holder, op.kind, now + op.ttl_ms / 1000))
    own = set(held_by_writer)
    for key in sorted(set(advancing)):
        held = [r for r in live if r.key == key and r.kind == HOLD and r.lease not in own]
        if held:
            holders = tuple(sorted({r.holder for r in held}))
            raise LeaseHeldError(key, max(r.expires for r in held) - now, holders)
    return plan


__all__ = [
    "ADVANCE",
    "HOLD",
    "MAX_LEASE_MS",
    "DropLease",
    "ExpectHead",
    "HoldKey",
    "Lease",
    "LeaseOp",
    "LeasePlan",
    "LeaseRow",
    "check_expectations",
    "check_ttl",
    "new_lease_id",
    "plan_leases",
]
