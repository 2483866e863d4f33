"""The proxy driven by the official TypeScript MCP client, which most desktop clients and the
MCP Inspector are built on. That client validates `structuredContent` against the tool's
`outputSchema` even on an error result, so each refusal here must reach it as a readable result:
over stdio and HTTP, for tools with and without an output schema."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import HERE, POLICY, World, background, free_port, plan_meta, wait_for_port
from ts_harness import install, run_client

TS_UPSTREAM = str(HERE / "ts_upstream.py")
EXTRA_POLICY = """
[tools.reserve]
depends_on = ["trip/{trip}/requirements"]

[tools.note]
ungated = true
"""
ARGS = {"destination": "Lisbon", "trip": "t1"}


@pytest.fixture(scope="session")
def node() -> str:
    return install()


def upstream(world: World) -> list[str]:
    return [sys.executable, TS_UPSTREAM, "--effects", str(world.effects)]


def stdio_target(world: World) -> dict[str, Any]:
    args = world.proxy_args(upstream=upstream(world))
    return {"transport": "stdio", "command": sys.executable, "args": args, "env": dict(os.environ)}


@asynccontextmanager
async def http_target(world: World, tmp_path: Path, *options: str) -> AsyncIterator[dict[str, Any]]:
    port = free_port()
    args = world.proxy_args(
        "--transport", "http", "--port", str(port), *options, upstream=upstream(world)
    )
    async with background([sys.executable, *args], tmp_path / "proxy.log"):
        await wait_for_port(port)
        yield {"transport": "http", "url": f"http://127.0.0.1:{port}/mcp"}


async def prepared(world: World) -> dict[str, str]:
    """Plans for every verdict: the first plan went stale (replan), a replan of it from the same
    old record is stale again (block), a replan from the new record is current (allow)."""
    world.policy.write_text(POLICY + EXTRA_POLICY)
    second = await world.revise({"destination": "Porto"})
    again = await world.replan([world.first.id], supersedes=world.plan.id)
    fresh = await world.replan([second.id], supersedes=world.plan.id)
    return {"stale": world.plan.id, "again": again.id, "fresh": fresh.id}


def calls(plans: dict[str, str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for tool in ("book", "reserve"):  # with and without an output schema
        out += [
            {"name": tool, "arguments": ARGS, "meta": plan_meta(plans["stale"])},
            {"name": tool, "arguments": ARGS, "meta": plan_meta(plans["again"])},
            {"name": tool, "arguments": ARGS, "meta": plan_meta(plans["fresh"])},
            {"name": tool, "arguments": ARGS},
        ]
    out += [
        {"name": "echo", "arguments": {"text": "hi"}},
        {"name": "note", "arguments": {"text": "hi"}},
        {"name": "crash", "arguments": {"tag": "x"}},  # the proxy's own failure result
    ]
    return out


def refusal_of(entry: dict[str, Any], *, structured: bool) -> dict[str, Any]:
    """The planfence body of a refusal the TypeScript client accepted as a valid result."""
    assert entry["ok"], entry.get("error")
    result = entry["result"]
    assert result["isError"] is True
    payload = json.loads(result["content"][0]["text"])
    assert result["_meta"]["dev.planfence/refusal"] == payload
    if structured:
        assert result["structuredContent"] == payload
    else:
        assert "structuredContent" not in result
    return dict(payload["planfence"])


def check_report(report: dict[str, Any], world: World) -> None:
    schemas = {t["name"]: t["hasOutputSchema"] for t in report["tools"]}
    assert schemas["book"] and schemas["echo"] and schemas["crash"]
    assert not schemas["reserve"] and not schemas["note"]
    results = report["results"]
    for i, tool in enumerate(("book", "reserve")):
        stale, again, fresh, missing = results[4 * i : 4 * i + 4]
        structured = not schemas[tool]
        assert refusal_of(stale, structured=structured)["verdict"] == "replan"
        blocked = refusal_of(again, structured=structured)
        assert (blocked["verdict"], blocked["reason"]) == ("block", "stale_after_replan")
        assert (refusal_of(missing, structured=structured)["reason"]) == "missing_plan"
        assert fresh["ok"], fresh.get("error")
        allowed = fresh["result"]
        assert allowed.get("isError") in (None, False)
        assert allowed["_meta"]["dev.planfence/decision"]["verdict"] == "allow"
    booked = results[2]["result"]["structuredContent"]
    assert booked == {"booking": "t1-Lisbon", "destination": "Lisbon"}
    assert results[6]["result"]["content"][0]["text"] == "reserved t1-Lisbon"
    echo, note, crash = results[8:]
    assert echo["result"]["structuredContent"] == {"result": "hi"}
    assert note["result"]["content"][0]["text"] == "hi"
    assert refusal_of(crash, structured=False)["error"] == "upstream_unavailable"
    # Only the two allowed gated calls ran.
    assert [e["event"] for e in world.effects_log() if e["event"] in ("book", "reserve")] == [
        "book",
        "reserve",
    ]


async def test_typescript_client_over_stdio(world: World, node: str) -> None:
    plans = await prepared(world)
    report = await run_client(node, {**stdio_target(world), "calls": calls(plans)})
    check_report(report, world)


async def test_typescript_client_over_http(world: World, node: str, tmp_path: Path) -> None:
    plans = await prepared(world)
    async with http_target(world, tmp_path) as target:
        report = await run_client(node, {**target, "calls": calls(plans)})
    check_report(report, world)


async def test_typescript_client_with_a_bearer_token(
    world: World, node: str, tmp_path: Path
) -> None:
    world.policy.write_text(POLICY + EXTRA_POLICY)
    token = tmp_path / "token"
    token.write_text("ts-client-token\n")
    call = {"name": "note", "arguments": {"text": "with a token"}}
    async with http_target(world, tmp_path, "--auth-token-file", str(token)) as target:
        headers = {"Authorization": "Bearer ts-client-token"}
        report = await run_client(node, {**target, "headers": headers, "calls": [call]})
    assert report["results"][0]["result"]["content"][0]["text"] == "with a token"
