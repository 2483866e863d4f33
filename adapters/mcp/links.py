"""What the upstream transports (`upstream_stdio`, `upstream_http`) and the upstream they serve
(`upstream.Upstream`) share: the targets, the failure codes, the `Link` a transport is and the
`LinkOwner` it reports to, and how an upstream that cannot be reached is named in the error.
Nothing here imports the transports or the upstream, so each of them imports this alone."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from planfence.shared_memory import PlanfenceError
from planfence.shared_memory.urls import redact_url

# Why a request the gate allowed got no upstream result (`UpstreamFailure.code`).
UPSTREAM_TIMEOUT = "upstream_timeout"
UPSTREAM_UNAVAILABLE = "upstream_unavailable"
UPSTREAM_ERROR = "upstream_error"


@dataclass(frozen=True)
class StdioTarget:
    """A stdio upstream: the command the proxy starts, as an MCP client would."""

    command: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    cwd: str | None = None


UpstreamTarget = StdioTarget | str


class UpstreamFailure(PlanfenceError):
    """The upstream could not answer: it is gone, it timed out, or it answered with an error."""

    def __init__(self, code: str, message: str, error: Mapping[str, Any] | None = None) -> None:
        self.code = code
        self.error = dict(error) if error is not None else None  # the JSON-RPC error, if any
        super().__init__(message)


class Link(Protocol):
    """A transport to the upstream (stdio pipes, or streamable HTTP)."""

    alive: bool

    async def start(self) -> None: ...

    def send(self, message: dict[str, Any], raw: bytes | None, related: Any) -> None: ...

    def abort(self, upstream_id: Any) -> bool: ...

    def handshake_done(self, version: str) -> None: ...

    async def close(self) -> None: ...


class LinkOwner(Protocol):
    """What a transport reports to (the upstream it serves)."""

    modern: bool  # the upstream speaks the 2026 era
    tool_schema: Callable[[str], Any]  # a tool's input schema, by its name

    @property
    def pending(self) -> Mapping[Any, Any]:
        """The requests in flight, by upstream id."""
        ...

    def deliver(self, raw: bytes, related: Any = None) -> None: ...

    def fail(self, entry: Any, failure: UpstreamFailure) -> None: ...

    def dead(self, link: Link) -> None: ...


def _first(exc: BaseException) -> BaseException:
    while (inner := getattr(exc, "exceptions", None)) and isinstance(inner[0], BaseException):
        exc = inner[0]
    return exc


def _leaf(exc: BaseException) -> str:
    """The first underlying error of a (possibly nested) exception group, as text."""
    return str(_first(exc)) or type(_first(exc)).__name__


def named(target: UpstreamTarget) -> str:
    """The upstream as its user gave it: the URL (its password hidden) or the command."""
    if isinstance(target, str):
        return f"at {redact_url(target)}"
    return f"({target.command})"


def cannot_connect(target: UpstreamTarget, exc: BaseException) -> str:
    """Why the upstream could not be reached, naming it; a command that is not found says
    where it was looked for (a desktop client starts the proxy with a PATH of its own)."""
    if not isinstance(target, str) and isinstance(_first(exc), FileNotFoundError):
        command = target.command
        if os.sep in command:
            return f"cannot start the upstream server: {command} does not exist"
        return (
            f"cannot start the upstream server: {command!r} is not on the PATH the proxy was "
            "started with (an MCP client that starts the proxy has a PATH of its own): give its "
            "absolute path"
        )
    if isinstance(target, str):
        return f"cannot connect to the upstream server at {redact_url(target)}: {_leaf(exc)}"
    return f"cannot start the upstream server ({target.command}): {_leaf(exc)}"
