"""Taking the lease an allow holds while its tool runs (a tool's `lease_ms` in the policy).

The lease is granted only on the heads the gate checked: if one moved between the check and the
lease, the call is judged again (it usually comes back as a replan). If an owner is already
waiting to advance one of the keys, the head is about to move: the lease waits for that advance
(at most as long as the owner waits) and the call is judged again. Anything else that keeps a
lease from being taken refuses the call: an allow that should hold a lease never runs without one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from planfence.shared_memory import (
    AsyncStore,
    HeadConflictError,
    Lease,
    StoreError,
    UnknownKeyError,
)
from planfence.shared_memory.errors import AdvancePendingError, LeasesUnsupportedError

from .verdicts import CURRENT, LEASE_UNAVAILABLE, STORE_UNAVAILABLE

J = TypeVar("J")
LEASE_TRIES = 3
"""How many times a call is judged again because its heads moved before the lease was taken."""
PENDING_POLL_S = 0.005
PENDING_MARGIN_S = 0.5


@dataclass(frozen=True)
class LeaseRefused:
    """No lease could be taken: the call is refused (blocked) with this reason."""

    reason: str
    message: str


async def take_lease(
    store: AsyncStore,
    judged: J,
    again: Callable[[], Awaitable[J]],
    holder: str,
    ttl_ms: int,
) -> tuple[J, Lease | None] | LeaseRefused:
    """Lease the heads `judged` (an allow) was checked against; (the judgement, its lease), a
    new judgement without a lease when judging again refused the call, or `LeaseRefused`."""
    for _ in range(LEASE_TRIES):
        verdict: Any = judged.verdict  # type: ignore[attr-defined]
        if verdict.reason != CURRENT:
            return judged, None  # an ungated tool: no heads to hold
        heads = {k: verdict.heads.get(k) for k in verdict.scope}
        try:
            return judged, await _lease_when_not_pending(store, heads, holder, ttl_ms)
        except (HeadConflictError, UnknownKeyError):
            pass  # a head moved (or a key lost its owner) since the check
        except AdvancePendingError as exc:
            return LeaseRefused(LEASE_UNAVAILABLE, f"an owner's advance did not finish: {exc}")
        except LeasesUnsupportedError as exc:
            return LeaseRefused(LEASE_UNAVAILABLE, f"the tool's policy asks for a lease: {exc}")
        except StoreError as exc:
            return LeaseRefused(STORE_UNAVAILABLE, f"lease: {exc}")
        judged = await again()
        if not getattr(judged, "allowed", False):
            return judged, None
    return LeaseRefused(
        LEASE_UNAVAILABLE,
        f"the heads kept moving between the check and the lease ({LEASE_TRIES} tries)",
    )


async def _lease_when_not_pending(
    store: AsyncStore, heads: dict[str, str | None], holder: str, ttl_ms: int
) -> Lease:
    """`store.lease`, waiting while an owner's announced advance is pending (it then either
    moves the head, and the lease fails with `HeadConflictError`, or is given up)."""
    deadline: float | None = None
    while True:
        try:
            return await store.lease(heads, holder=holder, ttl_ms=ttl_ms)
        except AdvancePendingError as exc:
            now = time.monotonic()
            if deadline is None:
                deadline = now + exc.wait_s + PENDING_MARGIN_S
            if now > deadline:
                raise
            await asyncio.sleep(PENDING_POLL_S)


async def release_lease(store: AsyncStore, lease: Lease) -> None:
    await store.release(lease)


__all__ = ["LEASE_TRIES", "LeaseRefused", "release_lease", "take_lease"]
