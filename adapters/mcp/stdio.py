"""The proxy's stdio front: its one client writes a JSON-RPC message per line to the proxy's stdin
and reads the answers from its stdout.

When stdin and stdout are pipes (as MCP clients launch servers) they are read and written on the
event loop, with no thread hop per line. A terminal is read on the event loop too: a worker
thread blocked reading a terminal cannot be cancelled, so Ctrl-C would wait for the next Enter.
The terminal is opened again by name for this, so the non-blocking mode the event loop needs
stays on the proxy's own descriptor and never reaches the shell that shares the terminal.
Anything else (a regular file, /dev/null) is read by a thread. While serving, the protocol is
moved off fd 0 and fd 1, so stray output from libraries goes to stderr instead of corrupting
the wire.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Protocol

from . import jsonrpc as rpc
from .proxy import PlanfenceProxy
from .upstream_stdio import LINE_LIMIT


class Lines(Protocol):
    async def readline(self) -> bytes: ...


class _ThreadLines:
    """Lines of a file that is not a pipe or terminal: reading it never blocks for long."""

    def __init__(self, fd: int) -> None:
        self._file = os.fdopen(fd, "rb", buffering=0, closefd=False)

    async def readline(self) -> bytes:
        return await asyncio.to_thread(self._file.readline, LINE_LIMIT)


async def serve_stdio(proxy: PlanfenceProxy) -> None:
    """Serve the proxy's one client on stdin and stdout until stdin ends."""
    async with _stdio() as (lines, write):

        def deliver(data: bytes, call: Any, final: bool) -> None:
            if data:
                write(data if b"\n" not in data else rpc.encode(rpc.decode(data)))

        peer = proxy.connect(deliver)
        try:
            while True:
                line = await lines.readline()
                if not line:
                    break
                line = line.rstrip(b"\r\n")
                if line.strip():
                    work = proxy.take(peer, line)
                    if work is not None:  # a tools/call being judged: then the next line
                        await work
        finally:
            proxy.disconnect(peer)


def _own_copy(fd: int, flags: int) -> int | None:
    """A descriptor of the proxy's own for the stream at `fd`, or None to read it by thread.

    A pipe or socket is duplicated; a terminal is opened again by name (a separate open file, so
    making it non-blocking does not change the terminal for the shell); anything else (a regular
    file, /dev/null) returns None: reading it never blocks.
    """
    if sys.platform == "win32":
        return None
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


async def _reader(stack: AsyncExitStack, fd: int) -> Lines:
    loop = asyncio.get_running_loop()
    file = os.fdopen(fd, "rb", buffering=0)
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), file
        )
    except BaseException:
        file.close()
        raise
    stack.callback(transport.close)
    return reader


async def _writer(stack: AsyncExitStack, fd: int) -> Callable[[bytes], None]:
    loop = asyncio.get_running_loop()
    file = os.fdopen(fd, "wb", buffering=0)
    try:
        transport, _ = await loop.connect_write_pipe(asyncio.Protocol, file)
    except BaseException:
        file.close()
        raise
    stack.callback(transport.close)

    def write(data: bytes) -> None:
        transport.writelines((data, b"\n"))  # no copy of a large message

    return write


def _blocking_writer(fd: int) -> Callable[[bytes], None]:
    def write(data: bytes) -> None:
        view = memoryview(data + b"\n")
        while view:
            view = view[os.write(fd, view) :]

    return write


@asynccontextmanager
async def _stdio() -> AsyncIterator[tuple[Lines, Callable[[bytes], None]]]:
    async with AsyncExitStack() as stack:
        in_fd = _own_copy(0, os.O_RDONLY)
        if in_fd is not None:
            lines = await _reader(stack, in_fd)
        else:
            lines = _ThreadLines(os.dup(0))
        out_fd = _own_copy(1, os.O_WRONLY)
        if out_fd is not None:
            write = await _writer(stack, out_fd)
        else:
            write = _blocking_writer(os.dup(1))
        if sys.platform != "win32":
            null = os.open(os.devnull, os.O_RDONLY)
            try:  # fd 0 reads EOF while serving
                await stack.enter_async_context(_divert(0, null))
            finally:
                os.close(null)
            sys.stdout.flush()
            await stack.enter_async_context(_divert(1, 2))  # stray output goes to stderr
        yield lines, write
