"""PostgreSQL connections: a store keeps working after the server drops its connections, and a
server it cannot use is one typed error line that names the real cause."""

from __future__ import annotations

import logging
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from planfence.plugins.gate import Decision, Gate, Policy, ToolCall, create_plan, find_decisions
from planfence.shared_memory import StoreUnavailableError, open_async_store

pytestmark = pytest.mark.postgres

POLICY = Policy().declare("ship", ["order/{order_id}"])


def _with_app_name(url: str, name: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}application_name={name}"


def _terminate(admin_url: str, app_name: str, *, wait: bool = True) -> int:
    """End every server backend of the store's pool (and only those); return how many.

    With `wait`, return once they have exited, so their connections are already closed when the
    store next looks; without, the store may still be about to use one of them.
    """
    conninfo = urlunsplit(urlsplit(admin_url)._replace(query=""))
    with psycopg.connect(conninfo, autocommit=True) as conn:
        pids = [
            pid
            for (pid,) in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app_name,)
            ).fetchall()
        ]
        conn.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
        deadline = time.monotonic() + 10
        while wait and time.monotonic() < deadline:
            gone = conn.execute(
                "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s))", (pids,)
            ).fetchone()
            if gone and gone[0]:
                break
            time.sleep(0.005)
    return len(pids)


async def test_operations_succeed_after_the_server_drops_the_pool(pg_url: str) -> None:
    app = f"pf_test_{uuid.uuid4().hex[:10]}"
    store = await open_async_store(_with_app_name(pg_url, app))
    try:
        await store.own("order/7", "sales")
        order = await store.put("order/7", {"n": 1}, author="sales")
        plan = await create_plan(store, author="planner", parents=[order.id], value="ship")
        for n in range(3):
            # Every operation must succeed on the first try after the drop: reads, writes, the
            # one-round-trip snapshot the gate uses, and the decision log.
            assert _terminate(pg_url, app) >= 1
            assert await store.head("order/7") == order.id
            assert _terminate(pg_url, app) >= 1
            order2 = await store.put("order/7", {"n": n + 2}, author="sales")
            assert _terminate(pg_url, app) >= 1
            assert (await store.get(order2.id)).value == {"n": n + 2}
            assert _terminate(pg_url, app) >= 1
            v = await Gate(store, POLICY).check(ToolCall("ship", {"order_id": "7"}, plan.id))
            assert v.reason == "stale_dependencies"  # decided and recorded, not store_unavailable
            assert _terminate(pg_url, app) >= 1
            await store.log(Decision(source="test", verdict="allow", tool=f"t{n}"))
            assert _terminate(pg_url, app) >= 1
            assert [d.tool for d in await find_decisions(store, source="test", limit=1)] == [
                f"t{n}"
            ]
            # A read may even be sent on a connection the server is just closing: it runs again.
            assert _terminate(pg_url, app, wait=False) >= 1
            assert await store.head("order/7") == order2.id
            plan = await create_plan(store, author="planner", parents=[order2.id], value="ship")
            order = order2
    finally:
        await store.aclose()


def _replace(url: str, *, user: str | None = None, db: str | None = None) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc
    if user is not None:
        netloc = f"{user}@{netloc.rpartition('@')[2]}"
    path = f"/{db}" if db is not None else parts.path
    return urlunsplit(parts._replace(netloc=netloc, path=path, query=""))


@pytest.mark.parametrize(
    ("make_url", "cause"),
    [
        (lambda u: "postgresql://planner:s3cretpw@127.0.0.1:1/test", "connection refused"),
        (lambda u: _replace(u, user="nosuchrole:s3cretpw"), 'role "nosuchrole" does not exist'),
        (lambda u: _replace(u, db="nosuchdb"), 'database "nosuchdb" does not exist'),
    ],
    ids=["unreachable", "missing-role", "missing-database"],
)
async def test_an_unusable_server_is_one_line_naming_the_cause(
    pg_url: str, caplog: pytest.LogCaptureFixture, make_url: object, cause: str
) -> None:
    url = make_url(pg_url)  # type: ignore[operator]
    caplog.set_level(logging.DEBUG)
    with pytest.raises(StoreUnavailableError) as info:
        await open_async_store(url)
    message = str(info.value)
    host = urlsplit(url).hostname
    port = urlsplit(url).port
    assert message.startswith(f"cannot connect to PostgreSQL at {host}:{port}: ")
    assert message.endswith(cause)
    assert "\n" not in message
    assert "s3cretpw" not in message
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert noisy == []
