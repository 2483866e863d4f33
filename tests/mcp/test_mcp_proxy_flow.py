"""Progress and cancellation through the proxy (stdio subprocess, both client modes)."""

from __future__ import annotations

import anyio
import pytest
from mcp_helpers import World, connect, wait_for

MODES = ("legacy", "auto")


@pytest.mark.parametrize("mode", MODES)
async def test_progress_is_relayed_to_the_caller(world: World, mode: str) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with connect(world.proxy_params(), mode) as client:
        result = await client.call_tool("slow", {"steps": 3}, progress_callback=on_progress)
    assert result.content[0].text == "done 3"
    assert seen == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]


@pytest.mark.parametrize("mode", MODES)
async def test_cancellation_reaches_the_upstream(world: World, mode: str) -> None:
    async with connect(world.proxy_params(), mode) as client:
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                await client.call_tool("wait_forever", {"tag": "c1"})

            tg.start_soon(call)
            await wait_for(lambda: bool(world.effects_log("wait_started")), "the upstream call")
            tg.cancel_scope.cancel()  # the client sends notifications/cancelled to the proxy

        # The proxy abandons its upstream request, which cancels the upstream's handler.
        await wait_for(lambda: bool(world.effects_log("wait_cancelled")), "upstream cancellation")
        # The connection is still good afterwards.
        echo = await client.call_tool("echo", {"text": "after cancel"})
        assert echo.content[0].text == "after cancel"
