"""Event-loop-native stdin/stdout for the proxy's stdio front.

The SDK's default stdio server reads and writes through worker threads: one thread hop per line
read and two per message written. A proxy pays that on every call on top of the upstream's own
cost, so when stdin and stdout are pipes (as MCP clients launch servers) the proxy reads and
writes them on the event loop instead. Like the SDK, it moves the protocol off fd 0 and fd 1
while serving, so stray output from libraries goes to stderr instead of corrupting the wire.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

_LINE_LIMIT = 64 * 1024 * 1024  # one JSON-RPC message per line; large tool results are legal


class _PipeLines:
    """Async iteration over the lines of a pipe, as `stdio_server` reads its stdin."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> _PipeLines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class _PipeWriter:
    """`write` / `flush` over a pipe, as `stdio_server` writes its stdout."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@asynccontextmanager
async def native_stdio() -> AsyncIterator[tuple[Any, Any] | None]:
    """Yield (stdin, stdout) objects for `stdio_server(stdin, stdout)`, or None when stdin or
    stdout is not a pipe (a terminal, a file), in which case the SDK's own handling is used."""
    if sys.platform == "win32" or not (_is_pipe(0) and _is_pipe(1)):
        yield None
        return
    loop = asyncio.get_running_loop()
    # Private copies of the protocol descriptors; fd 0 then reads EOF and fd 1 goes to stderr.
    in_fd, out_fd = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout.flush()
    os.dup2(2, 1)
    reader = asyncio.StreamReader(limit=_LINE_LIMIT)
    in_file, out_file = os.fdopen(in_fd, "rb", buffering=0), os.fdopen(out_fd, "wb", buffering=0)
    read_transport: asyncio.BaseTransport | None = None
    write_transport: asyncio.WriteTransport | None = None
    try:
        read_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), in_file
        )
        write_transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, out_file
        )
        writer = asyncio.StreamWriter(write_transport, protocol, None, loop)
        yield _PipeLines(reader), _PipeWriter(writer)
    finally:
        if write_transport is not None:
            write_transport.close()
        else:
            out_file.close()
        if read_transport is not None:
            read_transport.close()
        else:
            in_file.close()
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)
