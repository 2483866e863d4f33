"""Reassignment, the fenced takeover of a key whose owner is gone: an assigner hands the key to a
new owner in a new owner epoch, in one write with its signed claim; the old owner is fenced (its
writes refused, writes conditional on its epoch refused, its leases ended)."""

from __future__ import annotations

from ..batches import AdvanceHead, ReassignOwner, WriteBatch
from ..errors import (
    EpochConflictError,
    HeadConflictError,
    LeaseHeldError,
    NotOwnerError,
    UnknownKeyError,
)
from ..leases import ExpectHead
from ..reads import GetOwnerChanges
from ..records import Record
from ..signing import owner_signed_by
from ..store import AsyncStore
from .checks_epochs import DigestSigner
from .runner import Check, Context, raises

KEY = "order/7/address"


async def _owned_by_alice(store: AsyncStore) -> str:
    admin = DigestSigner("admin")
    store.signer = admin
    try:
        await store.own(KEY, "alice", by="admin")
    finally:
        store.signer = None
    return (await store.put(KEY, {"line": "1 Harbour St"}, author="alice")).id


async def reassign_starts_a_new_epoch_signed_by_the_assigner(
    store: AsyncStore, ctx: Context
) -> None:
    head = await _owned_by_alice(store)
    admin = DigestSigner("admin")
    store.signer = admin
    try:
        moved = await store.reassign(KEY, "bob", by="admin", from_epoch=1)
    finally:
        store.signer = None
    assert (moved.kind, moved.owner, moved.by, moved.epoch) == ("owner", "bob", "admin", 2)
    assert (moved.head, moved.previous) == (head, head)  # the head stays
    state = (await store.states([KEY]))[KEY]
    assert (state.owner, state.head, state.version, state.epoch) == ("bob", head, 1, 2)
    assert (state.owner_from, state.head_sig) == ("admin", None)
    assert owner_signed_by(admin, KEY, "bob", 2, "admin", state.owner_sig)
    assert moved.sig == state.owner_sig
    [chain] = await store.read([GetOwnerChanges(KEY, 0)])
    assert [(c.owner, c.epoch, c.by) for c in chain] == [("alice", 1, "admin"), ("bob", 2, "admin")]
    # Unsigned when the store's signer is not the assigner's; the assigner is still named.
    moved = await store.reassign(KEY, "carol", by="admin")
    state = (await store.states([KEY]))[KEY]
    assert (state.owner, state.epoch, state.owner_from, state.owner_sig) == (
        "carol",
        3,
        "admin",
        None,
    )


async def the_old_owner_is_fenced_after_a_reassignment(store: AsyncStore, ctx: Context) -> None:
    head = await _owned_by_alice(store)
    await store.reassign(KEY, "bob", by="admin")
    with raises(NotOwnerError):
        await store.put(KEY, {"line": "late"}, author="alice")
    with raises(NotOwnerError):
        await store.transfer(KEY, "alice", by="alice")
    late = Record.create(KEY, {"line": "late"}, author="alice")
    with raises(NotOwnerError):
        await store.write(
            WriteBatch(records=(late,), ops=(AdvanceHead(KEY, late.id, head, "alice"),))
        )
    # A write conditional on the old epoch (a fencing token checked then) is refused.
    effect = Record.create("effects/ship", 1, author="bob")
    await store.own("effects/ship", "bob")
    seq = await store.last_seq()
    fenced = WriteBatch(
        records=(effect,),
        ops=(AdvanceHead("effects/ship", effect.id, None, "bob"),),
        expect=(ExpectHead(KEY, head, 1),),
    )
    with raises(HeadConflictError):
        await store.write(fenced)
    assert await store.changes(seq) == []
    await store.put(KEY, {"line": "2 Quay Rd"}, author="bob")  # the new owner advances


async def a_reassignment_from_a_past_epoch_writes_nothing(store: AsyncStore, ctx: Context) -> None:
    await _owned_by_alice(store)
    await store.reassign(KEY, "bob", by="admin", from_epoch=1)
    seq = await store.last_seq()
    with raises(EpochConflictError):
        await store.reassign(KEY, "carol", by="admin", from_epoch=1)  # a second assigner, late
    with raises(UnknownKeyError):
        await store.reassign("no/such/key", "carol", by="admin")
    batch = WriteBatch(ops=(ReassignOwner(KEY, "carol", "admin", 5),))
    with raises(EpochConflictError):
        await store.write(batch)
    assert await store.changes(seq) == []
    assert (await store.owner(KEY), await store.epoch(KEY)) == ("bob", 2)


async def a_reassignment_ends_the_old_epochs_leases(store: AsyncStore, ctx: Context) -> None:
    head = await _owned_by_alice(store)
    if not store.supports_leases:  # nothing to end; the takeover still works
        await store.reassign(KEY, "bob", by="admin")
        await store.put(KEY, {"line": "2 Quay Rd"}, author="bob", wait=False)
        return
    await store.lease({KEY: head}, holder="gate", ttl_ms=60_000)
    with raises(LeaseHeldError):
        await store.put(KEY, {"line": "held"}, author="alice", wait=False)
    await store.reassign(KEY, "bob", by="admin")
    await store.put(KEY, {"line": "2 Quay Rd"}, author="bob", wait=False)


REASSIGN_CHECKS: tuple[Check, ...] = (
    reassign_starts_a_new_epoch_signed_by_the_assigner,
    the_old_owner_is_fenced_after_a_reassignment,
    a_reassignment_from_a_past_epoch_writes_nothing,
    a_reassignment_ends_the_old_epochs_leases,
)
