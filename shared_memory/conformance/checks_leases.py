"""Head leases and conditional writes. The lease checks run on backends that hold leases
(`supports_leases`); a backend without them must refuse lease operations, never ignore them."""

from __future__ import annotations

import asyncio

from ..batches import WriteBatch
from ..errors import (
    AdvancePendingError,
    HeadConflictError,
    LeaseHeldError,
    LeasesUnsupportedError,
    NotOwnerError,
    UnknownKeyError,
)
from ..journal import Entry
from ..leases import ADVANCE, ExpectHead, HoldKey
from ..store import AsyncStore
from .runner import Check, CheckSkipped, Context, raises

KEY = "order/7"
OTHER = "address/ana"


def needs_leases(store: AsyncStore) -> None:
    if not store.supports_leases:
        raise CheckSkipped(f"{type(store).__name__} does not hold head leases")


async def _owned(store: AsyncStore) -> str:
    await store.own(KEY, "sales")
    await store.own(OTHER, "ana")
    await store.put(OTHER, {"line": "1 Harbour St"}, author="ana")
    return (await store.put(KEY, {"status": "confirmed"}, author="sales")).id


async def a_lease_holds_head_advances_until_released(store: AsyncStore, ctx: Context) -> None:
    needs_leases(store)
    head = await _owned(store)
    lease = await store.lease({KEY: head}, holder="executor", ttl_ms=60_000)
    with raises(LeaseHeldError) as err:
        await store.put(KEY, {"status": "cancelled"}, author="sales", wait=False)
    assert err.value.key == KEY
    assert err.value.holders == ("executor",)
    assert 0 < err.value.wait_s <= 60
    assert await store.head(KEY) == head
    # Other keys are not held.
    await store.put(OTHER, {"line": "9 Hill Rd"}, author="ana", wait=False)
    await store.release(lease)
    await store.put(KEY, {"status": "cancelled"}, author="sales", wait=False)
    assert await store.head(KEY) != head
    await store.release(lease)  # releasing twice is harmless


async def leases_are_shared_by_holders(store: AsyncStore, ctx: Context) -> None:
    needs_leases(store)
    head = await _owned(store)
    first = await store.lease({KEY: head}, holder="executor-1", ttl_ms=60_000)
    second = await store.lease({KEY: head}, holder="executor-2", ttl_ms=60_000)
    await store.release(first)
    with raises(LeaseHeldError) as err:
        await store.put(KEY, 2, author="sales", wait=False)
    assert err.value.holders == ("executor-2",)
    await store.release(second)
    await store.put(KEY, 2, author="sales", wait=False)


async def a_lease_is_granted_only_on_the_heads_given(store: AsyncStore, ctx: Context) -> None:
    needs_leases(store)
    head = await _owned(store)
    newer = await store.put(KEY, {"status": "packed"}, author="sales")
    with raises(HeadConflictError) as err:
        await store.lease({KEY: head, OTHER: await store.head(OTHER)}, holder="x", ttl_ms=60_000)
    assert err.value.current == newer.id
    # Nothing was leased: neither key is held.
    await store.put(OTHER, 3, author="ana", wait=False)
    await store.put(KEY, 3, author="sales", wait=False)
    with raises(UnknownKeyError):
        await store.lease({"nobody/owns": None}, holder="x", ttl_ms=1000)


async def an_expired_lease_holds_nobody(store: AsyncStore, ctx: Context) -> None:
    needs_leases(store)
    head = await _owned(store)
    await store.lease({KEY: head}, holder="crashed", ttl_ms=50)  # never released
    await asyncio.sleep(0.12)
    await store.put(KEY, 2, author="sales", wait=False)
    # A writer that waits gets through once a forgotten lease ends.
    await store.lease({KEY: await store.head(KEY)}, holder="crashed", ttl_ms=100)
    await store.put(KEY, 3, author="sales")
    assert (await store.get(str(await store.head(KEY)))).value == 3


async def a_waiting_owner_gets_no_new_lease_in_its_way(store: AsyncStore, ctx: Context) -> None:
    needs_leases(store)
    head = await _owned(store)
    lease = await store.lease({KEY: head}, holder="executor", ttl_ms=60_000)
    writer = asyncio.create_task(store.put(KEY, 2, author="sales"))
    refused: AdvancePendingError | None = None
    for _ in range(400):  # until the owner has announced its advance
        await asyncio.sleep(0.005)
        try:
            other = await store.lease({KEY: head}, holder="executor-2", ttl_ms=60_000)
        except AdvancePendingError as exc:
            refused = exc
            break
        await store.release(other)
    assert refused is not None and refused.key == KEY
    assert not writer.done()
    await store.release(lease)
    record = await asyncio.wait_for(writer, 30)
    assert await store.head(KEY) == record.id
    # The announcement went with the advance: leases are granted again.
    await store.release(await store.lease({KEY: record.id}, holder="executor", ttl_ms=1000))


async def only_the_owner_announces_an_advance(store: AsyncStore, ctx: Context) -> None:
    needs_leases(store)
    await _owned(store)
    with raises(NotOwnerError):
        await store.write(WriteBatch(leases=(HoldKey(KEY, "l1", "mallory", 1000, ADVANCE),)))


async def a_conditional_write_commits_only_on_the_expected_heads(
    store: AsyncStore, ctx: Context
) -> None:
    head = await _owned(store)
    effect = Entry("effect", subject=KEY, labels={"state": "done"})
    await store.write(WriteBatch(entries=(effect,), expect=(ExpectHead(KEY, head),)))
    assert len(await store.journal(kind="effect")) == 1
    await store.put(KEY, 2, author="sales")
    with raises(HeadConflictError) as err:
        await store.write(WriteBatch(entries=(effect,), expect=(ExpectHead(KEY, head),)))
    assert err.value.expected == head
    assert len(await store.journal(kind="effect")) == 1
    with raises(UnknownKeyError):
        await store.write(WriteBatch(entries=(effect,), expect=(ExpectHead("no/owner", None),)))


async def a_backend_without_leases_refuses_them(store: AsyncStore, ctx: Context) -> None:
    if store.supports_leases:
        raise CheckSkipped("the backend holds leases")
    head = await _owned(store)
    with raises(LeasesUnsupportedError):
        await store.lease({KEY: head}, holder="executor", ttl_ms=1000)
    with raises(LeasesUnsupportedError):
        await store.write(WriteBatch(leases=(HoldKey(KEY, "l1", "executor", 1000),)))


NEEDS_LEASES: tuple[Check, ...] = (
    a_lease_holds_head_advances_until_released,
    leases_are_shared_by_holders,
    a_lease_is_granted_only_on_the_heads_given,
    an_expired_lease_holds_nobody,
    a_waiting_owner_gets_no_new_lease_in_its_way,
    only_the_owner_announces_an_advance,
)
"""The checks a backend without leases skips."""

LEASE_CHECKS: tuple[Check, ...] = (
    *NEEDS_LEASES,
    a_conditional_write_commits_only_on_the_expected_heads,
    a_backend_without_leases_refuses_them,
)
