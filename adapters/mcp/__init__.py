"""planfence for MCP: a proxy that passes every `tools/call` through the PlanFence gate, and
the same gate as middleware inside an MCP server (`PlanfenceServerMiddleware`,
`PlanfenceFastMCPMiddleware`).

    async with open_proxy(gate, stdio_upstream(["mcp-server-git", "--repository", "."])) as (
        proxy,
        server,
    ):
        ...

The `_meta` keys (`META_PLAN`, `META_AGENT`, `META_DECISION`, `META_REFUSAL`, `META_FENCE`: the
fencing token an allowed call carries to the upstream tool) need nothing
installed; the proxy needs the `mcp` extra, and its names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.adapters._lazy import lazy_exports

from .meta import META_FENCE

if TYPE_CHECKING:
    from .fastmcp_gate import PlanfenceFastMCPMiddleware
    from .in_server import PlanfenceServerMiddleware
    from .links import UpstreamFailure
    from .proxy import PlanfenceProxy, open_proxy
    from .upstream import stdio_upstream

_EXPORTS = {
    "PlanfenceFastMCPMiddleware": "fastmcp_gate",
    "PlanfenceServerMiddleware": "in_server",
    "PlanfenceProxy": "proxy",
    "open_proxy": "proxy",
    "UpstreamFailure": "upstream",
    "stdio_upstream": "upstream",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = [
    "META_FENCE",
    "PlanfenceFastMCPMiddleware",
    "PlanfenceProxy",
    "PlanfenceServerMiddleware",
    "UpstreamFailure",
    "open_proxy",
    "stdio_upstream",
]
