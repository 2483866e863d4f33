"""A third-party MCP server (`mcp-server-time` from PyPI) behind the proxy, one tool gated."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mcp.client.stdio import StdioServerParameters
from mcp_helpers import World, connect, plan_meta, refusal

from planfence.plugins.gate import create_plan

pytest.importorskip("mcp_server_time")

TIME_POLICY = """
[tools.get_current_time]
depends_on = ["clock/{timezone}"]

[tools.convert_time]
ungated = true
"""
TIME_SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_time_server_behind_the_proxy(world: World, tmp_path: Path, mode: str) -> None:
    world.policy.write_text(TIME_POLICY)
    await world.store.own("clock/UTC", "timekeeper")
    setting = await world.store.put("clock/UTC", {"source": "ntp"}, author="timekeeper")
    plan = await create_plan(world.store, author="planner", parents=[setting.id])
    direct = StdioServerParameters(command=TIME_SERVER[0], args=TIME_SERVER[1:])

    async with (
        connect(world.proxy_params(upstream=TIME_SERVER), mode) as client,
        connect(direct, mode) as upstream,
    ):
        listed = [t.model_dump() for t in (await client.list_tools()).tools]
        assert listed == [t.model_dump() for t in (await upstream.list_tools()).tools]

        refused = refusal(await client.call_tool("get_current_time", {"timezone": "UTC"}))
        assert (refused["verdict"], refused["reason"]) == ("block", "missing_plan")

        now = await client.call_tool("get_current_time", {"timezone": "UTC"}, meta=plan_meta(plan))
        assert now.is_error is False
        assert now.structured_content is not None
        assert now.structured_content["timezone"] == "UTC"
        assert now.meta["dev.planfence/decision"]["verdict"] == "allow"

        converted = await client.call_tool(
            "convert_time",
            {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Europe/Lisbon"},
        )
        assert converted.is_error is False
        assert converted.meta["dev.planfence/decision"]["reason"] == "ungated"

        await world.store.put("clock/UTC", {"source": "gps"}, author="timekeeper")
        stale = refusal(
            await client.call_tool("get_current_time", {"timezone": "UTC"}, meta=plan_meta(plan))
        )
        assert (stale["verdict"], stale["reason"]) == ("replan", "stale_dependencies")
        assert stale["stale"][0]["key"] == "clock/UTC"
