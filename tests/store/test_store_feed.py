"""Change feed across processes, LISTEN/NOTIFY wake-up, and the replica that follows the feed."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

from store_helpers import needs_sql

from planfence.shared_memory import AsyncStore, Change, create_async_store

KEY = "feed/key"

WRITER = textwrap.dedent(
    """
    import sys, time
    from planfence.shared_memory import open_store
    url, key, n, delay = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    with open_store(url) as store:
        for i in range(n):
            store.put(key, {"i": i}, author="writer")
            time.sleep(delay)
    """
)


def start_writer(url: str, n: int, delay: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, url, KEY, str(n), str(delay)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


async def collect_heads(store: AsyncStore, since: int, n: int, timeout: float) -> list[Change]:
    out: list[Change] = []
    async with asyncio.timeout(timeout):
        async for change in store.subscribe(since, idle_timeout=timeout):
            out.append(change)
            if len(out) == n:
                break
    return out


def assert_linear(changes: list[Change], store_head: str | None) -> None:
    assert [c.seq for c in changes] == sorted({c.seq for c in changes})
    previous = None
    for c in changes:
        assert c.kind == "head"
        assert c.previous == previous
        previous = c.head
    assert previous == store_head


async def test_another_process_writing_nothing_lost(astore: AsyncStore, store_url: str) -> None:
    needs_sql(store_url)
    await astore.own(KEY, "writer")
    since = await astore.last_seq()
    proc = start_writer(store_url, 25, 0.005)
    try:
        changes = await collect_heads(astore, since, 25, timeout=60)
    finally:
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    assert len(changes) == 25
    assert_linear(changes, await astore.head(KEY))
    values = await astore.get_many([c.head for c in changes if c.head])
    assert [values[c.head].value["i"] for c in changes if c.head] == list(range(25))


async def test_postgres_notify_wakes_a_slow_poller(pg_url: str) -> None:
    """With an hour-long poll interval only a NOTIFY can deliver a change before the test's
    hang guard gives up."""
    reader = create_async_store(pg_url)
    async with reader:
        await reader.own(KEY, "writer")
        since = await reader.last_seq()
        reader.poll_interval = 3600.0
        loop = asyncio.get_running_loop()

        async def got_one() -> float:
            async for _ in reader.subscribe(since, idle_timeout=3600):
                return loop.time()
            raise AssertionError("idle")

        task = asyncio.create_task(got_one())
        await asyncio.sleep(0.5)  # the reader is now waiting on LISTEN
        proc = start_writer(pg_url, 1, 0)
        _, err = await asyncio.to_thread(proc.communicate, timeout=30)
        assert proc.returncode == 0, err.decode()
        await asyncio.wait_for(task, 60)  # a hang guard, not a speed check


async def test_postgres_lost_listener_loses_nothing(pg_url: str) -> None:
    """Kill the LISTEN connection mid-stream: the reader opens a new one that LISTENs (another
    server backend), and the changes after it arrive with an hour-long poll interval, so only a
    NOTIFY on the new listener can deliver them; nothing is missed or repeated."""
    import psycopg

    admin_url = pg_url.split("?")[0]
    reader = create_async_store(pg_url)
    writer = create_async_store(pg_url)
    async with reader, writer:
        await writer.own(KEY, "writer")
        since = await reader.last_seq()
        reader.poll_interval = 0.5
        seen: list[Change] = []

        async def follow() -> None:
            async for change in reader.subscribe(since, idle_timeout=3600):
                seen.append(change)
                if len(seen) == 10:
                    return

        def listening(pid: int | None) -> bool:
            with psycopg.connect(admin_url, autocommit=True) as admin:
                row = admin.execute(
                    "SELECT state, query FROM pg_stat_activity WHERE pid = %s", (pid,)
                ).fetchone()
            return row is not None and row[0] == "idle" and row[1].startswith("LISTEN")

        async def listener_pid() -> int | None:
            listener = reader._listener  # type: ignore[attr-defined]
            return None if listener is None or listener.closed else listener.info.backend_pid

        task = asyncio.create_task(follow())
        for i in range(5):
            await writer.put(KEY, i, author="writer")
            await asyncio.sleep(0.05)

        async def listener_up(not_pid: int | None = None) -> int:
            """Wait for the reader's listener (another than `not_pid`) to have run its LISTEN."""
            async with asyncio.timeout(30):  # a hang guard, not a speed check
                while True:
                    pid = await listener_pid()
                    if pid not in (None, not_pid) and await asyncio.to_thread(listening, pid):
                        assert pid is not None
                        return pid
                    await asyncio.sleep(0.05)  # the server's state is polled

        killed = await listener_up()
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (killed,))
        await listener_up(not_pid=killed)  # the reader reconnected and LISTENs again
        reader.poll_interval = 3600.0  # from here on only a NOTIFY wakes the reader
        for i in range(5, 10):
            await writer.put(KEY, i, author="writer")
        await asyncio.wait_for(task, 30)
        assert_linear(seen, await writer.head(KEY))
        assert [c.seq for c in seen] == list(range(since + 1, since + 11))
