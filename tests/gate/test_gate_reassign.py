"""A fenced takeover as an untrusting gate sees it: a reassignment signed by one of the gate's
`owner_assigners` continues the key's owner chain (for a gate that remembers the old epoch and
for a fresh one reading the feed); one signed by anyone else, or unsigned, proves nothing; the
old owner's answers, signed heads and fencing tokens stop counting."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import httpx
import pytest

from planfence import fence
from planfence.adapters.owner_service import HttpOwnerHeads, PublicKeyring, SigningKey
from planfence.adapters.owner_service.server import create_app
from planfence.plugins.gate import Gate, GateMiddleware, Policy, ToolCall, create_plan
from planfence.plugins.gate.decision import HeadAnswer
from planfence.shared_memory import AsyncStore, Record, WriteBatch
from planfence.shared_memory.batches import ReassignOwner

KEY = "order/7"
POLICY_TEXT = '[tools.ship]\ndepends_on = ["order/{id}"]\n'
POLICY = Policy.from_toml(POLICY_TEXT)
ARGS = {"id": "7"}
AGENTS = ("admin", "old", "new", "mallory", "executor")
SIGNING = {a: SigningKey.generate(a) for a in AGENTS}
RING = PublicKeyring({"keys": [k.public_jwk() for k in SIGNING.values()]})


def untrusting(store: AsyncStore) -> Gate:
    return Gate(store, POLICY, verify_heads=RING, owner_assigners={"admin"})


async def put(store: AsyncStore, owner: str, value: object, *parents: str) -> Record:
    store.signer = SIGNING[owner]
    try:
        return await store.put(KEY, value, author=owner, parents=list(parents))
    finally:
        store.signer = None


async def reassign(store: AsyncStore, to: str, by: str) -> None:
    await store.write(WriteBatch(ops=(ReassignOwner(KEY, to, by),), signer=SIGNING[by]))


async def setup_old_owner(store: AsyncStore) -> Record:
    store.signer = SIGNING["admin"]
    try:
        await store.own(KEY, "old", by="admin")
    finally:
        store.signer = None
    return await put(store, "old", {"n": 1})


async def plan_on(store: AsyncStore, record: Record) -> str:
    return (await create_plan(store, author="planner", parents=[record.id])).id


async def test_an_assigners_reassignment_is_proven_and_fences_the_old_owner(
    astore: AsyncStore,
) -> None:
    r1 = await setup_old_owner(astore)
    remembering = untrusting(astore)
    old_plan = await plan_on(astore, r1)
    assert (await remembering.check(ToolCall("ship", ARGS, old_plan))).allowed  # epoch 1 remembered
    gated = GateMiddleware(astore, POLICY_TEXT, signing_key=SigningKey.generate("g", role="gate"))
    old_token = (await gated.judge(ToolCall("ship", ARGS, old_plan))).fence
    assert old_token is not None
    await reassign(astore, "new", by="admin")
    # Right after the takeover the head is unsigned (it was the old owner's): blocked.
    v = await remembering.check(ToolCall("ship", ARGS, old_plan))
    assert (v.verdict, v.reason) == ("block", "owner_unauthenticated")
    r2 = await put(astore, "new", {"n": 2}, r1.id)
    plan = await plan_on(astore, r2)
    for gate in (remembering, untrusting(astore)):  # one from the remembered epoch, one fresh
        v = await gate.check(ToolCall("ship", ARGS, plan))
        assert (v.verdict, v.epochs) == ("allow", {KEY: 2}), v.message
    # The old owner is fenced: its token no longer verifies, its plan is stale.
    with pytest.raises(fence.StaleFenceError):
        await fence.verify(old_token, astore)
    assert (await untrusting(astore).check(ToolCall("ship", ARGS, old_plan))).verdict != "allow"


async def test_a_reassignment_not_signed_by_a_trusted_assigner_proves_nothing(
    astore: AsyncStore,
) -> None:
    r1 = await setup_old_owner(astore)
    remembering = untrusting(astore)
    assert (await remembering.check(ToolCall("ship", ARGS, await plan_on(astore, r1)))).allowed
    await reassign(astore, "mallory", by="mallory")  # signed, by an agent no gate trusts
    r2 = await put(astore, "mallory", {"n": 2}, r1.id)
    plan = await plan_on(astore, r2)
    for gate in (remembering, untrusting(astore)):
        v = await gate.check(ToolCall("ship", ARGS, plan))
        assert (v.verdict, v.reason) == ("block", "owner_unauthenticated")
        assert "nor an agent this gate trusts to assign owners" in v.message
    # Named as the assigner without its signature: refused too.
    await reassign(astore, "new", by="mallory")
    await astore.write(WriteBatch(ops=(ReassignOwner(KEY, "new", "admin"),)))  # unsigned
    r3 = await put(astore, "new", {"n": 3}, r2.id)
    v = await untrusting(astore).check(ToolCall("ship", ARGS, await plan_on(astore, r3)))
    assert (v.verdict, v.reason) == ("block", "owner_unauthenticated")


class Answers:
    """Owner answers from a fixed (stale) view: what a frozen old owner says when it wakes."""

    def __init__(self, said: Mapping[str, HeadAnswer]) -> None:
        self.said = said

    async def heads(self, owners: Mapping[str, tuple[str, ...]]) -> Mapping[str, HeadAnswer]:
        return {k: self.said[k] for keys in owners.values() for k in keys}

    async def aclose(self) -> None:
        return None


async def test_an_old_epoch_answer_blocks_after_a_reassignment(astore: AsyncStore) -> None:
    r1 = await setup_old_owner(astore)
    plan = await plan_on(astore, r1)
    await reassign(astore, "new", by="admin")
    stale = Gate(astore, POLICY, heads=Answers({KEY: HeadAnswer(r1.id, epoch=1)}), audit=False)
    v = await stale.check(ToolCall("ship", ARGS, plan))
    assert (v.verdict, v.reason) == ("block", "owner_epoch_stale")


async def test_an_assigners_signed_reassignment_repairs_a_bad_one(astore: AsyncStore) -> None:
    """The operator's way back from a bad reassignment (unsigned, or by an agent no gate trusts):
    an assigner reassigns the key again, signed; its claim supersedes the bad link, for a gate
    that remembers the old epoch and for a fresh one reading the feed."""
    r1 = await setup_old_owner(astore)
    remembering = untrusting(astore)
    assert (await remembering.check(ToolCall("ship", ARGS, await plan_on(astore, r1)))).allowed
    await reassign(astore, "mallory", by="mallory")  # epoch 2: not an assigner's
    r2 = await put(astore, "mallory", {"n": 2}, r1.id)
    await astore.write(WriteBatch(ops=(ReassignOwner(KEY, "old", "admin"),)))  # epoch 3: unsigned
    r3 = await put(astore, "old", {"n": 3}, r2.id)
    bad = await plan_on(astore, r3)
    for gate in (remembering, untrusting(astore)):
        v = await gate.check(ToolCall("ship", ARGS, bad))
        assert (v.verdict, v.reason) == ("block", "owner_unauthenticated"), v.message
    # The repair: the assigner's signed reassignment (epoch 4), then a head its owner signs.
    await reassign(astore, "new", by="admin")
    r4 = await put(astore, "new", {"n": 4}, r3.id)
    plan = await plan_on(astore, r4)
    for gate in (remembering, untrusting(astore)):
        v = await gate.check(ToolCall("ship", ARGS, plan))
        assert (v.verdict, v.reason, v.epochs) == ("allow", "current", {KEY: 4}), v.message
    # What the bad epochs said stays unproven: a plan on mallory's head is still refused.
    v = await untrusting(astore).check(ToolCall("ship", ARGS, await plan_on(astore, r2)))
    assert v.verdict != "allow"


class LateDelivery(httpx.AsyncBaseTransport):
    """Delivers the first answer of `agent`'s owner service only after `meanwhile` ran: an answer
    computed before a takeover and delivered after it (a slow or frozen ex-owner)."""

    def __init__(
        self, inner: httpx.AsyncBaseTransport, meanwhile: Callable[[], Awaitable[None]]
    ) -> None:
        self.inner = inner
        self.meanwhile: Callable[[], Awaitable[None]] | None = meanwhile

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        body = await response.aread()  # computed now
        if self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            await meanwhile()
        stream = httpx.ByteStream(body)
        return httpx.Response(response.status_code, headers=response.headers, stream=stream)


@pytest.mark.parametrize("untrusted", [False, True], ids=["trusting", "verify_heads"])
async def test_a_late_answer_of_a_fenced_ex_owner_blocks_and_the_next_call_starts_clean(
    astore: AsyncStore, untrusted: bool
) -> None:
    r1 = await setup_old_owner(astore)
    plan = await plan_on(astore, r1)
    moved: list[Record] = []

    async def takeover() -> None:
        await reassign(astore, "new", by="admin")
        moved.append(await put(astore, "new", {"n": 2}, r1.id))

    mounts = {
        f"http://{a}": httpx.ASGITransport(app=create_app(a, astore, RING, signing_key=SIGNING[a]))
        for a in ("old", "new")
    }
    mounts["http://old"] = LateDelivery(mounts["http://old"], takeover)
    async with httpx.AsyncClient(mounts=mounts) as client:
        heads = HttpOwnerHeads(
            {a: f"http://{a}" for a in ("old", "new")},
            RING,
            agent="executor",
            signing_key=SIGNING["executor"],
            client=client,
            store=astore,
        )
        trust = {"verify_heads": RING, "owner_assigners": {"admin"}} if untrusted else {}
        async with Gate(astore, POLICY, heads=heads, **trust) as gate:  # type: ignore[arg-type]
            v = await gate.check(ToolCall("ship", ARGS, plan))
            assert moved, "the takeover ran while the old owner's answer was on its way"
            assert (v.verdict, v.reason) == ("block", "owner_epoch_stale"), v.message
            assert "epoch 1" in v.message and "epoch 2" in v.message
            # The block spent no replan: the next call asks the new owner and gets its replan.
            v = await gate.check(ToolCall("ship", ARGS, plan))
            assert (v.verdict, v.reason) == ("replan", "stale_dependencies"), v.message
            assert v.heads == {KEY: moved[0].id}
            v = await gate.check(ToolCall("ship", ARGS, await plan_on(astore, moved[0])))
            assert (v.verdict, v.epochs) == ("allow", {KEY: 2}), v.message
