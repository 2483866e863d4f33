"""Eager pushes over HTTP: a replica acknowledges only its owner's signed head (the Ed25519
signature the store keeps, over key, record id, sequence and epoch), refuses forgeries and
rollbacks, and an `EagerSync` write returns once every replica acknowledged. In process (ASGI),
no clock."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planfence.adapters.owner_service import PublicKeyring, SigningKey
from planfence.demos.baselines import EagerReplica, EagerSync
from planfence.demos.bench.replay.push import Pusher, create_replica_app
from planfence.demos.pushes import PushCheck, PushedHead, PushRefused
from planfence.shared_memory import AsyncStore, KeyState, Record, open_async_store
from planfence.shared_memory.records import canonical_json
from planfence.shared_memory.signing import sign_head

REPLICAS = ("executor-0", "executor-1", "executor-2")
KEYS = {a: SigningKey.generate(a) for a in ("owner-0", "owner-1", "outsider")}
OWNERS = PublicKeyring({"keys": [KEYS[a].public_jwk() for a in ("owner-0", "owner-1")]})
KEY = "rp/x/k00"


class Router(httpx.AsyncBaseTransport):
    """Sends each request to the replica app named by its host."""

    def __init__(self) -> None:
        self.apps = {
            name: httpx.ASGITransport(create_replica_app(name, OWNERS)) for name in REPLICAS
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


def pushed(
    seq: int = 1,
    *,
    value: object = None,
    owner: str = "owner-0",
    signer: str | None = "owner-0",
    epoch: int = 1,
) -> PushedHead:
    """An update of KEY as `owner`'s head at `seq`, signed by `signer` (None: unsigned)."""
    v = value if value is not None else {"n": seq}
    record = Record.create(KEY, v, author=owner, created_at="2026-01-01T00:00:00Z")
    sig = None if signer is None else sign_head(KEYS[signer], KEY, record.id, seq, epoch)
    return PushedHead(KeyState(KEY, owner, record.id, seq, epoch, sig), record, 100 + seq)


def body(push: PushedHead, replica: str = "executor-0") -> bytes:
    return canonical_json({"replica": replica, **push.to_dict()}).encode()


async def post(client: httpx.AsyncClient, push: PushedHead | bytes) -> httpx.Response:
    return await client.post("/push", content=push if isinstance(push, bytes) else body(push))


@pytest.fixture
async def replica() -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(create_replica_app("executor-0", OWNERS))
    async with httpx.AsyncClient(transport=transport, base_url="http://executor-0") as client:
        yield client


async def received(client: httpx.AsyncClient) -> int:
    count: int = (await client.get("/health")).json()["received"]
    return count


async def test_a_write_counts_after_every_replica_verified_the_owners_signed_head(
    store: AsyncStore,
) -> None:
    router = Router()
    pusher = Pusher(URLS, transport=router)
    sync = EagerSync(store, push=pusher.push, signers={"owner-0": KEYS["owner-0"]})
    replicas = [sync.register() for _ in REPLICAS]
    for r, name in zip(replicas, REPLICAS, strict=True):
        pusher.bind(r, name)
    await store.own(KEY, "owner-0")
    first = await store.put(KEY, {"n": 0}, author="owner-0")
    try:
        record = await sync.put(KEY, {"n": 1}, author="owner-0", parents=[first.id])
        async with httpx.AsyncClient(transport=router) as client:
            counts = [(await client.get(f"{URLS[n]}/health")).json()["received"] for n in REPLICAS]
    finally:
        await pusher.aclose()
    assert counts == [1, 1, 1]
    assert all(r.heads[KEY] == record.id for r in replicas)
    # what was pushed is what the store keeps: the owner's signature of that head
    state = (await store.states([KEY]))[KEY]
    assert state.head == record.id and state.version == 2 and state.head_sig
    assert OWNERS.verify(
        "owner-0",
        "planfence-head/1",
        {"key": KEY, "record": record.id, "seq": 2, "epoch": 1},
        state.head_sig,
    )
    # every byte on the wire counts, the signature's among them
    assert pusher.requests == 3
    assert pusher.bytes > 3 * (len(json.dumps(record.to_dict())) + len(state.head_sig))
    assert sync.messages == 3


