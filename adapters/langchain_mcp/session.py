"""`PlanfenceSession`: an MCP client session whose tool calls carry the gate's fencing token.

`langchain-mcp-adapters` calls `session.call_tool(name, args)` with no `_meta`, and its tool
interceptors can change a call's name, arguments and HTTP headers only. A tool the gate allowed
runs inside the allow (`planfence.fence.current()` is its token), so the session the tools were
loaded from adds that token to the request's `_meta` under `dev.planfence/fence`, where the MCP
proxy puts it: an MCP server verifies it the same way behind either. A call made outside an
allow carries none (and any token the caller put there is dropped: only the gate writes it).

Interceptors run inside the tool, after the gate judged the call: one that changes the tool or
its arguments would send the server a call nobody judged. Inside an allow the session sends
only the call the token was issued for (the same tool, the same arguments' digest) and raises
`MalformedFenceError` for any other, before anything reaches the server.
"""

from __future__ import annotations

from typing import Any, cast

from planfence.fence import MalformedFenceError, current
from planfence.plugins.gate.call import args_digest
from planfence.shared_memory.extras import extra_imports

with extra_imports("langchain-mcp", "planfence.adapters.langchain_mcp"):
    from mcp import ClientSession

from ..mcp.meta import with_fence


class PlanfenceSession(ClientSession):
    """`mcp.ClientSession` that sends the current allow's fencing token with each tool call,
    and inside an allow only the call it was given for.

    Args:
        *args, **kwargs: as for `mcp.ClientSession`.
        server_name: the `server_name` given to `load_mcp_tools` with `tool_name_prefix=True`
            (the agent then calls `<server_name>_<tool>`, the server `<tool>`).
    """

    def __init__(self, *args: Any, server_name: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server_name = server_name

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        token = current()
        if token is not None:
            judged = {token.tool} | (
                {token.tool.removeprefix(f"{self.server_name}_")} if self.server_name else set()
            )
            if name not in judged or args_digest(arguments or {}) != token.args_digest:
                raise MalformedFenceError(
                    f"the gate allowed {token.tool} with other arguments than this call of "
                    f"{name} (a tool interceptor changed the call after the check): not sent"
                )
        meta = with_fence(kwargs.pop("meta", None) or {}, token.to_wire() if token else None)
        return await super().call_tool(
            name, arguments, *args, meta=cast(Any, meta or None), **kwargs
        )
