"""The MCP page's example, end to end: `mcp-server-time` (a real third-party server whose tools
declare output schemas) behind the proxy, a time-zone argument gated with `{name:path}`, driven
by the official TypeScript client."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import World, plan_meta
from ts_harness import install, run_client

from planfence.plugins.gate import Policy, create_plan

pytest.importorskip("mcp_server_time")

PAGE = Path(__file__).resolve().parents[2] / "docs" / "frameworks" / "mcp.md"
TIME_SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


def page_time_policy() -> str:
    """The MCP page's policy block for `convert_time` (the proxy section)."""
    blocks = re.findall(r"```toml\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    [block] = [b for b in blocks if "[tools.convert_time]" in b]
    return block


@pytest.fixture(scope="module")
def node() -> str:
    return install()


async def test_path_arguments_gate_a_real_server_for_the_typescript_client(
    world: World, node: str
) -> None:
    text = page_time_policy()
    Policy.from_toml(text)  # the page's block loads as it is
    # The page's block, plus the single-segment spelling that cannot take a time zone.
    world.policy.write_text(
        text + '\n[tools.get_current_time]\ndepends_on = ["clock/{timezone}"]\n'
    )
    await world.store.own("clock/Europe/Lisbon", "timekeeper")
    setting = await world.store.put("clock/Europe/Lisbon", {"dst": True}, author="timekeeper")
    plan = await create_plan(world.store, author="planner", parents=[setting.id])
    convert = {"source_timezone": "Europe/Lisbon", "time": "12:00", "target_timezone": "UTC"}
    calls: list[dict[str, Any]] = [
        {"name": "convert_time", "arguments": convert, "meta": plan_meta(plan)},
        {"name": "convert_time", "arguments": convert},
        {
            "name": "get_current_time",
            "arguments": {"timezone": "Europe/Lisbon"},
            "meta": plan_meta(plan),
        },
    ]
    args = world.proxy_args(upstream=TIME_SERVER)
    scenario = {
        "transport": "stdio",
        "command": sys.executable,
        "args": args,
        "env": dict(os.environ),
        "calls": calls,
    }
    report = await run_client(node, scenario)

    assert {t["name"]: t["hasOutputSchema"] for t in report["tools"]} == {
        "get_current_time": True,
        "convert_time": True,
    }
    allowed, missing, unresolved = report["results"]
    assert allowed["ok"] and not allowed["result"].get("isError")
    assert allowed["result"]["structuredContent"]["source"]["timezone"] == "Europe/Lisbon"
    for entry, reason in ((missing, "missing_plan"), (unresolved, "scope_unresolved")):
        assert entry["ok"], entry.get("error")  # a refusal, not a schema error
        body = entry["result"]["_meta"]["dev.planfence/refusal"]["planfence"]
        assert (body["verdict"], body["reason"]) == ("block", reason)
        assert "structuredContent" not in entry["result"]
    message = unresolved["result"]["_meta"]["dev.planfence/refusal"]["planfence"]["message"]
    assert "{timezone:path}" in message and "{timezone:enc}" in message
