"""Eager pushes over HTTP: a replica acknowledges only signed updates meant for it, and an
`EagerSync` write returns once every replica acknowledged. In process (ASGI), no clock."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from planfence.adapters.owner_service import Keyring
from planfence.adapters.owner_service.wire import signature
from planfence.demos.baselines import EagerReplica, EagerSync
from planfence.demos.bench.replay import PUSH_PURPOSE, Pusher, PushRefused, create_replica_app
from planfence.shared_memory import AsyncStore, Change, Record, canonical_json, open_async_store

REPLICAS = ("executor-0", "executor-1", "executor-2")
KEYRING = Keyring(
    {name: f"secret-of-{name}-0123456789" for name in (*REPLICAS, "owner-0", "outsider")}
)


class Router(httpx.AsyncBaseTransport):
    """Sends each request to the replica app named by its host."""

    def __init__(self) -> None:
        self.apps = {
            name: httpx.ASGITransport(create_replica_app(name, KEYRING)) for name in REPLICAS
        }

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.apps[request.url.host].handle_async_request(request)


URLS = {name: f"http://{name}" for name in REPLICAS}


@pytest.fixture
async def store() -> AsyncIterator[AsyncStore]:
    s = await open_async_store("memory://")
    try:
        yield s
    finally:
        await s.aclose()


def update(key: str = "rp/x/k00", value: object = None) -> tuple[Change, Record]:
    record = Record.create(key, value if value is not None else {"n": 1}, author="owner-0")
    change = Change(7, key, "head", record.id, None, "owner-0", "owner-0", "2026-01-01T00:00:00Z")
    return change, record


async def received(client: httpx.AsyncClient, name: str) -> int:
    count: int = (await client.get(f"{URLS[name]}/health")).json()["received"]
    return count


async def test_a_write_counts_after_every_replica_acknowledged(store: AsyncStore) -> None:
    router = Router()
    pusher = Pusher(URLS, KEYRING, transport=router)
    sync = EagerSync(store, push=pusher.push)
    replicas = [sync.register() for _ in REPLICAS]
    for replica, name in zip(replicas, REPLICAS, strict=True):
        pusher.bind(replica, name)
    await store.own("rp/x/k00", "owner-0")
    first = await store.put("rp/x/k00", {"n": 0}, author="owner-0")
    try:
        record = await sync.put("rp/x/k00", {"n": 1}, author="owner-0", parents=[first.id])
        async with httpx.AsyncClient(transport=router) as client:
            assert [await received(client, n) for n in REPLICAS] == [1, 1, 1]
    finally:
        await pusher.aclose()
    assert all(r.heads["rp/x/k00"] == record.id for r in replicas)
    assert pusher.requests == 3 and pusher.bytes > 3 * len(json.dumps(record.value))
    assert sync.messages == 3


async def test_a_replica_refuses_a_push_meant_for_another() -> None:
    pusher = Pusher({"executor-0": URLS["executor-1"]}, KEYRING, transport=Router())
    replica = EagerReplica()
    pusher.bind(replica, "executor-0")
    change, record = update()
    try:
        with pytest.raises(PushRefused, match="wrong_replica"):
            await pusher.push(replica, change, record)
    finally:
        await pusher.aclose()


def signed(fields: dict[str, object], signer: str) -> bytes:
    sig = signature(KEYRING[signer], PUSH_PURPOSE, fields)
    return canonical_json({**fields, "sig": sig}).encode()  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("tamper", "status", "error"),
    [
        ("none", 200, None),
        ("signer", 401, "bad_signature"),
        ("writer", 401, "unknown_writer"),
        ("record", 400, "malformed"),
        ("mismatch", 400, "record_mismatch"),
        ("garbage", 400, "malformed"),
    ],
)
async def test_the_replica_acknowledges_only_verified_updates(
    tamper: str, status: int, error: str | None
) -> None:
    change, record = update()
    fields: dict[str, object] = {
        "writer": "owner-0",
        "replica": "executor-0",
        "change": change.to_dict(),
        "record": record.to_dict(),
    }
    signer = "owner-0"
    if tamper == "signer":
        signer = "outsider"
    elif tamper == "writer":
        fields["writer"] = "stranger"
    elif tamper == "record":
        fields["record"] = {**record.to_dict(), "value": {"n": 2}}  # no longer hashes to its id
    elif tamper == "mismatch":
        _, other = update(value={"n": 3})
        fields["record"] = other.to_dict()
    body = b"{not json" if tamper == "garbage" else signed(fields, signer)
    transport = httpx.ASGITransport(create_replica_app("executor-0", KEYRING))
    async with httpx.AsyncClient(transport=transport, base_url="http://executor-0") as client:
        response = await client.post("/push", content=body)
        assert response.status_code == status
        if error is None:
            assert response.json() == {"replica": "executor-0", "seq": 7}
            assert (await client.get("/health")).json()["received"] == 1
        else:
            assert response.json()["error"] == error
            assert (await client.get("/health")).json()["received"] == 0
