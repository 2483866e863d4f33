"""List an MCP server's tool names (for `planfence policy check --tools-from-upstream`)."""

from __future__ import annotations

from mcp import Client

from .upstream import UpstreamMode, UpstreamTarget

MAX_PAGES = 100


async def list_tool_names(target: UpstreamTarget, *, mode: UpstreamMode = "auto") -> list[str]:
    """Every tool name the server lists (all pages), in its order. Bound it with a deadline."""
    names: list[str] = []
    async with Client(target, mode=mode, cache=None) as client:
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            names.extend(t.name for t in page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
    return names