async def test_an_unsigned_write_is_refused_by_every_replica_and_fails_closed(
    store: AsyncStore,
) -> None:
    router = Router()
    pusher = Pusher(URLS, transport=router)
    sync = EagerSync(store, push=pusher.push)  # the owner does not sign its head
    replicas = [sync.register() for _ in REPLICAS]
    for r, name in zip(replicas, REPLICAS, strict=True):
        pusher.bind(r, name)
    await store.own(KEY, "owner-0")
    first = await store.put(KEY, {"n": 0}, author="owner-0")
    for r in replicas:  # each replica holds a plan that used the first version
        r.heads[KEY] = first.id
        r.plan_uses["plan-a"] = {KEY: frozenset({first.id})}
    try:
        with pytest.raises(PushRefused, match="owner_unauthenticated"):
            await sync.put(KEY, {"n": 1}, author="owner-0", parents=[first.id])
    finally:
        await pusher.aclose()
    for r in replicas:
        assert r.heads[KEY] == first.id  # the unverified head was not taken
        assert r.invalid == {"plan-a": {KEY}}  # and no plan on that key may act


async def test_a_replica_refuses_a_push_meant_for_another() -> None:
    pusher = Pusher({"executor-0": URLS["executor-1"]}, transport=Router())
    r = EagerReplica()
    pusher.bind(r, "executor-0")
    try:
        with pytest.raises(PushRefused, match="wrong_replica"):
            await pusher.push(r, pushed())
    finally:
        await pusher.aclose()


def tampered(how: str) -> PushedHead | bytes:
    good = pushed()
    s = good.state
    if how == "none":
        return good
    if how == "unsigned":
        return pushed(signer=None)
    if how == "outsider":  # a valid signature, by an agent that is not a writer
        return pushed(owner="outsider", signer="outsider")
    if how == "other_owner":  # owner-1's signature on a head that names owner-0
        return pushed(signer="owner-1")
    if how == "record":  # another record under the same signature
        other = Record.create(KEY, {"n": 9}, author="owner-0")
        return PushedHead(replace(s, head=other.id), other, good.feed_seq)
    if how == "seq":
        return replace(good, state=replace(s, version=5))
    if how == "epoch":
        return replace(good, state=replace(s, epoch=2))
    if how == "mismatch":  # a signed head, carrying another record than the one it names
        return replace(good, record=Record.create(KEY, {"n": 9}, author="owner-0"))
    if how == "bad_record":  # a record that does not hash to its id
        data = json.loads(body(good))
        data["record"]["value"] = {"n": 2}
        return canonical_json(data).encode()
    if how == "bad_field":
        data = json.loads(body(good))
        data["head"]["seq"] = "1"
        return canonical_json(data).encode()
    assert how == "garbage"
    return b"{not json"


@pytest.mark.parametrize(
    ("how", "status", "error"),
    [
        ("none", 200, None),
        ("unsigned", 401, "owner_unauthenticated"),
        ("outsider", 401, "owner_unauthenticated"),
        ("other_owner", 401, "owner_unauthenticated"),
        ("record", 401, "owner_unauthenticated"),
        ("seq", 401, "owner_unauthenticated"),
        ("epoch", 401, "owner_unauthenticated"),
        ("mismatch", 400, "record_mismatch"),
        ("bad_record", 400, "malformed"),
        ("bad_field", 400, "malformed"),
        ("garbage", 400, "malformed"),
    ],
)
async def test_the_replica_acknowledges_only_its_owners_signed_heads(
    replica: httpx.AsyncClient, how: str, status: int, error: str | None
) -> None:
    response = await post(replica, tampered(how))
    assert response.status_code == status
    if error is None:
        assert response.json() == {"replica": "executor-0", "seq": 101}
        assert await received(replica) == 1
    else:
        assert response.json()["error"] == error
        assert await received(replica) == 0


