"""The upstream's tools as the proxy last saw them: names, input schemas, output schemas.

A refusal must be a valid result for the tool it refuses, and whether it may carry
`structuredContent` depends on the tool's `outputSchema` (see `results.py`). The catalog learns
the tool list at proxy start (or at the first refusal) and from every `tools/list` answer that
passes through: a client learns of a changed tool list through the proxy, so the catalog learns
it too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

import anyio

logger = logging.getLogger("planfence.mcp")

MAX_PAGES = 100


class Lister(Protocol):
    """What the catalog needs of the upstream connection (`Upstream` has it)."""

    request_timeout: float | None

    async def request(
        self, method: str, params: Mapping[str, Any] | None, *, read_timeout: float | None = ...
    ) -> dict[str, Any]: ...


class ToolCatalog:
    """Tool descriptions by name, as the upstream lists them."""

    def __init__(self, upstream: Lister) -> None:
        self._upstream = upstream
        self._tools: dict[str, Mapping[str, Any]] = {}
        self.loaded = False

    def observe(self, listing: Mapping[str, Any]) -> None:
        """Learn from one `tools/list` result page (the proxy passes them through)."""
        tools = listing.get("tools")
        if not isinstance(tools, list):
            return
        for tool in tools:
            if isinstance(tool, Mapping) and isinstance(tool.get("name"), str):
                self._tools[tool["name"]] = tool
        self.loaded = True

    async def refresh(self) -> bool:
        """List every page of the upstream's tools again; False if the upstream did not answer."""
        fresh: dict[str, Mapping[str, Any]] = {}
        cursor: str | None = None
        limit = self._upstream.request_timeout
        try:
            with anyio.fail_after(limit):  # connecting to a restarted upstream included
                for _ in range(MAX_PAGES):
                    page = await self._upstream.request(
                        "tools/list", {"cursor": cursor} if cursor else None, read_timeout=limit
                    )
                    for tool in page.get("tools") or []:
                        if isinstance(tool, Mapping) and isinstance(tool.get("name"), str):
                            fresh[tool["name"]] = tool
                    cursor = page.get("nextCursor")
                    if not isinstance(cursor, str):
                        break
        except Exception:
            logger.debug("could not list the upstream's tools", exc_info=True)
            return False
        self._tools = fresh
        self.loaded = True
        return True

    @property
    def tools(self) -> Mapping[str, Mapping[str, Any]]:
        return dict(self._tools)

    def input_schema(self, name: str) -> Any:
        """The tool's input schema as last listed (None: not known)."""
        tool = self._tools.get(name)
        return tool.get("inputSchema") if tool is not None else None

    async def output_schema(self, name: str) -> bool | None:
        """Whether tool `name` declares an `outputSchema`; None when that cannot be told (the
        tools were never listed and the upstream does not answer now)."""
        if not self.loaded and not await self.refresh():
            return None
        tool = self._tools.get(name)
        return tool is not None and isinstance(tool.get("outputSchema"), Mapping)


__all__ = ["ToolCatalog"]
