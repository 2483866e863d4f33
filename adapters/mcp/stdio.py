"""Event-loop-native stdin/stdout for the proxy's stdio front.

The SDK's default stdio server reads and writes through worker threads: one thread hop per line
read and two per message written. A proxy pays that on every call on top of the upstream's own
cost, so when stdin and stdout are pipes (as MCP clients launch servers) the proxy reads and
writes them on the event loop instead. Like the SDK, it moves the protocol off fd 0 and fd 1
while serving, so stray output from libraries goes to stderr instead of corrupting the wire.

A terminal is read on the event loop too: a worker thread blocked reading a terminal cannot be
cancelled, so Ctrl-C would wait for the next Enter. The terminal is opened again by name for
this, so the non-blocking mode the event loop needs stays on the proxy's own descriptor and never
reaches the shell that shares the terminal.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
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


def _own_copy(fd: int, flags: int) -> int | None:
    """A descriptor of the proxy's own for the stream at `fd`, or None to leave it to the SDK.

    A pipe or socket is duplicated; a terminal is opened again by name (a separate open file, so
    making it non-blocking does not change the terminal for the shell); anything else (a regular
    file, /dev/null) returns None: reading it never blocks, so the SDK's thread is fine there.
    """
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            return os.dup(fd)
        if stat.S_ISCHR(mode) and os.isatty(fd):
            return os.open(os.ttyname(fd), flags | os.O_NOCTTY)
    except OSError:
        pass
    return None


@asynccontextmanager
async def _divert(fd: int, target: int) -> AsyncIterator[None]:
    """Point `fd` at `target` (another descriptor) while inside, then restore it."""
    saved = os.dup(fd)
    try:
        os.dup2(target, fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


async def _reader(stack: AsyncExitStack, fd: int) -> _PipeLines:
    loop = asyncio.get_running_loop()
    file = os.fdopen(fd, "rb", buffering=0)
    reader = asyncio.StreamReader(limit=_LINE_LIMIT)
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), file
        )
    except BaseException:
        file.close()
        raise
    stack.callback(transport.close)
    return _PipeLines(reader)


async def _writer(stack: AsyncExitStack, fd: int) -> _PipeWriter:
    loop = asyncio.get_running_loop()
    file = os.fdopen(fd, "wb", buffering=0)
    try:
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, file)
    except BaseException:
        file.close()
        raise
    stack.callback(transport.close)
    return _PipeWriter(asyncio.StreamWriter(transport, protocol, None, loop))


@asynccontextmanager
async def native_stdio() -> AsyncIterator[tuple[Any, Any]]:
    """Yield (stdin, stdout) for `stdio_server(stdin, stdout)`: each is read or written on the
    event loop when it is a pipe or a terminal, or None (the SDK's own handling) otherwise."""
    if sys.platform == "win32":
        yield None, None
        return
    async with AsyncExitStack() as stack:
        lines: _PipeLines | None = None
        out: _PipeWriter | None = None
        in_fd = _own_copy(0, os.O_RDONLY)
        if in_fd is not None:
            lines = await _reader(stack, in_fd)
            null = os.open(os.devnull, os.O_RDONLY)
            try:  # fd 0 reads EOF while serving
                await stack.enter_async_context(_divert(0, null))
            finally:
                os.close(null)
        out_fd = _own_copy(1, os.O_WRONLY)
        if out_fd is not None:
            out = await _writer(stack, out_fd)
            sys.stdout.flush()
            await stack.enter_async_context(_divert(1, 2))  # stray output goes to stderr
        yield lines, out
