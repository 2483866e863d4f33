"""Only a gate can mint a fencing token a tool accepts: `verify` and `fenced_write` take the
gates the tool trusts (`gates={...}`, or a keyring that marks gate keys), a keyring of agents
with no gate named verifies nothing, and `planfence keys generate --gate` makes the gate's
identity explicit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from planfence import fence
from planfence.adapters.cli.main import main
from planfence.adapters.owner_service import KeyringError, SigningKey, load_keyring
from planfence.adapters.owner_service.keys import GATE_ROLE, PublicKeyring
from planfence.plugins.gate import GateMiddleware, ToolCall, create_plan
from planfence.shared_memory import AsyncStore, Record, WriteBatch
from planfence.shared_memory.batches import AdvanceHead

ORDER = "order/7"
POLICY = '[tools.ship]\ndepends_on = ["order/{id}"]\n'
ARGS = {"id": "7"}


async def planned(store: AsyncStore) -> str:
    await store.own(ORDER, "sales")
    order = await store.put(ORDER, {"status": "confirmed"}, author="sales")
    return (await create_plan(store, author="planner", parents=[order.id])).id


def executor_minted(token: fence.FenceToken, executor: SigningKey) -> dict[str, Any]:
    """The forgery: the gated executor copies the gate's token (current heads, its own call)
    and signs it itself."""
    d = {**token.to_wire(), "gate": executor.agent}
    d["sig"] = executor.sign(fence.FENCE_TYPE, {k: v for k, v in d.items() if k != "sig"})
    return d


class Team:
    def __init__(self) -> None:
        self.gate = SigningKey.generate("gate-1", role=GATE_ROLE)
        self.other_gate = SigningKey.generate("gate-2", role=GATE_ROLE)
        self.executor = SigningKey.generate("executor")
        self.planner = SigningKey.generate("planner")

    def ring(self, *keys: SigningKey) -> PublicKeyring:
        return PublicKeyring({"keys": [k.public_jwk() for k in keys]})

    def unmarked(self) -> PublicKeyring:
        """Every agent's public key, no gate named (the old documented setup)."""
        jwks = [
            {k: v for k, v in key.public_jwk().items() if k != "role"}
            for key in (self.gate, self.other_gate, self.executor, self.planner)
        ]
        return PublicKeyring({"keys": jwks})


async def test_an_executor_minted_token_is_refused_in_process(astore: AsyncStore) -> None:
    team = Team()
    plan = await planned(astore)
    gate = GateMiddleware(astore, POLICY, agent="executor", signing_key=team.gate)
    token = (await gate.judge(ToolCall("ship", ARGS, plan))).fence
    assert token is not None and token.gate == "gate-1"
    forged = executor_minted(token, team.executor)
    everyone = team.ring(team.gate, team.executor, team.planner)  # gate-1 marked as a gate
    # A keyring of all agents with no gate named verifies nothing, the gate's own token included.
    for candidate in (forged, token):
        with pytest.raises(fence.FenceSignatureError, match="no gate is trusted"):
            await fence.verify(candidate, astore, keyring=team.unmarked(), args=ARGS)
    # With the gate named (by the keyring's marks or by gates=), only its token passes.
    assert await fence.verify(token, astore, keyring=everyone, args=ARGS, tool="ship") == token
    assert await fence.verify(token, astore, keyring=team.unmarked(), gates={"gate-1"}) == token
    for ring, gates in ((everyone, None), (team.unmarked(), {"gate-1"})):
        with pytest.raises(fence.FenceSignatureError, match="not by a trusted gate"):
            await fence.verify(forged, astore, keyring=ring, gates=gates, args=ARGS)
    # The same forgery cannot drive a conditional write either: nothing is written.
    await astore.own("effects/executor", "executor")
    seq = await astore.last_seq()
    with pytest.raises(fence.FenceSignatureError):
        await fence.fenced_write(forged, astore, effect(plan), keyring=everyone)
    assert await astore.changes(seq) == []
    await fence.fenced_write(token, astore, effect(plan), keyring=everyone)
    assert len(await astore.changes(seq)) == 1


async def test_a_second_untrusted_gate_is_refused(astore: AsyncStore) -> None:
    team = Team()
    plan = await planned(astore)
    call = ToolCall("ship", ARGS, plan)
    mine = (await GateMiddleware(astore, POLICY, signing_key=team.gate).judge(call)).fence
    theirs = (await GateMiddleware(astore, POLICY, signing_key=team.other_gate).judge(call)).fence
    assert mine is not None and theirs is not None
    both = team.ring(team.gate, team.other_gate, team.executor)
    await fence.verify(mine, astore, keyring=both, gates={"gate-1"})
    with pytest.raises(fence.FenceSignatureError, match="'gate-2', not by a trusted gate"):
        await fence.verify(theirs, astore, keyring=both, gates={"gate-1"})
    # A copied signature under the trusted gate's name does not verify either.
    relabelled = {**theirs.to_wire(), "gate": "gate-1"}
    with pytest.raises(fence.FenceSignatureError, match="bad signature"):
        await fence.verify(relabelled, astore, keyring=both, gates={"gate-1"})


async def test_a_token_stays_valid_while_its_heads_are_unchanged_whatever_its_lease(
    astore: AsyncStore,
) -> None:
    team = Team()
    plan = await planned(astore)
    gate = GateMiddleware(astore, POLICY + "lease_ms = 50\n", signing_key=team.gate)
    judged = await gate.judge(ToolCall("ship", ARGS, plan))
    token = judged.fence
    assert token is not None and token.lease is not None
    await gate.release(judged)
    await anyio.sleep(0.1)
    # The lease is gone (released, and long expired): the heads did not move, the token holds.
    await fence.verify(token, astore, keyring=team.ring(team.gate))


def test_keys_generate_gate_marks_the_key_and_writes_a_gate_keyring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "keys"
    for agent in ("executor", "planner"):
        assert main(["keys", "generate", "--agent", agent, "--out", str(out)]) == 0
    assert main(["keys", "generate", "--agent", "gate-1", "--gate", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["keys", "generate", "--agent", "gate-2", "--out", str(out), "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["role"] is None and "gate_keyring" not in plain
    everyone = load_keyring(out / "keyring.jwks")
    gates = load_keyring(out / "gates.jwks")
    assert isinstance(everyone, PublicKeyring) and isinstance(gates, PublicKeyring)
    assert everyone.agents == {"executor", "planner", "gate-1", "gate-2"}
    assert everyone.gates == {"gate-1"} and gates.gates == gates.agents == {"gate-1"}
    [private] = out.glob("gate-1.*.jwk")
    assert SigningKey.load(private).is_gate
    # An agent's keys are all gate keys or none: a plain key for a gate is refused, unwritten.
    before = (out / "keyring.jwks").read_text()
    assert main(["keys", "generate", "--agent", "gate-1", "--out", str(out)]) == 1
    assert "gate and non-gate keys" in capsys.readouterr().err
    assert (out / "keyring.jwks").read_text() == before
    assert len(list(out.glob("gate-1.*.jwk"))) == 1


def test_a_keyring_refuses_unknown_roles() -> None:
    jwk = {**SigningKey.generate("gate-1").public_jwk(), "role": "root"}
    with pytest.raises(KeyringError, match="unknown key role"):
        PublicKeyring({"keys": [jwk]})


def effect(plan: str) -> WriteBatch:
    rec = Record.create("effects/executor", 1, author="executor", parents=[plan])
    return WriteBatch(records=(rec,), ops=(AdvanceHead(rec.key, rec.id, None, "executor"),))
