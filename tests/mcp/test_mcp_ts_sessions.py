"""`planfence proxy --agent NAME` driven by the official TypeScript client with no `_meta` at
all, as a desktop client's model would: it reads through the proxy's own tools, and the proxy
stamps each gated call's plan from what the session read. Over stdio and HTTP."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import HERE, TRIP_KEY, World, background, free_port, wait_for_port
from ts_harness import install, run_client

ARGS = {"destination": "Lisbon", "trip": "t1"}
OWNER_PUT = str(HERE / "owner_put.py")


@pytest.fixture(scope="session")
def node() -> str:
    return install()


def revise(world: World, destination: str) -> dict[str, Any]:
    value = json.dumps({"destination": destination})
    return {"run": [sys.executable, OWNER_PUT, world.store_url, TRIP_KEY, value, "planner"]}


def read() -> dict[str, Any]:
    return {"name": "planfence_read", "arguments": {"key": TRIP_KEY}}


def book(destination: str = "Lisbon") -> dict[str, Any]:
    return {"name": "book", "arguments": {**ARGS, "destination": destination}}


def conversation(world: World) -> list[dict[str, Any]]:
    return [
        read(),
        book(),  # 1: allowed
        revise(world, "Porto"),
        book(),  # 2: replan
        read(),  # 3: Porto
        book("Porto"),  # 4: allowed
        revise(world, "Madrid"),
        book(),  # 5: replan
        read(),
        revise(world, "Rome"),
        book(),  # 7: blocked
        {"name": "planfence_write", "arguments": {"key": TRIP_KEY, "value": {"x": 1}}},  # 8
    ]


def refusal(entry: dict[str, Any]) -> dict[str, Any]:
    assert entry["ok"], entry.get("error")
    result = entry["result"]
    assert result["isError"] is True
    assert "structuredContent" not in result  # `book` declares an output schema
    return dict(json.loads(result["content"][0]["text"])["planfence"])


def check(report: dict[str, Any], world: World) -> None:
    names = {t["name"] for t in report["tools"]}
    assert {"planfence_read", "planfence_keys", "planfence_write", "book"} <= names
    results = report["results"]
    for entry in results:
        assert entry["ok"], entry.get("error")
    first, allowed, porto, allowed2, write = (results[i]["result"] for i in (0, 1, 3, 4, 8))
    assert first["structuredContent"]["value"] == {"destination": "Lisbon"}
    assert allowed.get("isError") in (None, False)
    replan = refusal(results[2])
    assert replan["verdict"] == "replan" and [s["key"] for s in replan["stale"]] == [TRIP_KEY]
    assert "planfence_read" in replan["message"]
    assert porto["structuredContent"]["value"] == {"destination": "Porto"}
    assert allowed2["structuredContent"] == {"booking": "t1-Porto", "destination": "Porto"}
    assert refusal(results[5])["verdict"] == "replan"
    assert refusal(results[7])["reason"] == "stale_after_replan"
    assert write["isError"] is True and "owned by planner" in write["content"][0]["text"]
    assert [e["destination"] for e in world.effects_log("book")] == ["Lisbon", "Porto"]


async def test_typescript_session_over_stdio(world: World, node: str) -> None:
    args = world.proxy_args("--agent", "executor", upstream=world.upstream_command())
    target = {
        "transport": "stdio",
        "command": sys.executable,
        "args": args,
        "env": dict(os.environ),
    }
    report = await run_client(node, {**target, "calls": conversation(world)})
    check(report, world)


async def test_typescript_session_over_http(world: World, node: str, tmp_path: Path) -> None:
    port = free_port()
    args = world.proxy_args(
        "--agent",
        "executor",
        "--transport",
        "http",
        "--port",
        str(port),
        upstream=world.upstream_command(),
    )
    async with background([sys.executable, *args], tmp_path / "proxy.log"):
        await wait_for_port(port)
        target = {"transport": "http", "url": f"http://127.0.0.1:{port}/mcp"}
        report = await run_client(node, {**target, "calls": conversation(world)})
    check(report, world)
