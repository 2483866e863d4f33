"""`planfence proxy --signing-key` sends a signed fencing token upstream with every allowed call,
which the tool's side can verify against the store; `--audit deferred` still records every
allow by the time the proxy exits."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp_helpers import TRIP_KEY, World, connect, plan_meta

from planfence import fence
from planfence.adapters.owner_service import SigningKey
from planfence.adapters.owner_service.keys import PublicKeyring
from planfence.plugins.gate.audit import AUDIT_SOURCE

ARGS = {"destination": "Lisbon", "trip": "t1"}


def gate_key(tmp_path: Path) -> tuple[Path, PublicKeyring]:
    key = SigningKey.generate("proxy-gate", role="gate")
    path = tmp_path / "gate.jwk"
    key.save(path)
    return path, PublicKeyring({"keys": [key.public_jwk()]})


async def test_the_upstream_gets_a_signed_token_it_can_verify(world: World, tmp_path: Path) -> None:
    key_file, keyring = gate_key(tmp_path)
    params = world.proxy_params("--signing-key", str(key_file))
    async with connect(params) as client:
        # A client cannot smuggle in a token of its own: the proxy drops it.
        meta = plan_meta(world.plan, **{"dev.planfence/fence": {"forged": True}})
        result = await client.call_tool("book", ARGS, meta=meta)
    assert result.is_error is False
    [booked] = world.effects_log("book")
    token = fence.FenceToken.parse(booked["meta"]["dev.planfence/fence"])
    assert token.signed and token.gate == "proxy-gate"
    assert token.heads[TRIP_KEY].head == world.first.id
    assert token.heads[TRIP_KEY].epoch == await world.store.epoch(TRIP_KEY)
    assert await fence.verify(token, world.store, keyring=keyring, args=ARGS) == token
    # The head moves after the call: the same token no longer verifies.
    await world.revise({"destination": "Porto"})
    with pytest.raises(fence.StaleFenceError):
        await fence.verify(token, world.store, keyring=keyring, args=ARGS)


async def test_the_executor_cannot_mint_a_token_the_upstream_accepts(
    world: World, tmp_path: Path
) -> None:
    """The executor behind the proxy copies the token the upstream received and signs it as
    itself: the upstream, verifying with every agent's keyring, refuses it; the proxy's own
    token (signed as the gate) passes; a keyring with no gate named verifies neither."""
    key_file, gate_ring = gate_key(tmp_path)
    executor = SigningKey.generate("executor")
    everyone = PublicKeyring({"keys": [*gate_ring.to_jwks()["keys"], executor.public_jwk()]})
    no_gate = PublicKeyring(
        {"keys": [{k: v for k, v in j.items() if k != "role"} for j in everyone.to_jwks()["keys"]]}
    )
    async with connect(world.proxy_params("--signing-key", str(key_file))) as client:
        forged_in = {"dev.planfence/fence": {"gate": "executor", "sig": "x"}}
        result = await client.call_tool("book", ARGS, meta=plan_meta(world.plan, **forged_in))
    assert result.is_error is False
    [booked] = world.effects_log("book")
    wire = booked["meta"]["dev.planfence/fence"]
    assert wire["gate"] == "proxy-gate"  # the client's value was dropped, the gate's sent
    minted = {**wire, "gate": "executor"}
    minted["sig"] = executor.sign(fence.FENCE_TYPE, {k: v for k, v in minted.items() if k != "sig"})
    with pytest.raises(fence.FenceSignatureError, match="not by a trusted gate"):
        await fence.verify(minted, world.store, keyring=everyone, args=ARGS, tool="book")
    with pytest.raises(fence.FenceSignatureError, match="no gate is trusted"):
        await fence.verify(minted, world.store, keyring=no_gate, args=ARGS, tool="book")
    with pytest.raises(fence.FenceSignatureError, match="no gate is trusted"):
        await fence.verify(wire, world.store, keyring=no_gate, args=ARGS, tool="book")
    await fence.verify(wire, world.store, keyring=everyone, args=ARGS, tool="book")


async def test_the_proxy_signs_only_with_a_gate_key(world: World, tmp_path: Path) -> None:
    import sys

    import anyio

    plain = tmp_path / "executor.jwk"
    SigningKey.generate("executor").save(plain)
    command = [sys.executable, *world.proxy_args("--signing-key", str(plain), upstream=["true"])]
    with anyio.fail_after(60):
        done = await anyio.run_process(command, check=False)
    stderr = done.stderr.decode()
    assert done.returncode == 1
    assert stderr.startswith("planfence: error: ") and stderr.count("\n") == 1
    assert "is not a gate key" in stderr and "--gate" in stderr


async def test_a_key_file_that_is_not_a_key_is_one_error_line(world: World, tmp_path: Path) -> None:
    import sys

    import anyio

    bad = tmp_path / "gate.jwk"
    bad.write_text("{not json")
    command = [sys.executable, *world.proxy_args("--signing-key", str(bad), upstream=["true"])]
    with anyio.fail_after(60):
        done = await anyio.run_process(command, check=False)
    stderr = done.stderr.decode()
    assert done.returncode == 1  # a bad file, not bad usage
    assert stderr.startswith("planfence: error: ") and stderr.count("\n") == 1
    assert "invalid JSON" in stderr


async def test_deferred_audit_records_every_allow_by_exit(world: World) -> None:
    async with connect(world.proxy_params("--audit", "deferred")) as client:
        for _ in range(3):
            result = await client.call_tool("book", ARGS, meta=plan_meta(world.plan))
            assert result.is_error is False
            assert result.meta["dev.planfence/decision"]["decision_id"] is None  # not yet
        await world.revise({"destination": "Porto"})
        stale = await client.call_tool("book", ARGS, meta=plan_meta(world.plan))
        assert stale.is_error is True
    entries = await world.store.journal(kind=AUDIT_SOURCE, limit=100)
    assert sorted(e.labels["verdict"] for e in entries) == ["allow", "allow", "allow", "replan"]
