"""Fencing tokens: every allow carries one, `planfence.fence.verify` refuses a head that moved or
a bad signature, `fenced_write` is conditional on the token's heads, and a lease that cannot be
taken never lets the call run (fault injection)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest

from planfence import fence
from planfence.adapters.owner_service import SigningKey
from planfence.adapters.owner_service.keys import PublicKeyring
from planfence.plugins.gate import (
    CallNext,
    GateMiddleware,
    Judgement,
    Middleware,
    Policy,
    PolicyError,
    ToolCall,
    create_plan,
    find_decisions,
)
from planfence.shared_memory import (
    AsyncStore,
    LeaseHeldError,
    Record,
    StoreUnavailableError,
    WriteBatch,
)
from planfence.shared_memory.batches import AdvanceHead

ORDER = "order/7"
POLICY = '[tools.ship]\ndepends_on = ["order/{id}"]\n'
LEASED = POLICY + "lease_ms = 2000\n"


def toy_store_module() -> ModuleType:
    """tests/store/toy_store.py: a backend with the two primitives only (and no leases)."""
    path = Path(__file__).resolve().parents[1] / "store" / "toy_store.py"
    spec = importlib.util.spec_from_file_location("fence_toy_store", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def planned(store: AsyncStore) -> str:
    await store.own(ORDER, "sales")
    order = await store.put(ORDER, {"status": "confirmed"}, author="sales")
    return (await create_plan(store, author="planner", parents=[order.id])).id


async def test_every_allow_carries_a_token_the_tool_can_read(astore: AsyncStore) -> None:
    plan = await planned(astore)
    gate = GateMiddleware(astore, POLICY, agent="executor")
    assert fence.current() is None
    async with gate.guard(ToolCall("ship", {"id": "7"}, plan)) as judged:
        token = fence.current()
        assert judged.allowed and token is not None and token is judged.fence
        assert token.heads[ORDER].head == await astore.head(ORDER)
        assert (token.plan, token.tool, token.decision) == (
            plan,
            "ship",
            judged.verdict.decision_id,
        )
        assert not token.signed and token.gate is None  # no signing key: says so
        assert await fence.verify(token, astore, args={"id": "7"}) == token
    assert fence.current() is None


async def test_a_token_names_the_owner_epoch_and_a_transfer_voids_it(astore: AsyncStore) -> None:
    plan = await planned(astore)
    judged = await GateMiddleware(astore, POLICY).judge(ToolCall("ship", {"id": "7"}, plan))
    token = judged.fence
    assert token is not None and token.heads[ORDER].epoch == await astore.epoch(ORDER) == 1
    assert await fence.verify(token, astore) == token
    # The head does not move, but the key changes hands: the effect would rest on the word of an
    # owner that no longer owns the key.
    await astore.transfer(ORDER, "billing", by="sales")
    assert await astore.epoch(ORDER) == 2
    with pytest.raises(fence.StaleFenceError):
        await fence.verify(token, astore)


async def test_verify_refuses_a_head_that_moved(astore: AsyncStore) -> None:
    plan = await planned(astore)
    judged = await GateMiddleware(astore, POLICY).judge(ToolCall("ship", {"id": "7"}, plan))
    token = judged.fence
    assert token is not None
    before = await astore.head(ORDER)
    after = await astore.put(ORDER, {"status": "cancelled"}, author="sales")
    with pytest.raises(fence.StaleFenceError) as err:
        await fence.verify(token.to_wire(), astore)
    assert err.value.moved == {ORDER: (before, after.id)}


async def test_fenced_write_commits_only_on_the_tokens_heads(astore: AsyncStore) -> None:
    plan = await planned(astore)
    await astore.own("effects/executor", "executor")
    judged = await GateMiddleware(astore, POLICY).judge(ToolCall("ship", {"id": "7"}, plan))
    assert judged.fence is not None

    def effect(n: int) -> WriteBatch:
        rec = Record.create("effects/executor", n, author="executor", parents=[plan])
        return WriteBatch(records=(rec,), ops=(AdvanceHead(rec.key, rec.id, None, "executor"),))

    await fence.fenced_write(judged.fence, astore, effect(1))
    assert await astore.head("effects/executor") is not None
    await astore.put(ORDER, {"status": "cancelled"}, author="sales")
    seq = await astore.last_seq()
    with pytest.raises(fence.StaleFenceError):
        await fence.fenced_write(judged.fence, astore, effect(2))
    assert await astore.changes(seq) == []  # nothing was written


async def test_a_signed_token_verifies_only_with_the_gates_key(astore: AsyncStore) -> None:
    plan = await planned(astore)
    key = SigningKey.generate("gate", role="gate")
    ring = PublicKeyring({"keys": [key.public_jwk()]})
    other = PublicKeyring({"keys": [SigningKey.generate("gate", role="gate").public_jwk()]})
    gate = GateMiddleware(astore, POLICY, signing_key=key)
    token = (await gate.judge(ToolCall("ship", {"id": "7"}, plan))).fence
    assert token is not None and token.signed and token.gate == "gate"
    await fence.verify(token, astore, keyring=ring)
    with pytest.raises(fence.FenceSignatureError):
        await fence.verify(token, astore, keyring=other)
    forged = token.to_wire()
    forged["heads"] = {ORDER: {"head": "0" * 64, "epoch": 0}}
    with pytest.raises(fence.FenceSignatureError):
        await fence.verify(forged, astore, keyring=ring)
    unsigned = (
        await GateMiddleware(astore, POLICY).judge(ToolCall("ship", {"id": "7"}, plan))
    ).fence
    assert unsigned is not None
    with pytest.raises(fence.FenceSignatureError):
        await fence.verify(unsigned, astore, keyring=ring)
    with pytest.raises(fence.MalformedFenceError):
        await fence.verify(token, astore, keyring=ring, args={"id": "8"})
    with pytest.raises(fence.MalformedFenceError):
        await fence.verify("{not json", astore)


async def test_the_lease_holds_the_owner_until_the_tool_returns(astore: AsyncStore) -> None:
    plan = await planned(astore)
    gate = GateMiddleware(astore, LEASED, agent="executor")
    async with gate.guard(ToolCall("ship", {"id": "7"}, plan)) as judged:
        assert judged.allowed and judged.fence is not None and judged.fence.lease is not None
        with pytest.raises(LeaseHeldError):
            await astore.put(ORDER, {"status": "cancelled"}, author="sales", wait=False)
    await astore.put(ORDER, {"status": "cancelled"}, author="sales", wait=False)


class MovesTheHead(Middleware):
    """Fault injection: the owner advances the head right after the gate allowed."""

    def __init__(self, store: AsyncStore) -> None:
        self.store = store
        self.moved = 0

    async def on_call_tool(self, call: ToolCall, call_next: CallNext) -> Judgement:
        judged = await call_next(call)
        self.moved += 1
        await self.store.put(ORDER, {"status": f"moved {self.moved}"}, author="sales")
        return judged


async def test_a_head_moved_before_the_lease_is_never_allowed(
    astore: AsyncStore, audit: str
) -> None:
    plan = await planned(astore)
    mover = MovesTheHead(astore)
    gate = GateMiddleware(astore, LEASED, agent="executor", middleware=[mover], audit=audit)
    judged = await gate.judge(ToolCall("ship", {"id": "7"}, plan))
    await gate.aclose()
    assert not judged.allowed
    assert judged.verdict.verdict == "replan"  # judged again: the plan is stale now
    assert mover.moved == 2


class LeaseFails:
    """Fault injection: a store whose lease writes fail."""

    def __init__(self, store: AsyncStore) -> None:
        self.inner = store

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailableError("injected: the lease write failed")


async def test_a_lease_that_cannot_be_taken_blocks_the_call(
    astore: AsyncStore, monkeypatch: pytest.MonkeyPatch, audit: str
) -> None:
    plan = await planned(astore)
    monkeypatch.setattr(astore, "lease", LeaseFails(astore))
    gate = GateMiddleware(astore, LEASED, agent="executor", audit=audit)
    judged = await gate.judge(ToolCall("ship", {"id": "7"}, plan))
    await gate.aclose()
    assert not judged.allowed
    assert (judged.verdict.verdict, judged.verdict.reason) == ("block", "store_unavailable")
    [entry] = await find_decisions(astore, source=None, reasons=["store_unavailable"])
    assert entry.verdict == "block"


async def test_a_store_without_leases_blocks_a_leased_tool() -> None:
    store = toy_store_module().ToyStore()
    await store.setup()
    plan = await planned(store)
    judged = await GateMiddleware(store, LEASED).judge(ToolCall("ship", {"id": "7"}, plan))
    assert (judged.verdict.verdict, judged.verdict.reason) == ("block", "lease_unavailable")
    # Without a lease declared, the same store allows.
    assert (await GateMiddleware(store, POLICY).judge(ToolCall("ship", {"id": "7"}, plan))).allowed


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("lease_ms = 0", "between 1 and"),
        ("lease_ms = 2.5", "whole number"),
        ('lease_ms = "2s"', "whole number"),
        ("lease_ms = true", "whole number"),
    ],
)
def test_policy_lease_ms_is_validated(line: str, says: str) -> None:
    with pytest.raises(PolicyError, match=says):
        Policy.from_toml(f"{POLICY}{line}\n")
    with pytest.raises(PolicyError, match="ungated"):
        Policy.from_toml("[tools.weather]\nungated = true\nlease_ms = 100\n")
    assert Policy.from_toml(LEASED).tools["ship"].lease_ms == 2000
    assert Policy.from_dict(Policy.from_toml(LEASED).to_dict()).tools["ship"].lease_ms == 2000


async def test_a_call_refused_after_its_lease_was_taken_releases_it(astore: AsyncStore) -> None:
    if not astore.supports_leases:
        pytest.skip("this backend holds no leases")
    plan = await planned(astore)

    class BrokenSigner:
        agent = "gate"

        def sign(self, typ: str, fields: Any) -> str:
            raise OSError("injected: the key file went away")

    gate = GateMiddleware(
        astore, POLICY.replace("\n", "\nlease_ms = 600000\n", 1), signing_key=BrokenSigner()
    )  # type: ignore[arg-type]
    judged = await gate.judge(ToolCall("ship", {"id": "7"}, plan))
    assert not judged.allowed and judged.verdict.reason == "internal_error"
    # The owner is not held back for ten minutes by a lease nobody holds.
    await astore.put(ORDER, {"status": "cancelled"}, author="sales", wait=False)


async def test_a_fenced_write_refuses_a_transfer_and_passes_the_calls_own_lease(
    astore: AsyncStore,
) -> None:
    if not astore.supports_leases:
        pytest.skip("this backend holds no leases")
    plan = await planned(astore)
    gate = GateMiddleware(astore, POLICY + "lease_ms = 600000\n")
    async with gate.guard(ToolCall("ship", {"id": "7"}, plan)) as judged:
        token = judged.fence
        assert judged.allowed and token is not None and token.lease is not None
        # The tool's own effect on a key of its scope is not held back by its own lease ...
        head = await astore.head(ORDER)
        assert head is not None
        mark = Record.create(ORDER, {"status": "shipped"}, author="sales", parents=[head])
        own = WriteBatch(records=(mark,), ops=(AdvanceHead(ORDER, mark.id, head, "sales"),))
        with anyio.fail_after(30):  # held back, it would wait out the ten-minute lease
            await fence.fenced_write(token, astore, own, args={"id": "7"})
    assert await astore.head(ORDER) == mark.id

    plan = await planned_again(astore)
    judged = await GateMiddleware(astore, POLICY).judge(ToolCall("ship", {"id": "7"}, plan))
    token = judged.fence
    assert token is not None
    # ... and a transfer since the check voids the token for a conditional write too.
    await astore.transfer(ORDER, "billing", by="sales")
    seq = await astore.last_seq()
    with pytest.raises(fence.StaleFenceError):
        await fence.fenced_write(token, astore, WriteBatch(entries=()))
    assert await astore.changes(seq) == []


async def planned_again(store: AsyncStore) -> str:
    head = await store.head(ORDER)
    assert head is not None
    return (await create_plan(store, author="planner", parents=[head])).id


async def test_a_token_verifies_only_for_the_tool_it_was_issued_for(astore: AsyncStore) -> None:
    plan = await planned(astore)
    judged = await GateMiddleware(astore, POLICY).judge(ToolCall("ship", {"id": "7"}, plan))
    token = judged.fence
    assert token is not None
    assert await fence.verify(token, astore, tool="ship", args={"id": "7"}) == token
    with pytest.raises(fence.MalformedFenceError, match="issued for tool 'ship'"):
        await fence.verify(token, astore, tool="refund", args={"id": "7"})