async def test_the_replica_refuses_a_rollback_and_a_second_head_for_one_sequence(
    replica: httpx.AsyncClient,
) -> None:
    assert (await post(replica, pushed(1))).status_code == 200
    assert (await post(replica, pushed(2))).status_code == 200
    old = await post(replica, pushed(1))  # a validly signed, older head, replayed
    assert old.status_code == 409 and old.json()["error"] == "head_rollback"
    fork = await post(replica, pushed(2, value={"n": "fork"}))  # the owner's, but another head
    assert fork.status_code == 409 and fork.json()["error"] == "head_rollback"
    again = await post(replica, pushed(2))  # the same signed head again is no rollback
    assert again.status_code == 200
    assert await received(replica) == 3


async def test_within_an_epoch_the_owner_a_replica_accepted_stays_the_owner(
    replica: httpx.AsyncClient,
) -> None:
    assert (await post(replica, pushed(1))).status_code == 200
    # owner-1 signs a later head of the key for the same epoch: owner changes are not signed,
    # so the replica holds on to the owner it accepted
    stolen = await post(replica, pushed(2, owner="owner-1", signer="owner-1"))
    assert stolen.status_code == 401 and stolen.json()["error"] == "owner_unauthenticated"
    # after a transfer (a new epoch) the new owner's signed head counts
    moved = await post(replica, pushed(3, owner="owner-1", signer="owner-1", epoch=2))
    assert moved.status_code == 200


async def test_in_process_replicas_verify_with_the_owners_public_keys(store: AsyncStore) -> None:
    signers = {"owner-0": KEYS["owner-0"], "owner-1": KEYS["outsider"]}  # owner-1's key is wrong
    sync = EagerSync(store, signers=signers, verifier=OWNERS)
    a, b = sync.register(), sync.register()
    for key, owner in (("rp/x/a", "owner-0"), ("rp/x/b", "owner-1")):
        await store.own(key, owner)
    first = await store.put("rp/x/b", {"n": 0}, author="owner-1")
    for r in (a, b):
        r.plan_uses["plan-b"] = {"rp/x/b": frozenset({first.id})}
    ok = await sync.put("rp/x/a", {"n": 1}, author="owner-0")
    assert a.heads["rp/x/a"] == b.heads["rp/x/a"] == ok.id
    with pytest.raises(PushRefused, match="owner_unauthenticated"):
        await sync.put("rp/x/b", {"n": 1}, author="owner-1", parents=[first.id])
    assert "rp/x/b" not in a.heads and "rp/x/b" not in b.heads
    assert a.invalid == b.invalid == {"plan-b": {"rp/x/b"}}


PUSHES = st.lists(st.tuples(st.integers(1, 6), st.booleans()), max_size=12)


def replay_pushes(r: EagerReplica, pushes: list[tuple[int, bool]]) -> list[int]:
    """Hand `r` the pushes (sequence, forged?); return the sequences it took, in order."""
    taken = []
    for seq, forged in pushes:
        try:
            r.receive(pushed(seq, signer="outsider" if forged else "owner-0"))
        except PushRefused:
            continue
        taken.append(-seq if forged else seq)
    return taken


@settings(max_examples=60, deadline=None)
@given(PUSHES)
def test_a_checking_replica_never_takes_a_forgery_and_never_goes_back(
    pushes: list[tuple[int, bool]],
) -> None:
    r = EagerReplica(check=PushCheck(OWNERS))
    taken = replay_pushes(r, pushes)
    assert all(seq > 0 for seq in taken)  # no forged push was taken
    assert taken == sorted(taken)  # and the head never went back
    if taken:
        assert r.heads[KEY] == pushed(taken[-1]).state.head


def test_control_a_replica_that_does_not_check_goes_back_and_takes_forgeries() -> None:
    taken = replay_pushes(EagerReplica(), [(2, False), (1, False), (3, True)])
    assert taken == [2, 1, -3]
