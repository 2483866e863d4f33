"""Owners a gate does not take on the store's word: in untrusted-store mode each key's owner must
be proven by signed ownership claims, from an assigner the gate trusts, through every transfer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from audit_modes import check_until_recorded
from hypothesis import given, settings
from hypothesis import strategies as st

from planfence.adapters.owner_service import PublicKeyring, SigningKey
from planfence.plugins.gate import Gate, Policy, ToolCall, create_plan
from planfence.plugins.gate.owner_chain import OwnerChains
from planfence.plugins.gate.store_heads import SignedHeads
from planfence.shared_memory import (
    AsyncStore,
    Change,
    GetOwnerChanges,
    KeyState,
    ReadOp,
    Record,
    StoreUnavailableError,
    WriteBatch,
)
from planfence.shared_memory.backends.memory import MemoryStore
from planfence.shared_memory.batches import TransferOwner
from planfence.shared_memory.conformance.checks_epochs import DigestSigner
from planfence.shared_memory.signing import head_claim, sign_head, sign_owner

KEY = "order/7"
POLICY = Policy.from_toml('[tools.ship]\ndepends_on = ["order/{id}"]\n')
ARGS = {"id": "7"}
AGENTS = ("admin", "x", "y", "z", "mallory")
SIGNING = {a: SigningKey.generate(a) for a in AGENTS}
RING = PublicKeyring({"keys": [k.public_jwk() for k in SIGNING.values()]})


def untrusting(store: AsyncStore, audit: str = "durable") -> Gate:
    return Gate(store, POLICY, verify_heads=RING, owner_assigners={"admin"}, audit=audit)


class CountingStore(MemoryStore):
    """A memory store that counts the owner-change reads it answers, and can lie in them:
    `forged` entries are served as if the feed held them."""

    def __init__(self) -> None:
        super().__init__()
        self.owner_reads = 0
        self.forged: list[Change] = []
        self.failing: BaseException | None = None

    async def _read(self, ops: Sequence[ReadOp]) -> list[Any]:
        out = await super()._read(ops)
        for i, op in enumerate(ops):
            if isinstance(op, GetOwnerChanges):
                if self.failing is not None:
                    raise self.failing
                self.owner_reads += 1
                extra = [c for c in self.forged if c.key == op.key and c.epoch > op.after_epoch]
                out[i] = sorted([*out[i], *extra], key=lambda c: c.epoch)
        return out


async def plan_on(store: AsyncStore, record: Record) -> str:
    return (await create_plan(store, author="planner", parents=[record.id])).id


async def transfer(store: AsyncStore, to: str, by: str) -> None:
    batch = WriteBatch(ops=(TransferOwner(KEY, to, by),), signer=SIGNING[by])
    await store.write(batch)


async def signed_put(store: AsyncStore, owner: str, value: Any, *parents: str) -> Record:
    store.signer = SIGNING[owner]
    try:
        return await store.put(KEY, value, author=owner, parents=list(parents))
    finally:
        store.signer = None


async def assigned(store: AsyncStore, owner: str = "x", by: str = "admin") -> Record:
    store.signer = SIGNING[by]
    try:
        await store.own(KEY, owner, by=by)
    finally:
        store.signer = None
    return await signed_put(store, owner, 1)


async def tamper_head(store: AsyncStore, state: KeyState) -> None:
    await store._tamper_head(state)  # type: ignore[attr-defined]


async def test_a_genuine_transfer_chain_is_proven_by_a_fresh_gate(astore: AsyncStore) -> None:
    r1 = await assigned(astore)
    await transfer(astore, "y", by="x")
    await transfer(astore, "z", by="y")
    r2 = await signed_put(astore, "z", 2, r1.id)
    v = await untrusting(astore).check(ToolCall("ship", ARGS, await plan_on(astore, r2)))
    assert (v.verdict, v.reason, v.epochs) == ("allow", "current", {KEY: 3})
    # Control: the same chain, for a gate whose only assigner signed none of its claims,
    # proves nothing (an assigner's own signed claim anchors its epoch: see test_gate_reassign).
    other = Gate(astore, POLICY, verify_heads=RING, owner_assigners={"mallory"})
    v = await other.check(ToolCall("ship", ARGS, await plan_on(astore, r2)))
    assert (v.verdict, v.reason) == ("block", "owner_unauthenticated")
    assert "does not trust to assign owners" in v.message


async def test_a_lying_store_cannot_hand_a_key_to_another_keyring_agent(
    astore: AsyncStore,
) -> None:
    r1 = await assigned(astore)
    gate = untrusting(astore)
    plan = await plan_on(astore, r1)
    assert (await gate.check(ToolCall("ship", ARGS, plan))).allowed
    state = (await astore.states([KEY]))[KEY]
    # mallory is in the keyring and signs "her" head; the store names her owner, in the same
    # epoch, in the next one (signing the claim herself) and two epochs on.
    as_mallory = sign_head(SIGNING["mallory"], KEY, r1.id, state.version, state.epoch)
    same = replace(state, owner="mallory", head_sig=as_mallory)
    nxt = replace(
        state,
        owner="mallory",
        epoch=2,
        owner_from="x",
        owner_sig=sign_owner(SIGNING["mallory"], KEY, "mallory", 2),
        head_sig=sign_head(SIGNING["mallory"], KEY, r1.id, state.version, 2),
    )
    jump = replace(nxt, epoch=3, head_sig=sign_head(SIGNING["mallory"], KEY, r1.id, 1, 3))
    for lie, said in (
        (same, "this gate verified 'x'"),
        (nxt, "is not signed by 'x'"),
        (jump, "the feed proves epoch 1"),
    ):
        await tamper_head(astore, lie)
        for judge in (gate, untrusting(astore)):  # one that remembers x, and a fresh one
            v = await judge.check(ToolCall("ship", ARGS, plan))
            assert (v.verdict, v.reason) == ("block", "owner_unauthenticated"), lie
        assert said in (await gate.check(ToolCall("ship", ARGS, plan))).message
    # Control: the store's word alone (heads checked, owners not) accepts mallory.
    assert SignedHeads(RING).answer(nxt).error is None
    await tamper_head(astore, state)
    assert (await gate.check(ToolCall("ship", ARGS, plan))).allowed


async def test_a_transfer_not_signed_by_the_previous_owner_blocks(astore: AsyncStore) -> None:
    r1 = await assigned(astore)
    gate = untrusting(astore)
    assert (await gate.check(ToolCall("ship", ARGS, await plan_on(astore, r1)))).allowed
    await astore.transfer(KEY, "y", by="x")  # no signer: an unsigned claim
    r2 = await signed_put(astore, "y", 2, r1.id)
    plan = await plan_on(astore, r2)
    v = await gate.check(ToolCall("ship", ARGS, plan))
    assert (v.verdict, v.reason) == ("block", "owner_unauthenticated")
    state = (await astore.states([KEY]))[KEY]
    for owner_from, signer in (("x", "mallory"), ("mallory", "mallory"), ("x", "y")):
        sig = SIGNING[signer].sign(
            "planfence-owner/1", {"key": KEY, "owner": "y", "epoch": 2, "from": owner_from}
        )
        await tamper_head(astore, replace(state, owner_from=owner_from, owner_sig=sig))
        v = await gate.check(ToolCall("ship", ARGS, plan))
        assert (v.verdict, v.reason) == ("block", "owner_unauthenticated"), (owner_from, signer)
    # Control: x's own signature of the same claim proves it.
    good = replace(state, owner_from="x", owner_sig=sign_owner(SIGNING["x"], KEY, "y", 2))
    await tamper_head(astore, good)
    assert (await gate.check(ToolCall("ship", ARGS, plan))).allowed


async def test_a_first_owner_not_assigned_by_a_trusted_assigner_blocks(
    astore: AsyncStore,
) -> None:
    r1 = await assigned(astore, owner="mallory", by="mallory")  # she assigns herself
    v = await untrusting(astore).check(ToolCall("ship", ARGS, await plan_on(astore, r1)))
    assert (v.verdict, v.reason) == ("block", "owner_unauthenticated")
    assert "'mallory', whom this gate does not trust" in v.message


async def test_an_epoch_rollback_stays_a_head_rollback(astore: AsyncStore) -> None:
    r1 = await assigned(astore)
    old = (await astore.states([KEY]))[KEY]
    await transfer(astore, "y", by="x")
    r2 = await signed_put(astore, "y", 2, r1.id)
    gate = untrusting(astore)
    assert (await gate.check(ToolCall("ship", ARGS, await plan_on(astore, r2)))).allowed
    await tamper_head(astore, old)  # the whole epoch-1 state, validly signed
    v = await gate.check(ToolCall("ship", ARGS, await plan_on(astore, r1)))
    assert (v.verdict, v.reason) == ("block", "head_rollback")


async def test_the_feed_is_read_only_when_the_epoch_jumped() -> None:
    store = CountingStore()
    await store.setup()
    r1 = await assigned(store)
    gate = untrusting(store)
    plan = await plan_on(store, r1)
    assert (
        await gate.check(ToolCall("ship", ARGS, plan))
    ).allowed  # epoch 1: proven by the key's claim
    assert (await gate.check(ToolCall("ship", ARGS, plan))).allowed  # remembered
    await transfer(store, "y", by="x")
    r2 = await signed_put(store, "y", 2, r1.id)
    assert (await gate.check(ToolCall("ship", ARGS, await plan_on(store, r2)))).allowed  # one step
    assert store.owner_reads == 0
    await transfer(store, "z", by="y")
    await transfer(store, "x", by="z")
    r3 = await signed_put(store, "x", 3, r2.id)
    plan = await plan_on(store, r3)
    v = await gate.check(ToolCall("ship", ARGS, plan))
    assert (v.verdict, v.epochs, store.owner_reads) == ("allow", {KEY: 4}, 1)
    assert (await gate.check(ToolCall("ship", ARGS, plan))).allowed
    assert store.owner_reads == 1
    # A fresh gate reads the chain once; a forged feed entry (x to mallory, "signed" by
    # mallory) cannot carry a key the store hands to her.
    assert (await untrusting(store).check(ToolCall("ship", ARGS, plan))).allowed
    assert store.owner_reads == 2
    forged = sign_owner(SIGNING["mallory"], KEY, "mallory", 5)
    at = "2026-01-01T00:00:00Z"
    store.forged = [Change(0, KEY, "owner", r3.id, r3.id, "mallory", "x", at, 5, forged)]
    state = (await store.states([KEY]))[KEY]
    lie = replace(
        state,
        owner="mallory",
        epoch=5,
        owner_from="x",
        owner_sig=forged,
        head_sig=sign_head(SIGNING["mallory"], KEY, r3.id, state.version, 5),
    )
    await store._tamper_head(lie)
    v = await untrusting(store).check(ToolCall("ship", ARGS, plan))
    assert (v.verdict, v.reason) == ("block", "owner_unauthenticated")
    assert "not signed by 'x'" in v.message
    await store.aclose()


async def test_a_failed_feed_read_blocks(audit: str) -> None:
    store = CountingStore()
    await store.setup()
    r1 = await assigned(store)
    await transfer(store, "y", by="x")
    await transfer(store, "z", by="y")
    r2 = await signed_put(store, "z", 2, r1.id)
    plan = await plan_on(store, r2)
    for fault, reason in (
        (StoreUnavailableError("the feed is gone"), "store_unavailable"),
        (RuntimeError("unexpected"), "internal_error"),
    ):
        store.failing = fault
        async with untrusting(store, audit) as gate:
            v = await check_until_recorded(gate, ToolCall("ship", ARGS, plan))
        assert (v.verdict, v.reason) == ("block", reason)
    store.failing = None  # control: the same check with the feed readable allows
    async with untrusting(store, audit) as gate:
        assert (await check_until_recorded(gate, ToolCall("ship", ARGS, plan))).allowed
    await store.aclose()


# ---- random chains, against a reference model

OWNERS = ("a", "b", "c", "d")
Step = tuple[str, str, str]  # (new owner, "from" named in the claim, agent that signed)


def chain_changes(steps: list[Step]) -> list[Change]:
    out = []
    for epoch, (owner, from_, signer) in enumerate(steps, start=1):
        fields = {"key": KEY, "owner": owner, "epoch": epoch, "from": from_}
        sig = DigestSigner(signer).sign("planfence-owner/1", fields)
        out.append(Change(epoch, KEY, "owner", None, None, owner, from_, "t", epoch, sig))
    return out


def state_at(ch: Change) -> KeyState:
    """The key as the store shows it at that change, its head signed by the owner it names."""
    head_sig = DigestSigner(ch.owner).sign("planfence-head/1", head_claim(KEY, None, 0, ch.epoch))
    return KeyState(KEY, ch.owner, None, 0, ch.epoch, head_sig, ch.by, ch.sig)


def genuine_epochs(steps: list[Step], assigners: frozenset[str]) -> set[int]:
    """The reference: the epochs whose owner is proven. A claim is signed by the agent it names
    as giver; a claim an assigner signed proves its epoch on its own (the first owner, a fenced
    takeover, or an operator's repair of a bad link); any other claim proves its epoch when it
    is the proven previous owner's (a transfer)."""
    proven: set[int] = set()
    previous = None
    for epoch, (owner, from_, signer) in enumerate(steps, start=1):
        signed = signer == from_
        if signed and (from_ in assigners or (epoch - 1 in proven and from_ == previous)):
            proven.add(epoch)
        previous = owner
    return proven


def judge(chains: OwnerChains, state: KeyState, changes: list[Change]) -> bool:
    """What the gate does: check, and read the feed after the epoch it knows when it must."""
    why = chains.check(state)
    if why is not None and why.reason is None:
        if chains.learn(state, changes[why.after :]):
            return False
        why = chains.check(state)
    return why is None


@settings(max_examples=300, deadline=None)
@given(
    drawn=st.lists(
        st.tuples(st.sampled_from(OWNERS), st.sampled_from(OWNERS), st.sampled_from(OWNERS)),
        min_size=1,
        max_size=8,
    ),
    cut=st.integers(0, 8),
    looks=st.lists(st.integers(0, 7), max_size=6),
)
def test_an_owner_is_accepted_exactly_when_its_chain_is_genuine(
    drawn: list[Step], cut: int, looks: list[int]
) -> None:
    """The gate looks at the key at random epochs (remembering what it proved), with the feed at
    hand when it needs it: it accepts an epoch exactly when the reference proves it and it never
    verified a later one. The first `cut` claims are made genuine."""
    steps: list[Step] = []
    for i, (owner, from_, signer) in enumerate(drawn):
        giver = "a" if i == 0 else steps[-1][0]
        steps.append((owner, giver, giver) if i < cut else (owner, from_, signer))
    assigners = frozenset({"a"})
    changes = chain_changes(steps)
    good = genuine_epochs(steps, assigners)
    chains = OwnerChains(DigestSigner("verifier"), assigners)
    highest = 0
    control_wrong = forged_seen = False
    for look in [*looks, len(steps) - 1]:
        state = state_at(changes[look % len(changes)])
        expected = highest <= state.epoch and state.epoch in good
        assert judge(chains, state, changes) == expected, (steps, state.epoch, good, highest)
        if expected:
            highest = state.epoch
        forged_seen |= state.epoch not in good
        # The store's word for the owner, asked afresh (no memory of a later epoch to refuse a
        # rollback with).
        control = SignedHeads(DigestSigner("verifier"))
        control_wrong |= control.answer(state).error is None and state.epoch not in good
    # Control: taking the store's word accepts a forged epoch's owner, so the property above
    # can fail; it is wrong exactly when the gate looked at a forged epoch.
    assert control_wrong == forged_seen
