"""`planfence proxy --agent NAME`: a client that cannot set `_meta` reads records through the
proxy's own tools, and its gated calls get plans stamped from exactly what its session read.
Scripted with the official Python client, with no `_meta` at all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import TRIP_KEY, World, connect, http_proxy, plan_meta, refusal

from planfence.plugins.gate import find_decisions

ARGS = {"destination": "Lisbon", "trip": "t1"}


def body(result: Any) -> dict[str, Any]:
    assert result.is_error is False, result.content[0].text
    return dict(json.loads(result.content[0].text))


async def conversation(client: Any, world: World) -> None:
    """The whole allow / replan / allow / replan / block cycle, and a refused write."""
    names = {t.name for t in (await client.list_tools()).tools}
    assert {"planfence_read", "planfence_keys", "planfence_write", "book"} <= names

    listed = body(await client.call_tool("planfence_keys", {"prefix": "trip/"}))
    assert [k["key"] for k in listed["keys"]] == [TRIP_KEY]

    # Nothing read yet: nothing to plan from.
    unread = refusal(await client.call_tool("book", ARGS))
    assert unread["reason"] == "missing_plan" and "planfence_read" in unread["message"]

    read = body(await client.call_tool("planfence_read", {"key": TRIP_KEY}))
    assert (read["value"], read["record"]) == ({"destination": "Lisbon"}, world.first.id)
    allowed = await client.call_tool("book", ARGS)
    assert allowed.is_error is False
    assert allowed.meta["dev.planfence/decision"]["verdict"] == "allow"

    # An owner updates what the session read: the next call is refused for a replan, and the
    # refusal names the key and says to read it again.
    await world.revise({"destination": "Porto"})
    refused = refusal(await client.call_tool("book", ARGS))
    assert refused["verdict"] == "replan"
    assert [s["key"] for s in refused["stale"]] == [TRIP_KEY]
    assert TRIP_KEY in refused["message"] and "planfence_read" in refused["message"]

    read = body(await client.call_tool("planfence_read", {"key": TRIP_KEY}))
    assert read["value"] == {"destination": "Porto"}
    porto = await client.call_tool("book", {"destination": "Porto", "trip": "t1"})
    assert porto.is_error is False
    assert porto.structured_content == {"booking": "t1-Porto", "destination": "Porto"}

    # Two updates in a row: the replan is stale again, and the call is blocked.
    await world.revise({"destination": "Madrid"})
    assert refusal(await client.call_tool("book", ARGS))["verdict"] == "replan"
    await client.call_tool("planfence_read", {"key": TRIP_KEY})
    await world.revise({"destination": "Rome"})
    blocked = refusal(await client.call_tool("book", ARGS))
    assert (blocked["verdict"], blocked["reason"]) == ("block", "stale_after_replan")

    # The session's agent does not own the trip: its write is refused, and nothing is written.
    write = await client.call_tool("planfence_write", {"key": TRIP_KEY, "value": {"x": 1}})
    assert write.is_error is True
    assert "owned by planner" in write.content[0].text
    assert (await world.store.get(await world.store.head(TRIP_KEY) or "")).value == {
        "destination": "Rome"
    }
    # Only the two allowed calls ran.
    assert [e["destination"] for e in world.effects_log("book")] == ["Lisbon", "Porto"]


async def own_notes(world: World) -> None:
    await world.store.own("notes/executor", "executor")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_stdio_session_without_meta(world: World, mode: str) -> None:
    await own_notes(world)
    async with connect(world.proxy_params("--agent", "executor"), mode) as client:
        await conversation(client, world)
        written = body(
            await client.call_tool("planfence_write", {"key": "notes/executor", "value": "hi"})
        )
    assert (await world.store.get(written["record"])).value == "hi"


async def test_an_http_session_without_meta(world: World, tmp_path: Path) -> None:
    async with (
        http_proxy(world, tmp_path, "--agent", "executor") as url,
        connect(url, "legacy") as client,
    ):
        await conversation(client, world)


async def test_without_a_session_the_plan_must_come_in_meta(world: World, tmp_path: Path) -> None:
    # 2026-era HTTP requests stand alone: nothing to remember reads in.
    async with (
        http_proxy(world, tmp_path, "--agent", "executor") as url,
        connect(url, "auto") as client,
    ):
        assert client.protocol_version == "2026-07-28"
        read = body(await client.call_tool("planfence_read", {"key": TRIP_KEY}))
        assert read["value"] == {"destination": "Lisbon"}
        refused = refusal(await client.call_tool("book", ARGS))
    assert refused["reason"] == "missing_plan"
    assert "_meta" in refused["message"] and "dev.planfence/plan" in refused["message"]
    assert world.effects_log("book") == []


async def test_without_agent_the_proxy_serves_only_the_upstream_tools(world: World) -> None:
    async with connect(world.proxy_params(), "legacy") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "book" in names and not {n for n in names if n.startswith("planfence_")}
        # No session reads to stamp a plan from: the call without one is refused, and the
        # upstream never sees it.
        assert refusal(await client.call_tool("book", ARGS))["reason"] == "missing_plan"
        assert world.effects_log("book") == []
        # With the plan in `_meta`, the same call reaches the upstream, once.
        allowed = await client.call_tool("book", ARGS, meta=plan_meta(world.plan))
        assert allowed.is_error is False, allowed.content[0].text
    assert [e["destination"] for e in world.effects_log("book")] == ["Lisbon"]


async def test_refusals_name_the_keys_to_read_and_unowned_writes_say_so(world: World) -> None:
    budget = "trip/t1/budget"
    await world.store.own(budget, "planner")
    await world.store.put(budget, {"eur": 900}, author="planner")
    world.policy.write_text(
        world.policy.read_text().replace(
            'depends_on = ["trip/{trip}/requirements"]',
            'depends_on = ["trip/{trip}/requirements", "trip/{trip}/budget"]',
        )
    )
    async with connect(world.proxy_params("--agent", "executor"), "legacy") as client:
        # Nothing read: the refusal is two sentences, and names every key the call depends on.
        unread = refusal(await client.call_tool("book", ARGS))
        assert unread["reason"] == "missing_plan"
        assert "no plan reference. Read " in unread["message"]
        for key in (TRIP_KEY, budget):
            assert repr(key) in unread["message"]
        assert "with planfence_read" in unread["message"]

        # One of the two read: the plan never reaches the other, and the refusal names it.
        await client.call_tool("planfence_read", {"key": TRIP_KEY})
        partial = refusal(await client.call_tool("book", ARGS))
        assert partial["reason"] == "incomplete_lineage"
        assert f"Read {budget!r} with planfence_read" in partial["message"]
        assert repr(TRIP_KEY) not in partial["message"].split("Read ", 1)[1]

        await client.call_tool("planfence_read", {"key": budget})
        assert (await client.call_tool("book", ARGS)).is_error is False

        # A key nobody owns: the agent is told it does not own it, in words.
        write = await client.call_tool("planfence_write", {"key": "notes/new", "value": "hi"})
        assert write.is_error is True
        text = write.content[0].text
        assert "do not own 'notes/new'" in text and "UnknownKeyError" not in text
    assert await world.store.keys("notes/") == []  # nothing was written


async def test_every_decision_names_the_agent_the_proxy_acts_for(world: World) -> None:
    """Behind --agent executor, the refusals that come before any plan (undeclared tool, missing
    plan) and the ungated allows are on record for executor too, like the stamped ones."""
    async with connect(world.proxy_params("--agent", "executor"), "legacy") as client:
        assert refusal(await client.call_tool("ship", {}))["reason"] == "undeclared_tool"
        assert refusal(await client.call_tool("book", ARGS))["reason"] == "missing_plan"
        echoed = await client.call_tool("echo", {"text": "hi"})
        assert echoed.meta["dev.planfence/decision"]["reason"] == "ungated"
        await client.call_tool("planfence_read", {"key": TRIP_KEY})
        allowed = await client.call_tool("book", ARGS)
        assert allowed.meta["dev.planfence/decision"]["verdict"] == "allow"
        # A plan given in `_meta` without an agent: made for executor too.
        given = await client.call_tool("book", ARGS, meta=plan_meta(world.plan))
        assert given.meta["dev.planfence/decision"]["verdict"] == "allow"
    found = await find_decisions(world.store, source=None, limit=100)
    reasons = sorted(d.reason for d in found)
    assert reasons == ["current", "current", "missing_plan", "undeclared_tool", "ungated"]
    assert {d.agent for d in found} == {"executor"}
    mine = await find_decisions(world.store, source=None, agent="executor", limit=100)
    assert len(mine) == len(found)
