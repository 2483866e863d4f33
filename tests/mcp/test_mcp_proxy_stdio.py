"""The proxy as a subprocess over stdio, driven by the official MCP client in both client modes:
the initialize handshake ("legacy", 2025-11-25) and the 2026-07-28 per-request envelope ("auto")."""

from __future__ import annotations

import pytest
from mcp.client.stdio import StdioServerParameters
from mcp_helpers import TRIP_KEY, World, connect, plan_meta, refusal

from planfence.plugins.gate import find_decisions

MODES = ("legacy", "auto")
EXPECTED_VERSION = {"legacy": "2025-11-25", "auto": "2026-07-28"}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("audit", ["deferred", "durable"])
async def test_allowed_call_is_forwarded_with_the_decision(
    world: World, mode: str, audit: str
) -> None:
    async with connect(world.proxy_params("--audit", audit), mode) as client:
        assert client.protocol_version == EXPECTED_VERSION[mode]
        result = await client.call_tool(
            "book",
            {"destination": "Lisbon", "trip": "t1"},
            meta=plan_meta(world.plan, **{"dev.planfence/agent": "executor", "acme.dev/trace": 7}),
        )

    assert result.is_error is False
    assert result.structured_content == {"booking": "t1-Lisbon", "destination": "Lisbon"}
    decision = result.meta["dev.planfence/decision"]
    assert decision["verdict"] == "allow"
    assert decision["reason"] == "current"
    assert decision["plan"] == world.plan.id

    [booked] = world.effects_log("book")
    assert booked["destination"] == "Lisbon"
    # Other `_meta` keys reach the upstream; the caller's protocol envelope does not (the proxy's
    # own upstream connection stamps its own client identity).
    assert booked["meta"]["acme.dev/trace"] == 7
    assert booked["meta"]["dev.planfence/plan"] == world.plan.id
    assert "progressToken" not in booked["meta"]
    info = booked["meta"].get("io.modelcontextprotocol/clientInfo")
    assert info is None or info["name"] == "planfence-proxy"

    # durable: on record before forwarding, with its id; deferred: no id yet, on record once the
    # proxy has ended (it closes its gate when the client goes)
    [logged] = await find_decisions(world.store, source="gate", verdict="allow")
    assert decision["decision_id"] == (logged.id if audit == "durable" else None)
    assert logged.tool == "book"
    assert logged.agent == "executor"
    assert logged.plan == world.plan.id


@pytest.mark.parametrize("mode", MODES)
async def test_tools_resources_and_prompts_pass_through(world: World, mode: str) -> None:
    direct = world.upstream_command()
    async with (
        connect(world.proxy_params(), mode) as proxied,
        connect(StdioServerParameters(command=direct[0], args=direct[1:]), mode) as upstream,
    ):
        via, raw = await proxied.list_tools(), await upstream.list_tools()
        assert [t.model_dump() for t in via.tools] == [t.model_dump() for t in raw.tools]
        book = next(t for t in via.tools if t.name == "book")
        assert book.output_schema is not None  # schemas survive the trip

        assert (await proxied.list_resources()).resources == (
            await upstream.list_resources()
        ).resources
        read = await proxied.read_resource("test://greeting")
        assert read.contents[0].text == "hello from upstream"

        prompts = await proxied.list_prompts()
        assert [p.name for p in prompts.prompts] == ["plan_trip"]
        got = await proxied.get_prompt("plan_trip", {"city": "Porto"})
        assert got.messages[0].content.text == "Plan a trip to Porto."


async def test_stale_plan_replans_once_then_blocks_across_processes(world: World) -> None:
    args = {"destination": "Lisbon", "trip": "t1"}
    async with connect(world.proxy_params()) as client:
        second = await world.revise({"destination": "Porto"})
        stale = refusal(await client.call_tool("book", args, meta=plan_meta(world.plan)))
        assert stale["verdict"] == "replan"
        assert stale["reason"] == "stale_dependencies"
        assert stale["tool"] == "book"
        assert stale["plan"] == world.plan.id
        assert stale["stale"] == [{"key": TRIP_KEY, "used": [world.first.id], "current": second.id}]
        assert "replan" in stale["message"]
        assert world.effects_log("book") == []  # the refused call never reached the upstream

        # The planner replans from the fresh record; the new plan names the one it replaces.
        replanned = await world.replan([second.id], supersedes=world.plan.id)
        ok = await client.call_tool(
            "book", {"destination": "Porto", "trip": "t1"}, meta=plan_meta(replanned)
        )
        assert ok.is_error is False
        assert [e["destination"] for e in world.effects_log("book")] == ["Porto"]

    # Another proxy process, same store: the replanned plan goes stale too, and the one-replan
    # budget is already spent, so it is blocked (not offered a second replan).
    await world.revise({"destination": "Faro"})
    async with connect(world.proxy_params(), "legacy") as client:
        blocked = refusal(
            await client.call_tool(
                "book", {"destination": "Porto", "trip": "t1"}, meta=plan_meta(replanned)
            )
        )
    assert blocked["verdict"] == "block"
    assert blocked["reason"] == "stale_after_replan"
    assert [s["key"] for s in blocked["stale"]] == [TRIP_KEY]
    assert len(world.effects_log("book")) == 1

    verdicts = [d.verdict for d in await find_decisions(world.store, source="gate")]
    assert verdicts == ["block", "allow", "replan"]  # newest first: every decision audited


