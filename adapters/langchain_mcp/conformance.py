"""The `langchain-mcp-adapters` harnesses: the world's tools served by a real MCP server over
stdio, loaded into `create_agent` with `load_mcp_tools`.

- `langchain_mcp.middleware`: `PlanfenceAgentMiddleware` gates the MCP tools as any LangChain
  tool; the tools' session is a `PlanfenceSession`, so the server records the allow's fencing
  token.
- `langchain_mcp.proxy`: the MCP proxy stands in front of the same server and the agent has no
  planfence middleware. `langchain-mcp-adapters` cannot put a plan in `_meta`, so the model reads
  the record with the proxy's `planfence_read` tool and the proxy stamps the session's plan (see
  `conformance_proxy` for how the two MCP SDK majors meet).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, ClassVar

from planfence.plugins.gate.checkers import CheckerFactory
from planfence.shared_memory.extras import extra_imports

from ..conformance.harness import Run, controlled
from ..conformance.world import AGENT, KEY, Script, World

with extra_imports("langchain-mcp", "the langchain-mcp-adapters conformance harness"):
    from langchain.agents import create_agent
    from langchain_mcp_adapters.tools import load_mcp_tools
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    from planfence.adapters.langgraph import PlanfenceAgentMiddleware
    from planfence.adapters.langgraph.conformance import TASK_INPUT, ScriptedChatModel, told

    from .session import PlanfenceSession


def upstream(world: World) -> StdioServerParameters:
    """The world's tools as an MCP server over stdio, recording effects in the world's file."""
    module = "planfence.adapters.mcp.conformance_upstream"
    return StdioServerParameters(
        command=sys.executable, args=["-m", module, str(world.effects.path)]
    )


class MiddlewareHarness:
    """`create_agent(model, await load_mcp_tools(session), middleware=[fence])`, where `fence`
    is a `PlanfenceAgentMiddleware`."""

    name: ClassVar[str] = "langchain_mcp.middleware"
    extra: ClassVar[str] = "langchain-mcp"
    modules: ClassVar[Sequence[str]] = ("langchain_mcp_adapters", "langgraph", "langchain")
    tool_span: ClassVar[str | None] = None  # neither LangChain nor the MCP 1.x client opens one

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
        keys = [KEY] if plans else []
        fence = PlanfenceAgentMiddleware(world.store, world.policy, keys=keys, agent=AGENT)
        controlled(fence.gate, checker)
        run = Run()
        try:
            async with (
                stdio_client(upstream(world)) as (read, write),
                PlanfenceSession(read, write) as session,
            ):
                await session.initialize()
                tools = await load_mcp_tools(session)
                agent = create_agent(ScriptedChatModel(script=script), tools, middleware=[fence])
                for n in range(runs):
                    if n:
                        script.new_run()
                    state: dict[str, Any] = await agent.ainvoke(TASK_INPUT)
                    run.told += told(state["messages"]).told
        finally:
            if close:
                await fence.gate.aclose()
        return run
