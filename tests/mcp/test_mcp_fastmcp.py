"""The gate inside a FastMCP server (`PlanfenceFastMCPMiddleware`, FastMCP middleware), on the
proxy's contract: the plan in `_meta`, refusals fitted to the tool's output schema, the TOML
policy."""

from __future__ import annotations

import json

import pytest
from mcp_helpers import World, plan_meta
from pydantic import BaseModel

pytest.importorskip("fastmcp")

from fastmcp import Client, FastMCP

from planfence.adapters.mcp.fastmcp_gate import PlanfenceFastMCPMiddleware

ARGS = {"destination": "Lisbon", "trip": "t1"}


class Booking(BaseModel):
    booking: str


def refusal_body(result: object) -> dict[str, object]:
    assert getattr(result, "is_error", None) is True
    payload = json.loads(result.content[0].text)  # type: ignore[attr-defined]
    assert result.meta["dev.planfence/refusal"] == payload  # type: ignore[attr-defined]
    return dict(payload["planfence"])


async def test_the_gate_inside_a_fastmcp_server(world: World) -> None:
    ran: list[str] = []
    app = FastMCP("trips")
    app.add_middleware(
        PlanfenceFastMCPMiddleware(world.store, str(world.policy))
    )  # the MCP page's line

    @app.tool
    def book(destination: str, trip: str) -> Booking:
        ran.append(destination)
        return Booking(booking=f"{trip}-{destination}")

    @app.tool
    def echo(text: str) -> str:
        return text

    async with Client(app) as client:
        allowed = await client.call_tool_mcp("book", ARGS, meta=plan_meta(world.plan))
        assert allowed.is_error is False
        assert allowed.meta["dev.planfence/decision"]["verdict"] == "allow"

        missing = await client.call_tool_mcp("book", ARGS)
        assert refusal_body(missing)["reason"] == "missing_plan"

        await world.revise({"destination": "Porto"})
        stale = await client.call_tool_mcp("book", ARGS, meta=plan_meta(world.plan))
        assert refusal_body(stale)["verdict"] == "replan"
        assert stale.structured_content is None  # `book` declares an output schema

        echo = await client.call_tool_mcp("echo", {"text": "hi"})
        assert echo.is_error is False
    assert ran == ["Lisbon"]
