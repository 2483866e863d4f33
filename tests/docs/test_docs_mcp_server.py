"""The MCP page's one-line wiring of the gate into an MCP server runs as written, and gates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from docpages import block

pytest.importorskip("mcp")

POLICY = """
[tools.book]
depends_on = ["trip/{trip}/requirements"]
"""

SETUP = """
import anyio
from planfence.plugins.gate import create_plan
from planfence.shared_memory import open_async_store

async def setup():
    store = await open_async_store("sqlite:///team.db")
    if await store.owner("trip/t1/requirements") is None:
        await store.own("trip/t1/requirements", "planner")
    first = await store.put("trip/t1/requirements", {"to": "Lisbon"}, author="planner")
    plan = await create_plan(store, author="planner", parents=[first.id])
    await store.aclose()
    return plan.id

PLAN = anyio.run(setup)
"""

DRIVE = """
from mcp import Client

async def drive():
    async with Client(mcp) as client:
        ok = await client.call_tool("book", {"trip": "t1", "destination": "Lisbon"},
                                    meta={"dev.planfence/plan": PLAN})
        refused = await client.call_tool("book", {"trip": "t1", "destination": "Lisbon"})
    print(ok.is_error, ok.content[0].text, ok.meta["dev.planfence/decision"]["verdict"])
    print(refused.is_error, refused.meta["dev.planfence/refusal"]["planfence"]["reason"])

anyio.run(drive)
"""


def test_the_gate_inside_an_mcp_server(tmp_path: Path) -> None:
    code = block("docs/frameworks/mcp.md", "The gate inside your own MCP server")
    assert code.count("PlanfenceServerMiddleware(") == 1
    (tmp_path / "policy.toml").write_text(POLICY)
    for _ in range(2):  # users run a snippet again in the same folder
        proc = subprocess.run(
            [sys.executable, "-c", SETUP + code + DRIVE],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines() == [
            "False booked t1 to Lisbon allow",
            "True missing_plan",
        ]