@pytest.mark.parametrize("mode", MODES)
async def test_bad_inputs_get_clear_refusals_and_the_proxy_keeps_serving(
    world: World, mode: str
) -> None:
    args = {"destination": "Lisbon", "trip": "t1"}
    unknown_plan = "0" * 64
    cases: list[tuple[str, dict[str, object], dict[str, object], str]] = [
        ("book", args, {}, "missing_plan"),
        ("book", args, {"dev.planfence/plan": 42}, "unknown_plan"),
        ("book", args, {"dev.planfence/plan": ["not", "an", "id"]}, "unknown_plan"),
        ("book", args, {"dev.planfence/plan": "plan-please"}, "unknown_plan"),
        ("book", args, {"dev.planfence/plan": unknown_plan}, "unknown_plan"),
        ("book", args, {"dev.planfence/plan": world.first.id}, "unknown_plan"),  # not a plan
        ("book", {"destination": "Lisbon"}, plan_meta(world.plan), "scope_unresolved"),
        ("book", args, plan_meta(world.plan, **{"dev.planfence/agent": 5}), "malformed_meta"),
        ("book", args, plan_meta(world.plan, **{"dev.planfence/agent": "a b"}), "malformed_meta"),
        ("ship", {"order_id": "7"}, plan_meta(world.plan), "undeclared_tool"),
        ("no_such_tool", {}, plan_meta(world.plan), "undeclared_tool"),
    ]
    async with connect(world.proxy_params(), mode) as client:
        for tool, call_args, meta, reason in cases:
            body = refusal(await client.call_tool(tool, call_args, meta=meta))
            assert (tool, body["verdict"], body["reason"]) == (tool, "block", reason)
            assert body["tool"] == tool
            assert body["message"]
            assert isinstance(body["decision_id"], int)

        # A tool the policy exempts but the upstream does not have: the upstream's own answer.
        ghost = await client.call_tool("ghost", {})
        assert ghost.is_error is True
        assert ghost.meta is None or "dev.planfence/decision" in (ghost.meta or {})

        # ...and the proxy still serves.
        echo = await client.call_tool("echo", {"text": "still here"})
        assert echo.content[0].text == "still here"

    assert world.effects_log("book") == []
    assert world.effects_log("ship") == []
    refused = await find_decisions(world.store, source="gate", verdict="block", limit=100)
    assert sorted(d.reason for d in refused) == sorted(reason for *_, reason in cases)


async def test_upstream_tool_error_comes_back_unchanged(world: World) -> None:
    async with connect(world.proxy_params()) as client:
        via = await client.call_tool("fail", {"tag": "x"})
    assert via.is_error is True
    assert "tool failed on purpose: x" in via.content[0].text
    assert via.meta["dev.planfence/decision"]["verdict"] == "allow"
    assert via.structured_content is None or "planfence" not in via.structured_content


@pytest.mark.parametrize("mode", MODES)
async def test_upstream_crash_is_an_error_result_and_the_upstream_restarts(
    world: World, mode: str
) -> None:
    async with connect(world.proxy_params(), mode) as client:
        crashed = refusal(await client.call_tool("crash", {"tag": "boom"}))
        assert crashed["error"] == "upstream_unavailable"
        assert crashed["decision"]["verdict"] == "allow"
        again = await client.call_tool("echo", {"text": "back"})
        assert again.content[0].text == "back"
        booked = await client.call_tool(
            "book", {"destination": "Lisbon", "trip": "t1"}, meta=plan_meta(world.plan)
        )
        assert booked.is_error is False
    assert len(world.effects_log("started")) == 2
    assert len(world.effects_log("book")) == 1


async def test_hanging_upstream_times_out_and_the_proxy_keeps_serving(world: World) -> None:
    async with connect(world.proxy_params("--call-timeout", "1")) as client:
        hung = refusal(await client.call_tool("hang", {"tag": "h"}))
        assert hung["error"] == "upstream_timeout"
        assert hung["tool"] == "hang"
        echo = await client.call_tool("echo", {"text": "ok"})
        assert echo.content[0].text == "ok"
    assert len(world.effects_log("hang_started")) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_handshake_only_upstream(world: World, mode: str) -> None:
    """An upstream that only speaks the initialize handshake, behind clients of either mode."""
    params = world.proxy_params(upstream=world.upstream_command("--legacy-only"))
    async with connect(params, mode) as client:
        assert client.protocol_version == EXPECTED_VERSION[mode]
        assert "book" in [t.name for t in (await client.list_tools()).tools]
        ok = await client.call_tool(
            "book", {"destination": "Lisbon", "trip": "t1"}, meta=plan_meta(world.plan)
        )
        assert ok.structured_content == {"booking": "t1-Lisbon", "destination": "Lisbon"}
        assert ok.meta["dev.planfence/decision"]["verdict"] == "allow"
        refused = refusal(await client.call_tool("book", {"destination": "X", "trip": "t1"}))
        assert refused["reason"] == "missing_plan"
    [booked] = world.effects_log("book")
    assert booked["protocol_version"] == "2025-11-25"
