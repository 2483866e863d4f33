"""planfence for MCP tools in LangChain agents (`langchain-mcp-adapters`).

MCP tools loaded with `load_mcp_tools` are LangChain tools, so `PlanfenceAgentMiddleware`
(`planfence.adapters.langgraph`) gates them in `create_agent` as it gates any other. Open the
tools' session as a `PlanfenceSession` and each allowed call carries its fencing token to the
MCP server in `_meta`, as the MCP proxy sends it:

    async with stdio_client(server) as (read, write), PlanfenceSession(read, write) as session:
        await session.initialize()
        agent = create_agent(model, await load_mcp_tools(session), middleware=[fence])

Needs the `langchain-mcp` extra; names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.adapters._lazy import lazy_exports

if TYPE_CHECKING:
    from .session import PlanfenceSession

_EXPORTS = {"PlanfenceSession": "session"}

__all__ = ["PlanfenceSession"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
