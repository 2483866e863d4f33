"""The `langchain_mcp.proxy` harness: the MCP proxy (`--agent booker`) in front of the world's
MCP server, and a `create_agent` agent with no planfence middleware whose tools are loaded from
the proxy by `langchain-mcp-adapters`.

The proxy needs the MCP SDK 2.x and `langchain-mcp-adapters` the 1.x, so they run in two
environments, as they do for users (the proxy is a process of its own): this harness runs the
proxy in the suite's process (the `mcp` extra), serves it over streamable HTTP on a loopback
port, and starts the agent (`conformance_agent`) with the interpreter named by
`$PLANFENCE_LANGCHAIN_MCP_PYTHON` (an environment with the `langchain-mcp` extra). The agent's
model asks the script here, over the agent's stdin and stdout.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sys
from collections.abc import Sequence
from typing import Any, ClassVar

from planfence.plugins.gate import Gate, GateMiddleware
from planfence.plugins.gate.checkers import CheckerFactory
from planfence.shared_memory import MissingExtraError
from planfence.shared_memory.extras import extra_imports

from ..conformance.harness import Run, controlled
from ..conformance.world import AGENT, Script, World
from ..conformance.world import Call as Step

with extra_imports("mcp", "the langchain-mcp-adapters proxy harness"):
    import uvicorn

    from planfence.adapters.cli.serving import socket_url
    from planfence.adapters.mcp.http_front import HttpFront
    from planfence.adapters.mcp.proxy import open_proxy
    from planfence.adapters.mcp.upstream import stdio_upstream

PYTHON_ENV = "PLANFENCE_LANGCHAIN_MCP_PYTHON"
"""The interpreter of an environment with the `langchain-mcp` extra (it runs the agent)."""


def agent_python() -> str:
    """The interpreter that runs the agent; missing, the harness is not installed."""
    found = os.environ.get(PYTHON_ENV)
    if found and shutil.which(found):
        return found
    raise MissingExtraError(f"the agent's environment (${PYTHON_ENV})", "langchain-mcp")


agent_python()  # a suite without the agent's environment lists this row as not installed


class ProxyHarness:
    """`planfence proxy --agent booker` in front of the tools' server, the agent outside."""

    name: ClassVar[str] = "langchain_mcp.proxy"
    extra: ClassVar[str] = "mcp"
    modules: ClassVar[Sequence[str]] = ("mcp", "uvicorn")
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
            "planfence.adapters.mcp.conformance_upstream",
            str(world.effects.path),
        ]
        gate = Gate(world.store, world.policy, agent=AGENT)
        seams: list[GateMiddleware] = []
        try:
            async with open_proxy(
                gate, stdio_upstream(command), agent=AGENT if plans else None
            ) as (proxy, _):
                seams.append(controlled(proxy.seam, checker))
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", 0))
                    # The client's event stream outlives its session: stop waiting for it soon.
                    config = uvicorn.Config(
                        HttpFront(proxy),
                        log_level="warning",
                        lifespan="off",
                        timeout_graceful_shutdown=1,
                    )
                    server = uvicorn.Server(config)
                    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
                    try:
                        while not server.started:
                            if serving.done():
                                serving.result()
                            await asyncio.sleep(0.02)
                        return await converse(socket_url(sock, "/mcp"), script, runs, plans)
                    finally:
                        server.should_exit = True
                        await serving
        finally:
            if close:
                for seam in seams:  # what a control's checker built
                    await seam.aclose()
                await gate.aclose()


async def converse(url: str, script: Script, runs: int, reads: bool) -> Run:
    """Run the agent process and answer its model's questions from the script."""
    module = f"{__package__}.conformance_agent"
    agent = await asyncio.create_subprocess_exec(
        agent_python(),
        "-m",
        module,
        url,
        str(runs),
        "1" if reads else "0",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert agent.stdin is not None and agent.stdout is not None and agent.stderr is not None
    try:
        while line := await agent.stdout.readline():
            message = json.loads(line)
            if "told" in message:  # the agent closes its session and ends
                await asyncio.wait_for(agent.wait(), 10)
                return Run(list(message["told"]))
            answer: dict[str, Any] = {}
            if "new_run" in message:
                script.new_run()
            else:
                asked = message["ask"]
                step: Step | None = await script.next(asked["shown"], asked["last"])
                answer["call"] = None if step is None else {"tool": step.tool, "args": step.args}
            agent.stdin.write((json.dumps(answer) + "\n").encode())
            await agent.stdin.drain()
        error = (await agent.stderr.read()).decode(errors="replace").strip()
        raise RuntimeError(f"the agent process ended without an answer: {error[-2000:]}")
    finally:
        if agent.returncode is None:
            agent.kill()
        await agent.wait()
