"""MCP harnesses: the proxy in front of a real stdio upstream server, and the gate inside an
official-SDK server. An MCP client is the agent: each turn it reads the records, asks the script
what to call, and calls it.

The proxy's read side is its own `planfence_read` tool (`--agent`): it stamps a plan from the
versions the session read. In front of the in-server gate, the client stamps the plan itself
from what it read (`PlanStamper`) and sends it in `_meta`, as the proxy's contract says.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, cast

from planfence.plugins.gate import Gate, GateMiddleware, PlanStamper
from planfence.plugins.gate.checkers import CheckerFactory
from planfence.shared_memory.extras import extra_imports

from ..conformance.harness import Run, controlled
from ..conformance.world import AGENT, KEY, Script, World

with extra_imports("mcp", "the MCP conformance harness"):
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    from planfence.adapters.mcp.in_server import PlanfenceServerMiddleware
    from planfence.adapters.mcp.meta import META_PLAN
    from planfence.adapters.mcp.proxy import open_proxy
    from planfence.adapters.mcp.sessions import READ
    from planfence.adapters.mcp.upstream import stdio_upstream

Read = Callable[[], Awaitable[list[str]]]
Send = Callable[[str, dict[str, Any]], Awaitable[str]]


def _text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


async def drive(script: Script, read: Read, send: Send, run: Run | None = None) -> Run:
    """The client's loop: read, ask the script, call; until the script answers."""
    run, last = run or Run(), None
    while True:
        step = await script.next(await read(), last)
        if step is None:
            return run
        last = await send(step.tool, step.args)
        run.told.append(last)


async def drive_runs(
    script: Script, runs: int, conversation: Callable[[], tuple[Read, Send]]
) -> Run:
    """`runs` conversations one after the other, each with the client's `conversation()`."""
    run = Run()
    for n in range(runs):
        if n:
            script.new_run()
        await drive(script, *conversation(), run)
    return run


class ProxyHarness:
    """`planfence proxy --agent booker -- python -m ...mcp_upstream`, run in this process. Its
    runs are conversations one after the other over the same client connection, as in a
    desktop client that keeps its proxy between chats."""

    name: ClassVar[str] = "mcp.proxy"
    extra: ClassVar[str] = "mcp"
    modules: ClassVar[Sequence[str]] = ("mcp",)
    tool_span: ClassVar[str | None] = "tools/call"

    async def run(
        self,
        world: World,
        script: Script,
        *,
        checker: CheckerFactory | None,
        plans: bool,
        runs: int = 1,
        close: bool = True,
    ) -> Run:
        command = [
            sys.executable,
            "-m",
            f"{__package__}.conformance_upstream",
            str(world.effects.path),
        ]
        gate = Gate(world.store, world.policy, agent=AGENT)
        agent = AGENT if plans else None
        seams: list[GateMiddleware] = []
        try:
            async with (
                open_proxy(gate, stdio_upstream(command), agent=agent) as (proxy, server),
                Client(server, mode="legacy") as client,
            ):
                seams.append(controlled(proxy.seam, checker))

                async def read() -> list[str]:
                    if not plans:
                        return []
                    return [_text(await client.call_tool(READ, {"key": KEY}))]

                async def send(tool: str, args: dict[str, Any]) -> str:
                    return _text(await client.call_tool(tool, args))

                return await drive_runs(script, runs, lambda: (read, send))
        finally:
            if close:
                for seam in seams:  # what a control's checker built
                    await seam.aclose()
                await gate.aclose()


class InServerHarness:
    """`MCPServer(..., middleware=[PlanfenceServerMiddleware(store, policy)])`; the client plans.
    The client is another process with its own connection to the shared store (`world.others`): it
    reads and stamps there, and each of its runs starts its own plan chain."""

    name: ClassVar[str] = "mcp.in_server"
    extra: ClassVar[str] = "mcp"
    modules: ClassVar[Sequence[str]] = ("mcp",)
    tool_span: ClassVar[str | None] = "tools/call"

    async def run(
        self,
        world: World,
        script: Script,
        *,
        checker: CheckerFactory | None,
        plans: bool,
        runs: int = 1,
        close: bool = True,
    ) -> Run:
        gate = PlanfenceServerMiddleware(world.store, world.policy, agent=AGENT)
        controlled(gate.gate, checker)
        server = MCPServer("trips", middleware=[gate])
        for name, fn in world.tools().items():
            server.tool(name=name, description=fn.__doc__)(fn)
        try:
            async with Client(server, mode="legacy") as client:

                def conversation() -> tuple[Read, Send]:
                    stamper = PlanStamper(world.others, AGENT)
                    meta: dict[str, Any] = {}

                    async def read() -> list[str]:
                        if not plans:
                            return []
                        records = await stamper.current([KEY])
                        plan = await stamper.stamp([r.id for r in records])
                        meta[META_PLAN] = plan.id
                        return [json.dumps({r.key: r.value}) for r in records]

                    async def send(tool: str, args: dict[str, Any]) -> str:
                        result = await client.call_tool(tool, args, meta=cast(Any, dict(meta)))
                        return _text(result)

                    return read, send

                return await drive_runs(script, runs, conversation)
        finally:
            if close:
                await gate.aclose()
