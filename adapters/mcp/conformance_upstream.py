"""The MCP server the proxy harness puts upstream: the world's two tools, each recording its side
effect (with the fencing token the proxy sent in `_meta`) in the effects file. It runs on the
MCP SDK 2.x (`MCPServer`) and 1.x (`FastMCP`, what `langchain-mcp-adapters` installs).

    python -m planfence.adapters.mcp.conformance_upstream EFFECTS_FILE
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

try:
    from mcp.server.mcpserver import Context, MCPServer
except ImportError:  # the MCP SDK 1.x
    from mcp.server.fastmcp import Context  # type: ignore[no-redef,attr-defined]
    from mcp.server.fastmcp import FastMCP as MCPServer  # type: ignore[no-redef,attr-defined]

from planfence.adapters.mcp.meta import META_FENCE

from ..conformance.world import BOOK, WEATHER, Effects


def build(effects: Effects) -> MCPServer:
    server = MCPServer("planfence-conformance-upstream")

    def fence(ctx: Context) -> Any:
        meta = ctx.request_context.meta
        if meta is None:
            return None
        fields = meta if isinstance(meta, Mapping) else (meta.model_extra or {})  # 2.x, 1.x
        return fields.get(META_FENCE)

    @server.tool(name=BOOK, description="Book the flight for the trip to `destination`.")
    def book_flight(destination: str, ctx: Context) -> str:
        effects.record(BOOK, {"destination": destination}, fence(ctx))
        return f"booked a flight to {destination}"

    @server.tool(name=WEATHER, description="Look up the weather at `destination`.")
    def check_weather(destination: str, ctx: Context) -> str:
        effects.record(WEATHER, {"destination": destination}, fence(ctx))
        return f"weather at {destination}: sunny"

    return server


if __name__ == "__main__":
    # Warnings only (the server would log each call it serves on the suite's stderr).
    logging.basicConfig(level=logging.WARNING)
    build(Effects(Path(sys.argv[1]))).run("stdio")
