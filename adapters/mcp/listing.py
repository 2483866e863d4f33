"""List an MCP server's tools (for `planfence policy check --tools-from-upstream` and
`planfence policy init --from-upstream`), over the proxy's own upstream connection."""

from __future__ import annotations

import mcp_types as types

from .links import UpstreamTarget
from .upstream import Upstream, UpstreamMode

MAX_PAGES = 100


async def list_tools(
    target: UpstreamTarget, *, mode: UpstreamMode = "auto"
) -> tuple[types.Implementation | None, list[types.Tool]]:
    """The server's identity and every tool it lists (all pages), with annotations and input
    schemas (for `planfence policy init`). Bound it with a deadline."""
    tools: list[types.Tool] = []
    async with Upstream(target, mode=mode) as upstream:
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            params = {"cursor": cursor} if cursor else None
            page = await upstream.request("tools/list", params, read_timeout=None)
            tools.extend(types.Tool.model_validate(tool) for tool in page.get("tools") or ())
            found = page.get("nextCursor")
            cursor = found if isinstance(found, str) else None
            if cursor is None:
                break
        info = upstream.server_info
        return (types.Implementation.model_validate(info) if info else None), tools
