"""List an MCP server's tools (for `planfence policy check --tools-from-upstream` and
`planfence policy init --from-upstream`)."""

from __future__ import annotations

import mcp_types as types
from mcp import Client

from .upstream import UpstreamMode, UpstreamTarget

MAX_PAGES = 100


async def list_tools(
    target: UpstreamTarget, *, mode: UpstreamMode = "auto"
) -> tuple[types.Implementation | None, list[types.Tool]]:
    """The server's identity and every tool it lists (all pages), with annotations and input
    schemas (for `planfence policy init`). Bound it with a deadline."""
    tools: list[types.Tool] = []
    async with Client(target, mode=mode, cache=None) as client:
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return client.server_info, tools
