"""Owner epochs and signed heads at the gate, on every backend: an ex-owner's word never allows,
a gate that does not trust the store checks each head's signature, and an older signed head
replayed by the store (a rollback) is refused."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planfence.adapters.owner_service import PublicKeyring, SigningKey
from planfence.plugins.gate import Gate, Policy, ToolCall, create_plan
from planfence.plugins.gate.decision import HeadAnswer
from planfence.plugins.gate.store_heads import SignedHeads
from planfence.shared_memory import AsyncStore, KeyState, Record
from planfence.shared_memory.conformance.checks_epochs import DigestSigner
from planfence.shared_memory.signing import sign_head

KEY = "order/7"
POLICY = Policy.from_toml('[tools.ship]\ndepends_on = ["order/{id}"]\n')
ARGS = {"id": "7"}
AGENTS = ("sales", "billing", "mallory")
SIGNING = {a: SigningKey.generate(a) for a in AGENTS}
RING = PublicKeyring({"keys": [k.public_jwk() for k in SIGNING.values()]})


def untrusting(store: AsyncStore) -> Gate:
    """A gate that does not trust `store`: heads and owners must be signed (sales assigns)."""
    return Gate(store, POLICY, verify_heads=RING, owner_assigners={"sales"})


async def tamper_head(store: AsyncStore, state: KeyState) -> None:
    await store._tamper_head(state)  # type: ignore[attr-defined]


async def plan_on(store: AsyncStore, record: Record) -> str:
    return (await create_plan(store, author="planner", parents=[record.id])).id


async def test_untrusted_store_heads_must_be_signed_by_the_current_owner(
    astore: AsyncStore,
) -> None:
    astore.signer = SIGNING["sales"]
    await astore.own(KEY, "sales")
    astore.signer = None
    unsigned = await astore.put(KEY, 0, author="sales")  # an unsigned head
    gate = untrusting(astore)
    v = await gate.check(ToolCall("ship", ARGS, await plan_on(astore, unsigned)))
    assert (v.verdict, v.reason) == ("block", "owner_unauthenticated")
    assert "no signature" in v.message
    assert (
        await Gate(astore, POLICY).check(ToolCall("ship", ARGS, await plan_on(astore, unsigned)))
    ).allowed

    astore.signer = SIGNING["sales"]
    r1 = await astore.put(KEY, 1, author="sales")
    v = await gate.check(ToolCall("ship", ARGS, await plan_on(astore, r1)))
    assert (v.verdict, v.reason, v.epochs) == ("allow", "current", {KEY: 1})

    # The store names another signer, or a signature made for another sequence: refused.
    state = (await astore.states([KEY]))[KEY]
    forged = sign_head(SIGNING["mallory"], KEY, r1.id, state.version, state.epoch)
    await tamper_head(astore, replace(state, owner="sales", head_sig=forged))
    v = await untrusting(astore).check(ToolCall("ship", ARGS, await plan_on(astore, r1)))
    assert (v.verdict, v.reason) == ("block", "owner_unauthenticated")
    assert "not signed by its owner 'sales'" in v.message
    bumped = replace(state, version=state.version + 1)  # the signature is for the old sequence
    await tamper_head(astore, bumped)
    v = await untrusting(astore).check(ToolCall("ship", ARGS, await plan_on(astore, r1)))
    assert (v.verdict, v.reason) == ("block", "owner_unauthenticated")
    await tamper_head(astore, state)
    astore.signer = None


async def test_an_older_signed_head_replayed_by_the_store_is_a_rollback(astore: AsyncStore) -> None:
    astore.signer = SIGNING["sales"]
    await astore.own(KEY, "sales")
    r1 = await astore.put(KEY, 1, author="sales")
    old = (await astore.states([KEY]))[KEY]
    old_plan = await plan_on(astore, r1)
    gate = untrusting(astore)
    assert (await gate.check(ToolCall("ship", ARGS, old_plan))).allowed
    r2 = await astore.put(KEY, 2, author="sales", parents=[r1.id])
    v = await gate.check(ToolCall("ship", ARGS, await plan_on(astore, r2)))
    assert v.allowed and v.heads == {KEY: r2.id}
    # The store (or whoever writes its tables) puts the older, validly signed head back.
    await tamper_head(astore, old)
    v = await gate.check(ToolCall("ship", ARGS, old_plan))
    assert (v.verdict, v.reason) == ("block", "head_rollback")
    assert "sequence 1" in v.message and "already saw sequence 2" in v.message
    # Control: a gate that never saw sequence 2 has nothing to compare with; the old head's
    # signature is valid, so it allows. What blocks above is the remembered sequence.
    assert (await untrusting(astore).check(ToolCall("ship", ARGS, old_plan))).allowed
    astore.signer = None


async def test_after_a_transfer_the_new_owner_signs_the_head(astore: AsyncStore) -> None:
    astore.signer = SIGNING["sales"]
    await astore.own(KEY, "sales")
    r1 = await astore.put(KEY, 1, author="sales")
    plan = await plan_on(astore, r1)
    gate = untrusting(astore)
    assert (await gate.check(ToolCall("ship", ARGS, plan))).allowed
    await astore.transfer(KEY, "billing", by="sales")
    v = await gate.check(ToolCall("ship", ARGS, plan))  # sales's signature was for epoch 1
    assert (v.verdict, v.reason) == ("block", "owner_unauthenticated")
    # The old owner signing the head again for the new epoch does not help: wrong signer.
    state = (await astore.states([KEY]))[KEY]
    stale_word = sign_head(SIGNING["sales"], KEY, r1.id, state.version, state.epoch)
    await tamper_head(astore, replace(state, head_sig=stale_word))
    assert (await gate.check(ToolCall("ship", ARGS, plan))).reason == "owner_unauthenticated"
    await tamper_head(astore, state)
    # The new owner endorses the same record (a head move onto itself), signed.
    astore.signer = SIGNING["billing"]
    await astore.advance(KEY, r1.id, by="billing", expected_head=r1.id)
    v = await gate.check(ToolCall("ship", ARGS, plan))
    assert (v.verdict, v.epochs) == ("allow", {KEY: 2})
    astore.signer = None


class ScriptedOwners:
    """A head source answering from a script: owner -> key -> answer (what owner services would
    say), recording who was asked."""

    def __init__(self, script: Mapping[str, Mapping[str, HeadAnswer]]) -> None:
        self.script = script
        self.asked: list[str] = []

    async def heads(self, owners: Mapping[str, tuple[str, ...]]) -> Mapping[str, HeadAnswer]:
        out: dict[str, HeadAnswer] = {}
        for owner, keys in owners.items():
            self.asked.append(owner)
            out.update({k: self.script[owner][k] for k in keys if k in self.script[owner]})
        return out

    async def aclose(self) -> None:
        return None


async def test_an_answer_from_an_earlier_epoch_is_refused(astore: AsyncStore) -> None:
    await astore.own(KEY, "sales")
    r1 = await astore.put(KEY, 1, author="sales")
    await astore.transfer(KEY, "billing", by="sales")
    await astore.transfer(KEY, "sales", by="billing")  # sales again, in epoch 3
    plan = await plan_on(astore, r1)
    for epoch, reason in ((1, "owner_epoch_stale"), (3, "current"), (None, "current")):
        owners = ScriptedOwners({"sales": {KEY: HeadAnswer(r1.id, epoch=epoch)}})
        v = await Gate(astore, POLICY, heads=owners).check(ToolCall("ship", ARGS, plan))
        assert v.reason == reason, epoch
    assert (
        "epoch 1"
        in (
            await Gate(
                astore, POLICY, heads=ScriptedOwners({"sales": {KEY: HeadAnswer(r1.id, epoch=1)}})
            ).check(ToolCall("ship", ARGS, plan))
        ).message
    )


async def test_a_moved_key_is_learned_from_the_store_or_blocks(astore: AsyncStore) -> None:
    await astore.own(KEY, "sales")
    r1 = await astore.put(KEY, 1, author="sales")
    plan = await plan_on(astore, r1)
    moved = HeadAnswer(error="owner_epoch_stale", detail="sales says it does not own order/7")

    class TransferWhileAsked(ScriptedOwners):
        """The key changes hands between the gate's snapshot and its question to the owner."""

        async def heads(self, owners: Mapping[str, tuple[str, ...]]) -> Mapping[str, HeadAnswer]:
            if not self.asked:
                await astore.transfer(KEY, "billing", by="sales")
            return await super().heads(owners)

    owners = TransferWhileAsked(
        {"sales": {KEY: moved}, "billing": {KEY: HeadAnswer(r1.id, epoch=2)}}
    )
    v = await Gate(astore, POLICY, heads=owners).check(ToolCall("ship", ARGS, plan))
    assert (v.verdict, v.epochs, owners.asked) == ("allow", {KEY: 2}, ["sales", "billing"])
    # The ex-owner keeps claiming the key for its old epoch: blocked, whoever it is asked about.
    stale = ScriptedOwners({"billing": {KEY: HeadAnswer(r1.id, epoch=1)}})
    v = await Gate(astore, POLICY, heads=stale).check(ToolCall("ship", ARGS, plan))
    assert (v.verdict, v.reason) == ("block", "owner_epoch_stale")
    # An owner says it moved on, and the store still names it: no second answer, a block.
    lying = ScriptedOwners({"billing": {KEY: moved}})
    v = await Gate(astore, POLICY, heads=lying).check(ToolCall("ship", ARGS, plan))
    assert (v.verdict, v.reason, lying.asked) == ("block", "owner_epoch_stale", ["billing"])


