"""`PlanfenceSession`: an MCP client session whose tool calls carry the gate's fencing token.

`langchain-mcp-adapters` calls `session.call_tool(name, args)` with no `_meta`, and its tool
interceptors can change a call's name, arguments and HTTP headers only. A tool the gate allowed
runs inside the allow (`planfence.fence.current()` is its token), so the session the tools were
loaded from adds that token to the request's `_meta` under `dev.planfence/fence`, where the MCP
proxy puts it: an MCP server verifies it the same way behind either. A call made outside an
allow carries none (and any token the caller put there is dropped: only the gate writes it).
"""

from __future__ import annotations

from typing import Any, cast

from planfence.fence import current
from planfence.shared_memory.extras import extra_imports

with extra_imports("langchain-mcp", "planfence.adapters.langchain_mcp"):
    from mcp import ClientSession

from ..mcp.meta import with_fence


class PlanfenceSession(ClientSession):
    """`mcp.ClientSession` that sends the current allow's fencing token with each tool call."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        token = current()
        meta = with_fence(kwargs.pop("meta", None) or {}, token.to_wire() if token else None)
        return await super().call_tool(
            name, arguments, *args, meta=cast(Any, meta or None), **kwargs
        )
