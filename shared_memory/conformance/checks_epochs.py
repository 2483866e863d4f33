"""Owner epochs and signed heads: a transfer starts a new epoch atomically with the owner change,
a head advance keeps exactly the signature its writer made for what was committed, and an owner
change keeps the ownership claim its giver signed (on the key and in the feed)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..batches import AdvanceHead, TransferOwner, WriteBatch
from ..errors import HeadConflictError, NotOwnerError, UnknownKeyError
from ..model import FIRST_EPOCH
from ..reads import GetOwnerChanges
from ..records import Record, canonical_json
from ..signing import HEAD_TYPE, OWNER_TYPE, head_signed_by, owner_signed_by
from ..store import AsyncStore
from .runner import TAMPER_HEADS, Check, Context, raises

KEY = "order/7/address"


class DigestSigner:
    """A stand-in for an agent's key: a digest of the agent and the message. Not a signature
    scheme (anyone can make one); it lets a check see exactly what the store was asked to sign."""

    def __init__(self, agent: str) -> None:
        self.agent = agent
        self.calls = 0

    def sign(self, typ: str, fields: Mapping[str, Any]) -> str:
        self.calls += 1
        message = f"{self.agent}\n{typ}\n{canonical_json(dict(fields))}".encode()
        return hashlib.sha256(message).hexdigest()

    def verify(self, agent: str, typ: str, fields: Mapping[str, Any], sig: str) -> bool:
        return DigestSigner(agent).sign(typ, fields) == sig


async def transfer_starts_a_new_epoch(store: AsyncStore, ctx: Context) -> None:
    first = await store.own(KEY, "alice")
    assert first.epoch == FIRST_EPOCH == await store.epoch(KEY)
    r1 = await store.put(KEY, 1, author="alice")
    assert (await store.states([KEY]))[KEY].epoch == FIRST_EPOCH  # a write keeps the epoch
    moved = await store.transfer(KEY, "bob", by="alice")
    assert (moved.kind, moved.owner, moved.epoch) == ("owner", "bob", FIRST_EPOCH + 1)
    state = (await store.states([KEY]))[KEY]
    assert (state.owner, state.head, state.version, state.epoch) == ("bob", r1.id, 1, 2)
    back = await store.transfer(KEY, "alice", by="bob")
    assert back.epoch == 3
    seq = await store.last_seq()
    with raises(NotOwnerError):
        await store.transfer(KEY, "mallory", by="bob")  # bob's epoch is over
    with raises(UnknownKeyError):
        await store.transfer("no/such/key", "bob", by="alice")
    with raises(UnknownKeyError):
        await store.epoch("no/such/key")
    assert await store.changes(seq) == []
    assert await store.epoch(KEY) == 3
    r2 = await store.put(KEY, 2, author="alice")
    feed = await store.changes()
    assert [(c.kind, c.owner, c.epoch) for c in feed] == [
        ("owner", "alice", 1),
        ("head", "alice", 1),
        ("owner", "bob", 2),
        ("owner", "alice", 3),
        ("head", "alice", 3),
    ]
    assert feed[-1].head == r2.id
    assert [s.epoch for s in await store.keys()] == [3]


async def a_failed_batch_keeps_the_epoch(store: AsyncStore, ctx: Context) -> None:
    await store.own(KEY, "alice")
    r1 = await store.put(KEY, 1, author="alice")
    r2 = Record.create(KEY, 2, author="bob")
    # The transfer and bob's stale advance share one batch: neither happens.
    batch = WriteBatch(
        records=(r2,),
        ops=(TransferOwner(KEY, "bob", "alice"), AdvanceHead(KEY, r2.id, None, "bob")),
    )
    with raises(HeadConflictError):
        await store.write(batch)
    state = (await store.states([KEY]))[KEY]
    assert (state.owner, state.epoch, state.head) == ("alice", 1, r1.id)
    good = WriteBatch(
        records=(r2,),
        ops=(TransferOwner(KEY, "bob", "alice"), AdvanceHead(KEY, r2.id, r1.id, "bob")),
    )
    changes = await store.write(good)
    assert [(c.kind, c.epoch) for c in changes] == [("owner", 2), ("head", 2)]


async def signed_heads_are_kept_as_signed(store: AsyncStore, ctx: Context) -> None:
    alice, bob = DigestSigner("alice"), DigestSigner("bob")
    await store.own(KEY, "alice")
    unsigned = await store.put(KEY, 0, author="alice")
    assert (await store.states([KEY]))[KEY].head_sig is None  # no signer: no signature
    store.signer = alice
    try:
        r1 = await store.put(KEY, 1, author="alice", parents=[unsigned.id])
        state = (await store.states([KEY]))[KEY]
        assert (state.head, state.version, state.epoch) == (r1.id, 2, 1)
        assert head_signed_by(alice, "alice", KEY, r1.id, 2, 1, state.head_sig)
        assert not head_signed_by(alice, "alice", KEY, r1.id, 1, 1, state.head_sig)
        [change] = (await store.changes())[-1:]
        assert change.sig == state.head_sig and change.epoch == 1
        calls = alice.calls
        with raises(HeadConflictError):  # a lost compare-and-set stores no signature
            await store.put(KEY, 2, author="alice", expected_head=unsigned.id)
        assert (await store.states([KEY]))[KEY].head_sig == state.head_sig
        await store.transfer(KEY, "bob", by="alice")
        moved = (await store.states([KEY]))[KEY]
        assert (moved.owner, moved.epoch, moved.head_sig) == ("bob", 2, None)
        # alice's signer does not sign for bob; bob's batch brings bob's own signer.
        r2 = Record.create(KEY, 2, author="bob", parents=[r1.id])
        batch = WriteBatch(records=(r2,), ops=(AdvanceHead(KEY, r2.id, r1.id, "bob"),))
        await store.write(batch)
        assert (await store.states([KEY]))[KEY].head_sig is None
        # alice signed her transfer's ownership claim, and neither the lost write nor bob's.
        assert alice.calls == calls + 1
        r3 = Record.create(KEY, 3, author="bob", parents=[r2.id])
        batch = WriteBatch(records=(r3,), ops=(AdvanceHead(KEY, r3.id, r2.id, "bob"),))
        await store.write(replace(batch, signer=bob))
        got = (await store.states([KEY]))[KEY]
        assert head_signed_by(bob, "bob", KEY, r3.id, 4, 2, got.head_sig)
        assert not head_signed_by(bob, "alice", KEY, r3.id, 4, 2, got.head_sig)
        claim = {"key": KEY, "record": r3.id, "seq": 4, "epoch": 2}
        assert got.head_sig == bob.sign(HEAD_TYPE, claim)
    finally:
        store.signer = None


async def a_rewritten_head_reads_back_as_written(store: AsyncStore, ctx: Context) -> None:
    """The `TAMPER_HEADS` hook works: a store (or whoever writes its tables) can replay an older
    signed head, and nothing in the store notices. Readers that do not trust it must."""
    ctx.require(TAMPER_HEADS)
    store.signer = DigestSigner("alice")
    try:
        await store.own(KEY, "alice")
        await store.put(KEY, 1, author="alice")
        old = (await store.states([KEY]))[KEY]
        await store.put(KEY, 2, author="alice")
        assert (await store.states([KEY]))[KEY].version == 2
        await ctx.tamper_head(store, old)
        assert (await store.states([KEY]))[KEY] == old
    finally:
        store.signer = None


async def ownership_claims_are_kept_as_signed(store: AsyncStore, ctx: Context) -> None:
    admin, alice = DigestSigner("admin"), DigestSigner("alice")
    store.signer = admin
    try:
        first = await store.own(KEY, "alice", by="admin")
    finally:
        store.signer = None
    state = (await store.states([KEY]))[KEY]
    assert (state.owner, state.epoch, state.owner_from) == ("alice", 1, "admin")
    assert owner_signed_by(admin, KEY, "alice", 1, "admin", state.owner_sig)
    assert not owner_signed_by(admin, KEY, "alice", 2, "admin", state.owner_sig)
    assert first.sig == state.owner_sig and first.by == "admin"
    claim = {"key": KEY, "owner": "alice", "epoch": 1, "from": "admin"}
    assert state.owner_sig == admin.sign(OWNER_TYPE, claim)
    # A head advance keeps the ownership claim; a transfer by the signer's agent signs its own.
    await store.put(KEY, 1, author="alice")
    assert (await store.states([KEY]))[KEY].owner_sig == state.owner_sig
    await store.write(WriteBatch(ops=(TransferOwner(KEY, "bob", "alice"),), signer=alice))
    moved = (await store.states([KEY]))[KEY]
    assert (moved.owner, moved.epoch, moved.owner_from, moved.head_sig) == ("bob", 2, "alice", None)
    assert owner_signed_by(alice, KEY, "bob", 2, "alice", moved.owner_sig)
    calls = alice.calls
    # A signer signs only what its own agent hands over; unsigned, the giver is still named.
    await store.write(WriteBatch(ops=(TransferOwner(KEY, "carol", "bob"),), signer=alice))
    last = (await store.states([KEY]))[KEY]
    assert (last.owner_from, last.owner_sig, alice.calls) == ("bob", None, calls)
    await store.own("other/key", "bob")
    [chain, later, none] = await store.read(
        [GetOwnerChanges(KEY, 0), GetOwnerChanges(KEY, 1), GetOwnerChanges("no/such/key", 0)]
    )
    assert [(c.owner, c.epoch, c.by) for c in chain] == [
        ("alice", 1, "admin"),
        ("bob", 2, "alice"),
        ("carol", 3, "bob"),
    ]
    assert [c.sig for c in chain] == [state.owner_sig, moved.owner_sig, None]
    assert later == chain[1:] and none == []
    assert all(c.kind == "owner" and c.key == KEY for c in chain)
    assert (await store.read([GetOwnerChanges(KEY, 3)])) == [[]]


EPOCH_CHECKS: tuple[Check, ...] = (
    transfer_starts_a_new_epoch,
    a_failed_batch_keeps_the_epoch,
    signed_heads_are_kept_as_signed,
    a_rewritten_head_reads_back_as_written,
    ownership_claims_are_kept_as_signed,
)