# ---- the rollback memory as an invariant ----------------------------------------------------

HISTORY_HEADS = [Record.create(KEY, n, author="o", created_at="t").id for n in range(6)]


def history(moves: list[bool]) -> list[KeyState]:
    """A key's signed states over time: each move is a head advance (False) or a transfer
    (True) between two owners; every state is signed by its owner, as an honest store holds it."""
    signers = {a: DigestSigner(a) for a in ("a", "b")}
    state = KeyState(KEY, "a", HISTORY_HEADS[0], 1, 1)
    out = []
    for n, transfer in enumerate(moves):
        if transfer:
            owner = "b" if state.owner == "a" else "a"
            state = KeyState(KEY, owner, state.head, state.version, state.epoch + 1)
        else:
            head = HISTORY_HEADS[(n + 1) % len(HISTORY_HEADS)]
            state = KeyState(KEY, state.owner, head, state.version + 1, state.epoch)
        sig = sign_head(signers[state.owner], KEY, state.head, state.version, state.epoch)
        out.append(replace(state, head_sig=sig))
    return out


@settings(max_examples=150, deadline=None)
@given(
    moves=st.lists(st.booleans(), min_size=1, max_size=12),
    reads=st.lists(st.integers(min_value=0, max_value=11), min_size=1, max_size=30),
)
def test_signed_heads_never_go_back(moves: list[bool], reads: list[int]) -> None:
    """Whatever order a store replays a key's signed states in, the gate accepts exactly those
    not older than the newest it accepted (reference model: the running maximum)."""
    states = history(moves)
    checker = SignedHeads(DigestSigner("verifier"))
    newest = -1
    for i in reads:
        index = i % len(states)
        answer = checker.answer(states[index])
        # Every move raises the sequence or the epoch, so "older" is the position in time;
        # re-reading the newest is fine.
        older = index < newest
        assert (answer.error == "head_rollback") == older, (index, newest)
        if not older:
            assert answer.error is None and answer.head == states[index].head
            newest = max(newest, index)


