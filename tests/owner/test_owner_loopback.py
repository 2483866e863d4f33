"""Owner services over real HTTP on loopback: `planfence serve-owner` processes for `planner` and
`reviser` over one SQLite file, a fault-injecting reviser in another process, and the gate in this
one reading plans from the same file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from fault_owner import EXPECTED_BLOCK
from owner_helpers import BUDGET, POLICY, REQ, Owners, free_port

from planfence.adapters.owner_service import HttpOwnerHeads, Keyring
from planfence.adapters.owner_service.keyring import KEYRING_ENV
from planfence.demos.bench.harness.wire import CountedOwnerHeads
from planfence.plugins.gate import (
    Gate,
    GateMiddleware,
    Replanned,
    ToolCall,
    Verdict,
    create_plan,
    find_decisions,
    refreshed_parents,
)
from planfence.shared_memory import AsyncStore, open_async_store


@pytest.fixture
async def store(owners: Owners) -> AsyncIterator[AsyncStore]:
    s = await open_async_store(owners.team.url)
    try:
        yield s
    finally:
        await s.aclose()


def gate_for(
    store: AsyncStore,
    keyring: Keyring,
    directory: Mapping[str, str],
    timeout: float = 2.0,
    audit: str = "deferred",
) -> Gate:
    heads = CountedOwnerHeads(directory, keyring, agent="executor", timeout=timeout)
    return Gate(store, POLICY, heads=heads, agent="executor", audit=audit)  # type: ignore[arg-type]


async def test_gate_allows_a_current_plan(
    owners: Owners, store: AsyncStore, keyring: Keyring
) -> None:
    gate = gate_for(store, keyring, owners.directory)
    try:
        verdict = await gate.check(ToolCall("book_trip", {"trip": "42"}, owners.team.plan))
    finally:
        await gate.aclose()
    assert verdict.verdict == "allow", verdict.message
    assert verdict.heads == {REQ: owners.team.requirements, BUDGET: owners.team.budget}
    assert isinstance(gate.head_source, CountedOwnerHeads)
    assert gate.head_source.stats.requests == 2  # one request per owner
    logged = await find_decisions(store, source="gate", plan=owners.team.plan, limit=1)
    assert logged[0].verdict == "allow"


async def test_stale_plan_is_replanned_once_then_allowed(
    owners: Owners, store: AsyncStore, keyring: Keyring
) -> None:
    req, budget = "trip/7/requirements", "trip/7/budget"
    await store.own(req, "planner")
    await store.own(budget, "reviser")
    r3 = await store.put(req, {"destination": "Lisbon"}, author="planner")
    b = await store.put(budget, {"eur": 500}, author="reviser")
    plan = await create_plan(store, author="planner", parents=[r3.id, b.id])
    r4 = await store.put(req, {"destination": "Porto"}, author="planner")  # after the plan

    booked: list[Any] = []

    async def replan(verdict: Verdict) -> Replanned:
        assert verdict.current_records[req].value == {"destination": "Porto"}
        fresh = await create_plan(
            store,
            author="planner",
            parents=refreshed_parents(await store.get(plan.id), verdict),
            supersedes=plan.id,
        )
        return Replanned(fresh.id, {"trip": "7", "to": "Porto"})

    async def book(args: Mapping[str, Any]) -> str:
        booked.append(dict(args))
        return "ok"

    gate = gate_for(store, keyring, owners.directory)
    try:
        seam = GateMiddleware(store, POLICY, gate=gate)
        action = ToolCall("book_trip", {"trip": "7", "to": "Lisbon"}, plan.id)
        outcome = await seam.run(action, book, replan)
        assert [v.verdict for v in outcome.verdicts] == ["replan", "allow"]
        assert outcome.verdicts[0].stale[0].used == (r3.id,)
        assert outcome.verdicts[0].stale[0].current == r4.id
        assert booked == [{"trip": "7", "to": "Porto"}]

        # Revised again after the replan: the one replan is spent, so the action is blocked.
        await store.put(req, {"destination": "Faro"}, author="planner")
        again = await gate.check(ToolCall("book_trip", {"trip": "7"}, outcome.plan_id))
    finally:
        await gate.aclose()
    assert again.verdict == "block"
    assert again.reason == "stale_after_replan"


@pytest.mark.parametrize("mode", sorted(EXPECTED_BLOCK))
async def test_faulty_owner_blocks_over_loopback(
    owners: Owners, store: AsyncStore, keyring: Keyring, mode: str, audit: str
) -> None:
    # A replay starts afresh at its own address in each audit mode.
    address = owners.down_url if mode == "down" else f"{owners.fault_url}/{mode}/{audit}"
    directory = {**owners.directory, "reviser": address}
    gate = gate_for(store, keyring, directory, timeout=0.5, audit=audit)
    try:
        if mode == "replay":  # the first answer is genuine; replaying it later must not pass
            first = await gate.check(ToolCall("book_trip", {"trip": "42"}, owners.team.plan))
            assert first.verdict == "allow", first.message
        verdict = await gate.check(ToolCall("book_trip", {"trip": "42"}, owners.team.plan))
    finally:
        await gate.aclose()
    assert verdict.verdict == "block"
    assert verdict.reason == EXPECTED_BLOCK[mode], verdict.message
    assert "reviser" in verdict.message
    # Newest first, in the order they reached the journal (a deferred allow after the refusal
    # that followed it): the newest block is this one.
    logged = await find_decisions(store, source="gate", plan=owners.team.plan, limit=10)
    block = next(d for d in logged if d.verdict == "block")
    assert block.reason == EXPECTED_BLOCK[mode]


async def test_owner_process_checks_requests_over_the_wire(
    owners: Owners, keyring: Keyring
) -> None:
    """An agent the owners do not know gets no heads, only a refusal."""
    stranger = Keyring({**dict(keyring), "stranger": b"s" * 32})
    source = HttpOwnerHeads(owners.directory, stranger, agent="stranger")
    try:
        answers = await source.heads({"planner": (REQ,), "reviser": (BUDGET,)})
    finally:
        await source.aclose()
    for key in (REQ, BUDGET):
        assert answers[key].error == "owner_unauthenticated"
        assert answers[key].head is None


def test_serve_owner_without_its_secret_exits_with_a_clear_error(
    secrets_by_agent: dict[str, str],
) -> None:
    env = {**os.environ, KEYRING_ENV: json.dumps(secrets_by_agent)}
    cmd = [sys.executable, "-m", "planfence.adapters.cli", "serve-owner", "--agent", "ghost"]
    cmd += ["--store", "memory://", "--port", str(free_port())]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "no secret for the owner agent 'ghost'" in done.stderr
