"""The relay itself: bytes cross it intact both ways, and an owner-head request works through it.

A fast synthetic trace (one packet per millisecond) keeps these quick; nothing here asserts time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import uvicorn

from planfence.adapters.owner_service import Keyring
from planfence.adapters.owner_service.server import create_app
from planfence.demos.bench.harness.wire import CountedOwnerHeads
from planfence.demos.bench.netem.relay import Link, LinkRelay
from planfence.demos.bench.netem.trace import Trace
from planfence.shared_memory import create_async_store

FAST = "1\n"


def fast_link(tmp_path: Path, **kwargs: float) -> Link:
    """A 12 Mbit/s link both ways, built from trace files as a user would pass them."""
    up, down = tmp_path / "fast.up", tmp_path / "fast.down"
    up.write_text(FAST)
    down.write_text(FAST)
    return Link(Trace.load(up), Trace.load(down), delay_ms=kwargs.pop("delay_ms", 2), **kwargs)


@contextlib.asynccontextmanager
async def tagging_server() -> AsyncIterator[int]:
    """Sends each connection a banner, then echoes what it reads: what comes back shows both
    directions (the banner only crossed target -> client, the echo crossed both ways)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(b"HELLO" * 4000)  # 20 000 bytes target -> client before any echo
            while data := await reader.read(1 << 14):
                writer.write(data)
                await writer.drain()
            writer.write_eof()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def read_all(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.read(), timeout=30)


async def test_relay_delivers_bytes_intact_in_both_directions(tmp_path: Path) -> None:
    link = fast_link(tmp_path)
    payload = os.urandom(100_000)  # 67 packets up, as many back
    async with tagging_server() as port, LinkRelay(link, "127.0.0.1", port) as relay:
        reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
        try:
            writer.write(payload)
            await writer.drain()
            writer.write_eof()  # the half-close crosses the relay too
            received = await read_all(reader)
        finally:
            writer.close()
            await writer.wait_closed()
    assert received == b"HELLO" * 4000 + payload
    assert relay.connections == 1
    assert link.up.packets == 67
    assert link.down.packets >= 80  # 120 000 bytes back, in packets cut where reads fell


async def test_relay_carries_several_connections_at_once(tmp_path: Path) -> None:
    link = fast_link(tmp_path, loss=0.2, seed=3)  # loss only delays: bytes still arrive intact

    async def one(relay_port: int, size: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", relay_port)
        try:
            writer.write(bytes(range(256)) * (size // 256))
            writer.write_eof()
            return await read_all(reader)
        finally:
            writer.close()
            await writer.wait_closed()

    async with tagging_server() as port, LinkRelay(link, "127.0.0.1", port) as relay:
        sizes = (256, 4096, 32768)
        answers = await asyncio.gather(*(one(relay.port, n) for n in sizes))
    for n, answer in zip(sizes, answers, strict=True):
        assert answer == b"HELLO" * 4000 + bytes(range(256)) * (n // 256)
    assert relay.connections == 3
    assert link.up.lost + link.down.lost > 0


async def test_a_client_to_an_unreachable_target_is_closed(tmp_path: Path) -> None:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # bound, never listening
        async with LinkRelay(fast_link(tmp_path), "127.0.0.1", dead) as relay:
            reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
            try:
                assert await read_all(reader) == b""
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()


async def test_relay_closes_open_connections_when_it_stops(tmp_path: Path) -> None:
    async with tagging_server() as port:
        relay = await LinkRelay(fast_link(tmp_path), "127.0.0.1", port).start()
        reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
        try:
            await asyncio.wait_for(reader.readexactly(5), timeout=30)
            await relay.aclose()
            await read_all(reader)  # ends: the relay closed its side
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


@contextlib.asynccontextmanager
async def owner_service(store_url: str, keyring: Keyring, agent: str) -> AsyncIterator[int]:
    """`agent`'s owner service served in this event loop on a free loopback port."""
    config = uvicorn.Config(
        create_app(agent, store_url, keyring),
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="on",
    )
    server = uvicorn.Server(config)
    task = asyncio.get_running_loop().create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
                pytest.fail("the owner service stopped before it started")
            await asyncio.sleep(0.01)
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        await task


async def test_an_owner_head_request_succeeds_through_the_link(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    store = create_async_store(store_url)
    await store.setup()
    try:
        await store.own("trip/42/budget", "reviser")
        record = await store.put("trip/42/budget", {"eur": 900}, author="reviser")
    finally:
        await store.aclose()
    keyring = Keyring(
        {a: secrets.token_hex(24) for a in ("reviser", "executor")}, source="<test keyring>"
    )
    link = fast_link(tmp_path, delay_ms=5, loss=0.1, seed=2)
    async with (
        owner_service(store_url, keyring, "reviser") as port,
        LinkRelay(link, "127.0.0.1", port) as relay,
    ):
        heads = CountedOwnerHeads({"reviser": relay.url}, keyring, agent="executor", timeout=30)
        try:
            for _ in range(3):
                answers = await heads.heads({"reviser": ("trip/42/budget",)})
                assert answers["trip/42/budget"].error is None
                assert answers["trip/42/budget"].head == record.id
        finally:
            await heads.aclose()
    assert heads.stats.requests == 3
    assert link.up.packets >= 3 and link.down.packets >= 3
