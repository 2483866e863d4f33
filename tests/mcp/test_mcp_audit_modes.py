"""`planfence proxy --audit deferred|durable|off`: every allow it answered is on record after
Ctrl-C (the proxy closes its gate, which writes what the deferred audit queued)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import anyio
import pytest
from interrupts import interruptible
from mcp_helpers import World, background, connect, free_port, plan_meta, wait_for_port

from planfence.plugins.gate import find_decisions

ARGS = {"destination": "Lisbon", "trip": "t1"}


@pytest.mark.parametrize(("audit", "recorded"), [("deferred", 3), ("durable", 3), ("off", 0)])
async def test_allows_are_on_record_after_ctrl_c(
    world: World, tmp_path: Path, audit: str, recorded: int
) -> None:
    port = free_port()
    args = [sys.executable, *world.proxy_args("--transport", "http", "--port", str(port))]
    args += ["--audit", audit, "--", *world.upstream_command()]
    async with background(interruptible(args), tmp_path / "proxy.log") as proc:
        await wait_for_port(port)
        async with connect(f"http://127.0.0.1:{port}/mcp") as client:
            for _ in range(3):
                ok = await client.call_tool("book", ARGS, meta=plan_meta(world.plan))
                assert ok.meta["dev.planfence/decision"]["verdict"] == "allow"
        proc.send_signal(signal.SIGINT)
        with anyio.fail_after(20):
            code = await proc.wait()
    assert code == 130, (tmp_path / "proxy.log").read_text()
    allows = await find_decisions(world.store, source="gate", verdict="allow", plan=world.plan.id)
    assert len(allows) == recorded
