"""The gate inside an official-SDK MCP server (`PlanfenceServerMiddleware`, a server middleware): no
proxy process, the proxy's contract. For the high-level `MCPServer` and the low-level `Server`, in
both client modes; the policy is the proxy's TOML file."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.server import Server
from mcp.server.mcpserver import MCPServer
from mcp_helpers import World, plan_meta, refusal
from pydantic import BaseModel

from planfence.adapters.mcp.in_server import PlanfenceServerMiddleware
from planfence.plugins.gate import find_decisions

ARGS = {"destination": "Lisbon", "trip": "t1"}
MODES = ("legacy", "auto")


class Booking(BaseModel):
    booking: str


def high_level(world: World, ran: list[str]) -> MCPServer:
    app = MCPServer("trips", middleware=[PlanfenceServerMiddleware(world.store, world.policy)])

    @app.tool()
    def book(destination: str, trip: str) -> Booking:
        ran.append(destination)
        return Booking(booking=f"{trip}-{destination}")

    @app.tool()
    def echo(text: str) -> str:
        return text

    return app


def low_level(world: World, ran: list[str]) -> Server[Any]:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        schema = {"type": "object", "properties": {"destination": {"type": "string"}}}
        return types.ListToolsResult(
            tools=[
                types.Tool(name="book", input_schema=schema),
                types.Tool(name="echo", input_schema={"type": "object"}),
            ]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = params.arguments or {}
        if params.name == "book":
            ran.append(args["destination"])
        text = json.dumps(args)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    server: Server[Any] = Server("trips", on_list_tools=list_tools, on_call_tool=call_tool)
    server.middleware.append(
        PlanfenceServerMiddleware(world.store, str(world.policy))
    )  # the MCP page's line
    return server


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["MCPServer", "Server"])
async def test_the_gate_inside_the_server(world: World, mode: str, kind: str) -> None:
    ran: list[str] = []
    server = high_level(world, ran) if kind == "MCPServer" else low_level(world, ran)
    async with Client(server, mode=mode) as client:
        allowed = await client.call_tool("book", ARGS, meta=plan_meta(world.plan))
        assert allowed.is_error is False
        decision = allowed.meta["dev.planfence/decision"]
        assert (decision["verdict"], decision["plan"]) == ("allow", world.plan.id)

        missing = refusal(await client.call_tool("book", ARGS))
        assert missing["reason"] == "missing_plan"

        await world.revise({"destination": "Porto"})
        stale = await client.call_tool("book", ARGS, meta=plan_meta(world.plan))
        replan = refusal(stale)
        assert replan["verdict"] == "replan" and replan["plan"] == world.plan.id
        # `book` of the high-level server declares an output schema: no structured refusal.
        has_schema = kind == "MCPServer"
        assert (stale.structured_content is None) == has_schema

        echo = await client.call_tool("echo", {"text": "hi"})
        assert echo.is_error is False
    assert ran == ["Lisbon"]  # refused calls never reached the tool


@pytest.mark.parametrize("audit", ["deferred", "durable"])
async def test_the_server_lifespan_closes_the_gate_and_its_allows_are_on_record(
    world: World, audit: str
) -> None:
    gate = PlanfenceServerMiddleware(world.store, world.policy, audit=audit)  # type: ignore[arg-type]
    app = MCPServer("trips", lifespan=gate.lifespan, middleware=[gate])

    @app.tool()
    def book(destination: str, trip: str) -> str:
        return f"{trip}-{destination}"

    queued = gate.gate.checker_for(world.store).deferred  # type: ignore[attr-defined]
    if queued is not None:  # no batch written by time: only closing the gate writes it
        queued.max_delay, queued.max_wait = 60.0, 120.0
    async with Client(app) as client:
        allowed = await client.call_tool("book", ARGS, meta=plan_meta(world.plan))
        assert allowed.is_error is False
        # durable: on record before the answer; deferred: queued until the server stops
        assert (queued is not None and queued.pending == 1) == (audit == "deferred")
    [logged] = await find_decisions(world.store, source="gate", plan=world.plan.id)
    assert logged.verdict == "allow"
