"""End to end: a real AutoGen team (planner + fenced executor) with scripted models.

The customer revises the trip requirements while the executor is thinking, after the planner
stamped its plan: the gate must catch it, give the planner one replan, and block a second stale
plan. The freshness-only baseline runs the same team and books the stale destination.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from autogen_helpers import REQ, Trip

from planfence.adapters.autogen import run_outcome
from planfence.demos.baselines import freshness_checker
from planfence.plugins.gate import find_decisions, find_decisions_sync
from planfence.shared_memory import AsyncStore, create_async_store, open_store

TASK = "Book the flight for trip 42."


@pytest.fixture(params=["memory", "sqlite"])
async def astore(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncStore]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'pf.db'}"
    store = create_async_store(url)
    await store.setup()
    try:
        yield store
    finally:
        await store.aclose()


async def test_stale_plan_is_caught_and_one_replan_books_the_new_destination(
    astore: AsyncStore,
) -> None:
    trip = Trip(astore)
    first = await trip.seed("Lisbon")
    team, planner, executor = trip.team(
        plans=["Plan: fly to Lisbon.", "Plan: fly to Porto."],
        calls=["Lisbon", "Porto"],
        revisions={0: "Porto"},
    )
    result = await team.run(task=TASK)

    assert trip.booked == ["Porto"]  # the stale call never ran; the replanned one did
    outcome = run_outcome(result)
    assert (outcome.status, outcome.replans, len(outcome.plans)) == ("done", 1, 2)
    assert result.stop_reason == "planfence: book_flight ran (current)"

    old, new = planner.plans
    assert old.parents == (first,)
    assert new.supersedes == old.id
    assert new.parents == (await astore.head(REQ),)
    verdicts = executor.fences[0].verdicts
    assert [v.verdict for v in verdicts] == ["replan", "allow"]
    assert [s.key for s in verdicts[0].stale] == [REQ]
    refusal = next(m for m in result.messages if m.metadata.get("planfence.route") == "replan")
    assert f"{REQ} changed" in refusal.to_text() and "Porto" in refusal.to_text()
    # The allow is on record once the workbench stops (it closes the gate), or after a flush.
    await executor.fences[0].stop()
    audit = await find_decisions(astore, source="gate")
    assert sorted(d.verdict for d in audit) == ["allow", "replan"]


async def test_stale_again_after_the_replan_is_blocked(astore: AsyncStore) -> None:
    trip = Trip(astore)
    await trip.seed("Lisbon")
    team, _, executor = trip.team(
        plans=["Plan: fly to Lisbon.", "Plan: fly to Porto."],
        calls=["Lisbon", "Porto"],
        revisions={0: "Porto", 1: "Madrid"},
    )
    result = await team.run(task=TASK)

    assert trip.booked == []
    outcome = run_outcome(result)
    assert outcome.blocked and outcome.reason == "stale_after_replan"
    assert outcome.stale_keys == (REQ,)
    assert result.stop_reason == "planfence blocked book_flight (stale_after_replan)"
    assert [v.verdict for v in executor.fences[0].verdicts] == ["replan", "block"]


async def test_freshness_only_baseline_books_the_stale_destination(astore: AsyncStore) -> None:
    """The control: same team, same revision, a checker that only keeps state fresh."""
    trip = Trip(astore)
    await trip.seed("Lisbon")
    team, _, _ = trip.team(
        plans=["Plan: fly to Lisbon."],
        calls=["Lisbon"],
        revisions={0: "Porto"},
        checker=freshness_checker,
    )
    result = await team.run(task=TASK)

    assert trip.booked == ["Lisbon"]  # acted on the stale plan
    assert (await astore.get(await astore.head(REQ) or "")).value == {"destination": "Porto"}
    assert run_outcome(result).status == "done"


async def test_no_revision_runs_first_time(astore: AsyncStore) -> None:
    trip = Trip(astore)
    await trip.seed("Lisbon")
    team, _, _ = trip.team(plans=["Plan: fly to Lisbon."], calls=["Lisbon"], revisions={})
    result = await team.run(task=TASK)
    assert trip.booked == ["Lisbon"]
    assert run_outcome(result).replans == 0


def test_sync_store_from_sync_code(tmp_path: Path) -> None:
    """A sync `Store` (its own loop thread) shared with synchronous application code."""
    with open_store(f"sqlite:///{tmp_path / 'pf.db'}") as store:
        trip = Trip(store)

        async def scenario(revisions: dict[int, str]) -> str:
            team, _, executor = trip.team(
                plans=["Plan: fly to Lisbon.", "Plan: fly to Porto."],
                calls=["Lisbon", "Porto"],
                revisions=revisions,
            )
            status = run_outcome(await team.run(task=TASK)).status
            await executor.fences[0].flush()  # the allows the gate queued, on record
            return status

        asyncio.run(trip.seed("Lisbon"))
        assert asyncio.run(scenario({0: "Porto"})) == "done"
        assert trip.booked == ["Porto"]
        assert asyncio.run(scenario({0: "Rome", 1: "Madrid"})) == "blocked"
        assert trip.booked == ["Porto"]
        verdicts = [d.verdict for d in find_decisions_sync(store, source="gate")]
        assert sorted(verdicts) == ["allow", "block", "replan", "replan"]
