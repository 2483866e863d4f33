"""Streamable HTTP on either side of the proxy: the proxy serving HTTP to clients of both modes,
and the proxy in front of an upstream that itself serves streamable HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.stdio import StdioServerParameters
from mcp_helpers import (
    UPSTREAM,
    World,
    background,
    connect,
    free_port,
    http_proxy,
    plan_meta,
    refusal,
    wait_for,
    wait_for_port,
)

MODES = ("legacy", "auto")


@pytest.mark.parametrize("mode", MODES)
async def test_http_front(world: World, tmp_path: Path, mode: str) -> None:
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with http_proxy(world, tmp_path) as url, connect(url, mode) as client:
        assert "book" in [t.name for t in (await client.list_tools()).tools]
        ok = await client.call_tool(
            "book", {"destination": "Lisbon", "trip": "t1"}, meta=plan_meta(world.plan)
        )
        assert ok.structured_content == {"booking": "t1-Lisbon", "destination": "Lisbon"}
        assert ok.meta["dev.planfence/decision"]["verdict"] == "allow"

        refused = refusal(await client.call_tool("book", {"destination": "X", "trip": "t1"}))
        assert (refused["verdict"], refused["reason"]) == ("block", "missing_plan")

        slow = await client.call_tool("slow", {"steps": 2}, progress_callback=on_progress)
        assert slow.content[0].text == "done 2"
        assert progress == [1.0, 2.0]

        async with anyio.create_task_group() as tg:

            async def call() -> None:
                await client.call_tool("wait_forever", {"tag": "http"})

            tg.start_soon(call)
            await wait_for(lambda: bool(world.effects_log("wait_started")), "the upstream call")
            tg.cancel_scope.cancel()
        await wait_for(lambda: bool(world.effects_log("wait_cancelled")), "upstream cancellation")

    assert [e["destination"] for e in world.effects_log("book")] == ["Lisbon"]


@pytest.mark.parametrize("upstream_mode", ["auto", "legacy"])
async def test_http_upstream(world: World, tmp_path: Path, upstream_mode: str) -> None:
    port = free_port()
    upstream = [sys.executable, UPSTREAM, "--effects", str(world.effects)]
    upstream += ["--transport", "http", "--port", str(port)]
    async with background(upstream, tmp_path / "upstream.log"):
        await wait_for_port(port)
        params = StdioServerParameters(
            command=sys.executable,
            args=world.proxy_args(
                "--upstream-url",
                f"http://127.0.0.1:{port}/mcp",
                "--upstream-mode",
                upstream_mode,
            ),
        )
        async with connect(params) as client:
            ok = await client.call_tool(
                "book", {"destination": "Lisbon", "trip": "t1"}, meta=plan_meta(world.plan)
            )
            assert ok.meta["dev.planfence/decision"]["verdict"] == "allow"
            second = await world.revise({"destination": "Porto"})
            stale = refusal(
                await client.call_tool(
                    "book", {"destination": "Lisbon", "trip": "t1"}, meta=plan_meta(world.plan)
                )
            )
            assert stale["verdict"] == "replan"
            assert stale["stale"][0]["current"] == second.id
    [booked] = world.effects_log("book")
    expected = "2025-11-25" if upstream_mode == "legacy" else "2026-07-28"
    assert booked["protocol_version"] == expected


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "idle-test", "version": "1"},
    },
}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


async def test_idle_sessions_are_ended(world: World) -> None:
    """A handshake-era client that vanishes without DELETE leaves no session behind: after
    `idle_timeout` unused its peer is disconnected and its id answered 404; a session with a
    call in progress or an open stream is never idle."""
    import httpx

    from planfence.adapters.mcp.http_front import HttpFront
    from planfence.adapters.mcp.proxy import open_proxy
    from planfence.adapters.mcp.upstream import stdio_upstream
    from planfence.plugins.gate import Gate, Policy

    clock = Clock()
    gate = Gate(world.store, Policy.load(world.policy), agent="booker")
    async with open_proxy(gate, stdio_upstream(world.upstream_command())) as (proxy, _):
        front = HttpFront(proxy, idle_timeout=60.0, clock=clock)
        transport = httpx.ASGITransport(app=front)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:

            async def start() -> str:
                answer = await http.post("/mcp", json=INIT, headers=HEADERS)
                assert answer.status_code == 200, answer.text
                return answer.headers["mcp-session-id"]

            def ping(session: str, n: int) -> Any:
                body = {"jsonrpc": "2.0", "id": n, "method": "ping"}
                return http.post("/mcp", json=body, headers={**HEADERS, "mcp-session-id": session})

            gone, kept = await start(), await start()
            assert len(proxy.peers) == 2
            clock.now += 45
            assert (await ping(kept, 2)).status_code == 200  # used: its idle time restarts
            clock.now += 30  # `gone` unused for 75 s, `kept` for 30 s
            assert (await ping(kept, 3)).status_code == 200
            assert set(front.sessions) == {kept}
            assert len(proxy.peers) == 1
            assert (await ping(gone, 4)).status_code == 404

            # A call in progress keeps its session however long it runs.
            body = {
                "jsonrpc": "2.0",
                "id": 5,
                "method": "tools/call",
                "params": {"name": "wait_forever", "arguments": {"tag": "idle"}},
            }
            waiting = asyncio.create_task(
                http.post("/mcp", json=body, headers={**HEADERS, "mcp-session-id": kept})
            )
            await wait_for(lambda: bool(world.effects_log("wait_started")), "the upstream call")
            clock.now += 600
            other = await start()  # any request sweeps
            assert set(front.sessions) == {kept, other}
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
    with pytest.raises(ValueError, match="idle_timeout"):
        HttpFront(proxy, idle_timeout=0)
