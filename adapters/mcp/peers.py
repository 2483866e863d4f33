"""The proxy's clients: one `Peer` per client connection, and the `Origin` of each request the
proxy forwards upstream (what upstream messages are matched against)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from planfence.shared_memory.extras import extra_imports

with extra_imports("mcp", "the MCP proxy"):
    import mcp  # noqa: F401  (the `mcp` extra)

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

# The level a handshake-era client receives logs at until it calls logging/setLevel: every
# level, as a handshake-era server sends them unconditionally.
DEFAULT_LEGACY_LOG_LEVEL: types.LoggingLevel = "debug"


def is_modern(protocol_version: str | None) -> bool:
    return protocol_version in MODERN_PROTOCOL_VERSIONS


@dataclass(eq=False)
class Peer:
    """One client connection of the proxy.

    `session` is the latest request's session: its connection-wide channel is the connection's.
    """

    session: Any
    protocol_version: str
    log_level: types.LoggingLevel | None = None
    subscriptions: set[str] = field(default_factory=set)

    @property
    def modern(self) -> bool:
        return is_modern(self.protocol_version)


@dataclass(eq=False)
class Origin:
    """A client request the proxy is forwarding upstream."""

    ctx: ServerRequestContext[Any]
    peer: Peer
    # For a gated `tools/call`: judges the call again (the plan may have gone stale while the
    # client answered an upstream question); True while the call is still allowed.
    recheck: Callable[[], Awaitable[bool]] | None = None
    # The fencing token of the latest allow, for the `_meta` of each retry (None: no token).
    fence: Callable[[], Mapping[str, Any] | None] | None = None


ORIGIN: ContextVar[Origin | None] = ContextVar("planfence_mcp_origin", default=None)


@contextmanager
def no_origin() -> Iterator[None]:
    """Run without a current origin (tasks started here must not inherit the caller's)."""
    token = ORIGIN.set(None)
    try:
        yield
    finally:
        ORIGIN.reset(token)


_LEVELS: tuple[types.LoggingLevel, ...] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)


def levels_from(level: str) -> frozenset[types.LoggingLevel]:
    if level not in _LEVELS:
        return frozenset(_LEVELS)
    return frozenset(_LEVELS[_LEVELS.index(level) :])
