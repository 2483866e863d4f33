"""The stdio transport to the upstream (a child process, one JSON-RPC message per line each way),
and how an upstream that cannot be reached is named in the error."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from . import jsonrpc as rpc
from .links import UPSTREAM_UNAVAILABLE, LinkOwner, StdioTarget, UpstreamFailure

logger = logging.getLogger("planfence.mcp")
LINE_LIMIT = 64 * 1024 * 1024  # one JSON-RPC message per line; large tool results are legal


class StdioLink:
    """The upstream as a child process: one JSON-RPC message per line each way."""

    def __init__(self, upstream: LinkOwner, target: StdioTarget) -> None:
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
