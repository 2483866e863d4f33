"""The asyncio shell around the model: a TCP relay that delivers bytes when the model says."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Sequence
from typing import Any

from .model import DEFAULT_DELAY_MS, Direction, Flow
from .trace import Trace


class Link:
    """Both directions of an emulated path, shared by every connection relayed over it.

    `up` carries client -> target bytes, `down` target -> client. Trace time 0 is the moment the
    link is first used (plus `offset_ms`, to replay a later stretch of the trace).
    """

    def __init__(
        self,
        up: Trace,
        down: Trace,
        *,
        delay_ms: float = DEFAULT_DELAY_MS,
        loss: float = 0.0,
        rto_ms: float | None = None,
        seed: int = 0,
        offset_ms: float = 0.0,
        handshake: bool = True,
    ) -> None:
        common: dict[str, Any] = {"delay_ms": delay_ms, "loss": loss, "rto_ms": rto_ms}
        self.up = Direction(up, seed=seed, **common)
        self.down = Direction(down, seed=seed + 1, **common)
        self.delay_ms = delay_ms
        self.offset_ms = offset_ms
        self.handshake = handshake
        self._epoch: float | None = None

    @property
    def started(self) -> bool:
        """Whether trace time has started (the link was used)."""
        return self._epoch is not None

    def now_ms(self) -> float:
        now = asyncio.get_running_loop().time()
        if self._epoch is None:
            self._epoch = now
        return (now - self._epoch) * 1000.0 + self.offset_ms

    def sleep_until(self, t_ms: float) -> Awaitable[None]:
        return asyncio.sleep(max(0.0, (t_ms - self.now_ms()) / 1000.0))


class LinkRelay:
    """Listen on a loopback port, forward each connection to `target`, paced by `link`.

    Use as `async with LinkRelay(link, host, port) as relay:` and connect to `relay.port`.
    """

    def __init__(
        self,
        link: Link,
        target_host: str,
        target_port: int,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.link = link
        self.target = (target_host, target_port)
        self.host = host
        self.port = port
        self.connections = 0
        # how late each write went out after the model's delivery time (the emulator's own error)
        self.late_ms: list[float] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> LinkRelay:
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self.link.now_ms()  # trace time starts now
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> LinkRelay:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.get_running_loop().create_task(self._relay(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        opened = self.link.now_ms()
        target_w: asyncio.StreamWriter | None = None
        pumps: list[asyncio.Task[None]] = []
        try:
            target_r, target_w = await asyncio.open_connection(*self.target)
            rtt = 2 * self.link.delay_ms if self.link.handshake else 0.0
            up = Flow(not_before_ms=opened + rtt)
            loop = asyncio.get_running_loop()
            pumps = [
                loop.create_task(self._pump(client_r, target_w, self.link.up, up)),
                loop.create_task(self._pump(target_r, client_w, self.link.down, Flow())),
            ]
            # both directions run until both end; a failure on either side ends the connection
            await asyncio.wait(pumps, return_when=asyncio.FIRST_EXCEPTION)
        except OSError:
            pass  # the target refused: close the client
        finally:
            # Close both sockets before anything that can be interrupted: a relay cancelled
            # while it is already shutting down must still release them.
            for w in (client_w, target_w):
                if w is not None:
                    w.close()
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for w in (client_w, target_w):
                if w is not None:
                    with contextlib.suppress(OSError):
                        await w.wait_closed()

    async def _pump(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        direction: Direction,
        flow: Flow,
    ) -> None:
        """Read from `src` as fast as it sends; write each packet to `dst` when it is due."""
        due: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

        async def deliver() -> None:
            while (item := await due.get()) is not None:
                at_ms, data = item
                await self.link.sleep_until(at_ms)
                self.late_ms.append(self.link.now_ms() - at_ms)
                dst.write(data)
                await dst.drain()
            if dst.can_write_eof():
                dst.write_eof()

        writer = asyncio.get_running_loop().create_task(deliver())
        try:
            while data := await src.read(1 << 16):
                offset = 0
                for packet in direction.send(len(data), self.link.now_ms(), flow):
                    due.put_nowait((packet.delivery_ms, data[offset : offset + packet.size]))
                    offset += packet.size
            due.put_nowait(None)
            await writer
        finally:
            if not writer.done():
                writer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await writer


async def drained(relays: Sequence[LinkRelay], timeout_s: float = 30.0) -> None:
    """Let the connections the clients closed finish their teardown across the emulated link
    (the far side's close travels the link too) before the relays stop: a relay stopped during a
    teardown can leave that connection's sockets unclosed."""
    open_connections = [task for relay in relays for task in relay._tasks]
    if open_connections:
        await asyncio.wait(open_connections, timeout=timeout_s)