def test_control_without_memory_the_replay_passes() -> None:
    """The invariant can fail: a checker that forgets (a fresh one per read) accepts an older
    signed head after a newer one."""
    states = history([False, False])
    assert SignedHeads(DigestSigner("v")).answer(states[1]).error is None
    assert SignedHeads(DigestSigner("v")).answer(states[0]).error is None
    remembering = SignedHeads(DigestSigner("v"))
    remembering.answer(states[1])
    assert remembering.answer(states[0]).error == "head_rollback"


@pytest.mark.parametrize("bad", ["", "x" * 64])
def test_a_head_without_a_valid_signature_is_not_an_answer(bad: str) -> None:
    [state] = history([False])
    answer = SignedHeads(DigestSigner("v")).answer(replace(state, head_sig=bad or None))
    assert (answer.error, answer.head) == ("owner_unauthenticated", None)


def test_a_head_verified_while_a_later_one_was_seen_is_a_rollback() -> None:
    # Two checks on one gate verify heads of the same key at once: the one verifying sequence 5
    # learns, by the time its signature checks out, that sequence 6 was seen meanwhile.
    heads: SignedHeads

    def state(seq: int) -> KeyState:
        return KeyState("k", "owner", f"{seq:064x}", seq, 1, "sig")

    class Interleaving:
        def verify(self, agent: str, typ: str, fields: Mapping[str, object], sig: str) -> bool:
            if fields["seq"] == 5:
                assert heads.answer(state(6)).error is None  # the other check, meanwhile
            return True

    heads = SignedHeads(Interleaving())
    assert heads.answer(state(4)).error is None
    late = heads.answer(state(5))
    assert late.error == "head_rollback" and late.head is None
    assert heads.highest("k") == state(6)
