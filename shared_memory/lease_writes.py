"""Writes that meet leases: which batches a backend must read the touched keys' leases for, and
a head advance that waits until the leases holding it back end (announcing itself meanwhile, so
that no new lease is taken on its keys)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from .batches import AdvanceHead, ReassignOwner, WriteBatch, WriteResult
from .errors import AdvancePendingError, LeaseHeldError
from .leases import (
    ADVANCE,
    ANNOUNCE_MARGIN_S,
    MAX_LEASE_MS,
    WAIT_POLL_S,
    DropLease,
    HoldKey,
    new_lease_id,
)


def needs_leases(batch: WriteBatch) -> bool:
    """Whether a backend must read the touched keys' leases to apply `batch`."""
    return bool(batch.leases) or any(
        isinstance(op, (AdvanceHead, ReassignOwner)) for op in batch.ops
    )


async def write_waiting(
    write: Callable[[WriteBatch], Awaitable[WriteResult]], batch: WriteBatch, wait: bool
) -> WriteResult:
    """Apply `batch`; when a lease holds one of its head advances back and `wait` is true,
    announce the advance, wait until the leases end, and apply it then (with the announcement
    dropped in the same write).

    Raises:
        LeaseHeldError: `wait` is false and a lease is held on a key the batch advances.
    """
    try:
        return await write(batch)
    except AdvancePendingError:
        raise
    except LeaseHeldError as exc:
        if not wait:
            raise
        held = exc
    advances = [op for op in batch.ops if isinstance(op, AdvanceHead)]
    intent = new_lease_id()
    drop = tuple(DropLease(op.key, intent) for op in advances)
    announced_until = 0.0
    try:
        while True:
            now = time.monotonic()
            if announced_until - now < held.wait_s + ANNOUNCE_MARGIN_S / 2:
                ttl = round((held.wait_s + ANNOUNCE_MARGIN_S) * 1000)
                ttl = min(max(ttl, 1), MAX_LEASE_MS)
                announce = tuple(HoldKey(op.key, intent, op.by, ttl, ADVANCE) for op in advances)
                await write(WriteBatch(leases=announce))
                announced_until = now + ttl / 1000
            await asyncio.sleep(min(max(held.wait_s, 0.0005), WAIT_POLL_S))
            try:
                return await write(replace(batch, leases=(*batch.leases, *drop)))
            except LeaseHeldError as exc:
                held = exc
    except BaseException:
        if announced_until:
            # Best effort: an announcement left behind ends by itself.
            with contextlib.suppress(Exception):
                await asyncio.shield(write(WriteBatch(leases=drop)))
        raise
