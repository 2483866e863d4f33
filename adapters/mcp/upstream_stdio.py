"""The stdio transport to the upstream (a child process, one JSON-RPC message per line each way),
and how an upstream that cannot be reached is named in the error."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any

from planfence.shared_memory.urls import redact_url

from . import jsonrpc as rpc

if TYPE_CHECKING:
    from .upstream import StdioTarget, Upstream, UpstreamTarget

logger = logging.getLogger("planfence.mcp")
LINE_LIMIT = 64 * 1024 * 1024  # one JSON-RPC message per line; large tool results are legal


class StdioLink:
    """The upstream as a child process: one JSON-RPC message per line each way."""

    def __init__(self, upstream: Upstream, target: StdioTarget) -> None:
        self.upstream = upstream
        self.target = target
        self.alive = False
        self.process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            self.target.command,
            *self.target.args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=self.target.env,
            cwd=self.target.cwd,
            limit=LINE_LIMIT,
        )
        self.alive = True
        self._reader = asyncio.get_running_loop().create_task(self._read())

    def handshake_done(self, version: str) -> None:
        return None

    async def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        out = self.process.stdout
        try:
            while True:
                line = await out.readline()
                if not line:
                    break
                if line.strip():
                    self.upstream.deliver(line, None)
        except (ValueError, OSError):  # a line over the limit, or the pipe broke
            logger.warning("the upstream's output could not be read", exc_info=True)
        finally:
            self.alive = False
            self.upstream.dead(self)

    def send(self, message: dict[str, Any], raw: bytes | None, related: Any) -> None:
        assert self.process is not None and self.process.stdin is not None
        data = raw.rstrip(b"\r\n") if raw is not None else rpc.encode(message)
        if b"\n" in data:  # a message sent over HTTP may span lines; one line here
            data = rpc.encode(message)
        try:
            self.process.stdin.writelines((data, b"\n"))  # no copy of a large message
        except (OSError, RuntimeError) as exc:
            from .upstream import UPSTREAM_UNAVAILABLE, UpstreamFailure

            self.alive = False
            raise UpstreamFailure(UPSTREAM_UNAVAILABLE, "the upstream server went away") from exc

    def abort(self, upstream_id: Any) -> bool:
        return False  # a stdio upstream is told with `notifications/cancelled`

    async def close(self) -> None:
        self.alive = False
        process = self.process
        if process is None:
            return
        if process.stdin is not None and not process.stdin.is_closing():
            process.stdin.close()
        try:
            await asyncio.wait_for(asyncio.shield(process.wait()), 2.0)
        except TimeoutError:
            for stop in (process.terminate, process.kill):
                try:
                    stop()
                    await asyncio.wait_for(asyncio.shield(process.wait()), 2.0)
                    break
                except (ProcessLookupError, TimeoutError):
                    continue
        if self._reader is not None:
            self._reader.cancel()


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
