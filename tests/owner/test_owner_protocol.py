"""The owner-service protocol, in-process: httpx against the real ASGI apps (no sockets).

Covers what the owner refuses, what the client accepts, the keyring, and the gate on top.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fault_owner import EXPECTED_BLOCK, create_fault_app
from owner_helpers import BUDGET, POLICY, REQ, free_port

from planfence.adapters.owner_service import HttpOwnerHeads, Keyring, KeyringError, load_keyring
from planfence.adapters.owner_service.keyring import KEYRING_ENV
from planfence.adapters.owner_service.server import NonceCache, create_app
from planfence.adapters.owner_service.wire import (
    ANSWER_PURPOSE,
    REQUEST_PURPOSE,
    HeadsAnswer,
    new_nonce,
    now_ms,
    signature,
    signed_request,
    verify,
)
from planfence.demos.bench.harness.wire import CountingTransport
from planfence.plugins.gate import Gate, ToolCall, create_plan
from planfence.shared_memory import AsyncStore, open_async_store


@dataclass
class Env:
    store: AsyncStore
    keyring: Keyring
    client: httpx.AsyncClient
    directory: dict[str, str]
    requirements: str
    budget: str
    plan: str

    def heads(self, directory: dict[str, str] | None = None, **kw: float) -> HttpOwnerHeads:
        return HttpOwnerHeads(
            directory or self.directory,
            self.keyring,
            agent="executor",
            client=self.client,
            **kw,
        )


@pytest.fixture
async def env(keyring: Keyring) -> AsyncIterator[Env]:
    store = await open_async_store("memory://")
    await store.own(REQ, "planner")
    await store.own(BUDGET, "reviser")
    r = await store.put(REQ, {"destination": "Lisbon"}, author="planner")
    b = await store.put(BUDGET, {"eur": 900}, author="reviser")
    plan = await create_plan(store, author="planner", parents=[r.id, b.id])
    mounts = {
        "http://planner": httpx.ASGITransport(app=create_app("planner", store, keyring)),
        "http://reviser": httpx.ASGITransport(app=create_app("reviser", store, keyring)),
        "http://fault": httpx.ASGITransport(
            app=create_fault_app("reviser", store, keyring, impostor="intruder", delay_s=2.0)
        ),
    }
    client = httpx.AsyncClient(mounts=mounts)
    try:
        yield Env(
            store,
            keyring,
            client,
            {"planner": "http://planner", "reviser": "http://reviser"},
            r.id,
            b.id,
            plan.id,
        )
    finally:
        await client.aclose()
        await store.aclose()


def signed(keyring: Keyring, **over: object) -> dict[str, object]:
    fields: dict[str, object] = {
        "requester": "executor",
        "owner": "planner",
        "keys": [REQ],
        "nonce": new_nonce(),
        "at": now_ms(),
    }
    fields.update(over)
    secret = keyring.get(str(fields["requester"]), b"x" * 32)
    return signed_request(secret, **fields).model_dump()  # type: ignore[arg-type]


# ---- what an owner answers


async def test_each_owner_answers_for_its_own_keys(env: Env) -> None:
    mounts = env.client._mounts  # the same in-process owner apps, counted on the way
    counted = {
        pattern: CountingTransport(transport)
        for pattern, transport in mounts.items()
        if transport is not None
    }
    async with httpx.AsyncClient(mounts={p.pattern: t for p, t in counted.items()}) as client:
        source = HttpOwnerHeads(env.directory, env.keyring, agent="executor", client=client)
        answers = await source.heads({"planner": (REQ,), "reviser": (BUDGET,)})
    assert answers[REQ].head == env.requirements and answers[REQ].error is None
    assert answers[BUDGET].head == env.budget and answers[BUDGET].error is None
    stats = [t.stats for t in counted.values()]
    assert sum(s.requests for s in stats) == 2  # one request per owner
    assert all(s.bytes_sent > 0 and s.bytes_received > 0 for s in stats if s.requests)


async def test_owned_key_without_a_version_has_a_null_head(env: Env) -> None:
    await env.store.own("trip/42/notes", "planner")
    answers = await env.heads().heads({"planner": ("trip/42/notes",)})
    assert answers["trip/42/notes"].head is None
    assert answers["trip/42/notes"].error is None
    assert answers["trip/42/notes"].epoch == 1


async def test_answers_carry_the_owner_epoch(env: Env) -> None:
    await env.store.own("trip/42/notes", "planner")
    await env.store.transfer("trip/42/notes", "reviser", by="planner")
    await env.store.transfer("trip/42/notes", "planner", by="reviser")
    answers = await env.heads().heads({"planner": ("trip/42/notes",)})
    assert (answers["trip/42/notes"].epoch, answers["trip/42/notes"].error) == (3, None)


async def test_key_owned_by_someone_else_is_not_answered(env: Env) -> None:
    # The gate asked the wrong owner: its view of owners is out of date (it re-reads them).
    answers = await env.heads().heads({"planner": (BUDGET, "trip/42/unknown")})
    for key in (BUDGET, "trip/42/unknown"):
        assert answers[key].error == "owner_epoch_stale"
        assert "does not own" in answers[key].detail
        assert answers[key].head is None


async def test_answer_is_signed_by_the_owner(env: Env) -> None:
    res = await env.client.post("http://planner/heads", json=signed(env.keyring))
    answer = HeadsAnswer.model_validate_json(res.content)
    assert answer.agent == "planner"
    assert verify(answer, env.keyring["planner"])
    assert not verify(answer, env.keyring["reviser"])


def test_request_and_answer_signatures_are_not_interchangeable() -> None:
    fields = {"a": 1}
    assert signature(b"k" * 16, REQUEST_PURPOSE, fields) != signature(
        b"k" * 16, ANSWER_PURPOSE, fields
    )


# ---- what an owner refuses


@pytest.mark.parametrize(
    ("case", "status", "error"),
    [
        ("unknown_requester", 401, "unknown_requester"),
        ("forged_signature", 401, "bad_signature"),
        ("tampered_keys", 401, "bad_signature"),
        ("other_owner", 403, "wrong_owner"),
        ("stale", 401, "stale_request"),
        ("from_the_future", 401, "stale_request"),
        ("malformed", 400, "malformed"),
        ("extra_field", 400, "malformed"),
        ("invalid_key", 400, "invalid_key"),
        ("too_large", 413, "too_large"),
    ],
)
async def test_owner_refuses(env: Env, case: str, status: int, error: str) -> None:
    kr = env.keyring
    body: object
    if case == "unknown_requester":
        body = signed(kr, requester="stranger")
    elif case == "forged_signature":
        good = signed(kr)
        body = {**good, "sig": signature(kr["intruder"], REQUEST_PURPOSE, _unsigned(good))}
    elif case == "tampered_keys":
        body = {**signed(kr), "keys": [BUDGET]}
    elif case == "other_owner":
        body = signed(kr, owner="reviser")
    elif case == "stale":
        body = signed(kr, at=now_ms() - 10 * 60 * 1000)
    elif case == "from_the_future":
        body = signed(kr, at=now_ms() + 10 * 60 * 1000)
    elif case == "malformed":
        body = {"keys": [REQ]}
    elif case == "extra_field":
        body = {**signed(kr), "admin": True}
    elif case == "invalid_key":
        body = signed(kr, keys=["not a key!"])
    else:
        body = {**signed(kr), "pad": "x" * (2 << 20)}
    res = await env.client.post("http://planner/heads", json=body)
    assert res.status_code == status
    assert res.json()["error"] == error
    assert "heads" not in res.json()


def _unsigned(body: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in body.items() if k != "sig"}


async def test_replayed_request_is_refused(env: Env) -> None:
    body = signed(env.keyring)
    first = await env.client.post("http://planner/heads", json=body)
    second = await env.client.post("http://planner/heads", json=body)
    assert first.status_code == 200
    assert second.status_code == 401
    assert second.json()["error"] == "replayed_nonce"


async def test_garbage_request_body_is_refused(env: Env) -> None:
    res = await env.client.post("http://planner/heads", content=b"\x00\xff{")
    assert res.status_code == 400


async def test_health_names_the_owner(env: Env) -> None:
    res = await env.client.get("http://reviser/health")
    assert res.json() == {"agent": "reviser"}


def test_nonce_cache_refuses_reuse_forgets_expired_and_fails_closed_when_full() -> None:
    cache = NonceCache(window_ms=1000, max_entries=2)
    assert cache.add("executor", "a" * 32, now=0)
    assert not cache.add("executor", "a" * 32, now=10)
    assert cache.add("planner", "a" * 32, now=10)  # nonces are per requester
    assert not cache.add("executor", "b" * 32, now=20)  # full: refuse rather than forget
    assert cache.add("executor", "b" * 32, now=5000)  # old entries are past the window


# ---- the client's own checks


async def test_requester_needs_a_secret(keyring: Keyring) -> None:
    with pytest.raises(KeyringError, match="stranger"):
        HttpOwnerHeads({}, keyring, agent="stranger")


async def test_owner_without_address_or_secret_is_not_trusted(env: Env) -> None:
    directory = {**env.directory, "ghost": "http://planner"}
    answers = await env.heads(directory).heads({"nobody": ("a/b",), "ghost": ("c/d",)})
    assert answers["a/b"].error == "owner_unreachable"
    assert "no address" in answers["a/b"].detail
    assert answers["c/d"].error == "owner_unauthenticated"
    assert "no secret" in answers["c/d"].detail


async def test_owner_that_does_not_know_the_requester_is_unauthenticated(env: Env) -> None:
    narrow = Keyring({a: env.keyring[a] for a in ("planner",)})
    mounts = {"http://planner": httpx.ASGITransport(app=create_app("planner", env.store, narrow))}
    async with httpx.AsyncClient(mounts=mounts) as client:
        source = HttpOwnerHeads(env.directory, env.keyring, agent="executor", client=client)
        answers = await source.heads({"planner": (REQ,)})
    assert answers[REQ].error == "owner_unauthenticated"
    assert "unknown_requester" in answers[REQ].detail


async def test_owned_client_is_closed() -> None:
    kr = Keyring({"executor": "s" * 16})
    source = HttpOwnerHeads({}, kr, agent="executor")
    await source.aclose()
    assert source._client.is_closed


# ---- the keyring


def test_keyring_reads_toml_and_json(tmp_path: Path) -> None:
    toml = tmp_path / "keys.toml"
    toml.write_text('planner = "0123456789abcdef"\nexecutor = "fedcba9876543210"\n')
    js = tmp_path / "keys.json"
    js.write_text(json.dumps({"planner": "0123456789abcdef"}))
    assert set(Keyring.load(toml)) == {"planner", "executor"}
    assert Keyring.load(js)["planner"] == b"0123456789abcdef"
    assert "0123456789abcdef" not in repr(Keyring.load(toml))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('planner = "short"', "shorter than 16"),
        ("planner = 7", "maps agent ids"),
        ('[agents]\nplanner = "0123456789abcdef"', "maps agent ids"),
        ('"bad agent!" = "0123456789abcdef"', "agent"),
        ("planner = ", "invalid TOML"),
        ('{"planner": ', "invalid JSON"),
    ],
)
def test_bad_keyrings_are_rejected(text: str, match: str) -> None:
    with pytest.raises(KeyringError, match=match):
        Keyring.parse(text)


def test_keyring_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEYRING_ENV, raising=False)
    with pytest.raises(KeyringError, match="no keyring"):
        load_keyring()
    monkeypatch.setenv(KEYRING_ENV, json.dumps({"planner": "0123456789abcdef"}))
    assert list(load_keyring()) == ["planner"]
    path = tmp_path / "k.toml"
    path.write_text('reviser = "0123456789abcdef"')
    monkeypatch.setenv(KEYRING_ENV, str(path))
    assert list(load_keyring()) == ["reviser"]
    with pytest.raises(KeyringError, match="cannot read"):
        load_keyring(tmp_path / "missing.toml")


def test_owner_app_needs_its_own_secret(keyring: Keyring) -> None:
    with pytest.raises(KeyringError, match="ghost"):
        create_app("ghost", "memory://", keyring)


# ---- the gate over owner services


async def test_gate_allows_a_current_plan_and_replans_a_stale_one(env: Env) -> None:
    gate = Gate(env.store, POLICY, heads=env.heads(), agent="executor")
    allowed = await gate.check(ToolCall("book_trip", {"trip": "42"}, env.plan))
    assert allowed.verdict == "allow", allowed.message
    assert allowed.heads == {REQ: env.requirements, BUDGET: env.budget}

    r4 = await env.store.put(REQ, {"destination": "Porto"}, author="planner")
    stale = await gate.check(ToolCall("book_trip", {"trip": "42"}, env.plan))
    assert stale.verdict == "replan"
    assert [s.key for s in stale.stale] == [REQ]
    assert stale.current_records[REQ].id == r4.id

    replan = await create_plan(
        env.store, author="planner", parents=[r4.id, env.budget], supersedes=env.plan
    )
    assert (await gate.check(ToolCall("book_trip", {"trip": "42"}, replan.id))).verdict == "allow"
    await env.store.put(REQ, {"destination": "Faro"}, author="planner")
    again = await gate.check(ToolCall("book_trip", {"trip": "42"}, replan.id))
    assert again.verdict == "block"
    assert again.reason == "stale_after_replan"


@pytest.mark.parametrize("mode", sorted(EXPECTED_BLOCK))
async def test_faulty_owner_blocks_in_process(env: Env, mode: str, audit: str) -> None:
    base = f"http://127.0.0.1:{free_port()}" if mode == "down" else f"http://fault/{mode}"
    source = env.heads({**env.directory, "reviser": base}, timeout=0.5)
    gate = Gate(env.store, POLICY, heads=source, agent="executor", audit=audit)  # type: ignore[arg-type]
    if mode == "replay":  # the first answer is genuine; replaying it later must not pass
        assert (
            await gate.check(ToolCall("book_trip", {"trip": "42"}, env.plan))
        ).verdict == "allow"
    verdict = await gate.check(ToolCall("book_trip", {"trip": "42"}, env.plan))
    await gate.aclose()
    assert verdict.verdict == "block"
    assert verdict.reason == EXPECTED_BLOCK[mode], verdict.message
    assert "reviser" in verdict.message
    assert not verdict.heads


async def test_honest_fault_server_allows(env: Env) -> None:
    """The fault app's pass-through mode allows, so each fault above is what blocks."""
    source = env.heads({**env.directory, "reviser": "http://fault/honest"})
    gate = Gate(env.store, POLICY, heads=source, agent="executor")
    assert (await gate.check(ToolCall("book_trip", {"trip": "42"}, env.plan))).verdict == "allow"
