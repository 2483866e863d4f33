"""A fenced takeover with real processes: the old owner's service is frozen (SIGSTOP) just after
it read its keys for a gate's request; meanwhile an assigner reassigns its keys
(`planfence memory reassign`) and the new owner advances them. After SIGCONT, the old owner's
late answer, its writes, and the fencing token and lease of its epoch are all refused, and gates
keep allowing plans on the new heads. On SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import anyio
import pytest
from owner_helpers import HERE, Server, free_port, start_server

from planfence import fence
from planfence.adapters.owner_service import HttpOwnerHeads, PublicKeyring, SigningKey
from planfence.plugins.gate import Gate, GateMiddleware, Policy, ToolCall, create_plan
from planfence.plugins.gate.decision import HeadAnswer
from planfence.shared_memory import AsyncStore, Record, WriteBatch, open_async_store
from planfence.shared_memory.batches import AdvanceHead

KEYS = ("fleet/0", "fleet/1")
POLICY_TEXT = '[tools.ship]\ndepends_on = ["fleet/0", "fleet/1"]\nlease_ms = 60000\n'
POLICY = Policy.from_toml(POLICY_TEXT)
AGENTS = ("admin", "old", "new", "executor")


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return str(request.getfixturevalue("pg_url"))


class Recorded:
    """The gate's owner source, recording what each round of answers said."""

    def __init__(self, inner: HttpOwnerHeads) -> None:
        self.inner = inner
        self.rounds: list[tuple[dict[str, tuple[str, ...]], dict[str, HeadAnswer]]] = []

    async def heads(self, owners: Mapping[str, tuple[str, ...]]) -> Mapping[str, HeadAnswer]:
        got = dict(await self.inner.heads(owners))
        self.rounds.append((dict(owners), got))
        return got

    async def aclose(self) -> None:
        await self.inner.aclose()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "planfence.adapters.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def wait_stopped(pid: int, timeout: float = 60.0) -> None:
    """Wait until process `pid` is stopped (state T in /proc)."""
    deadline = time.monotonic() + timeout
    while True:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "T":
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"process {pid} did not stop")
        time.sleep(0.01)


@pytest.fixture
def keys(tmp_path: Path) -> tuple[dict[str, SigningKey], dict[str, Path], Path]:
    signing = {a: SigningKey.generate(a) for a in AGENTS}
    files = {}
    for agent, key in signing.items():
        files[agent] = tmp_path / f"{agent}.jwk"
        key.save(files[agent])
    ring = tmp_path / "keyring.jwks"
    ring.write_text(json.dumps({"keys": [k.public_jwk() for k in signing.values()]}))
    return signing, files, ring


async def seeded(url: str, signing: Mapping[str, SigningKey]) -> tuple[AsyncStore, list[Record]]:
    store = await open_async_store(url)
    heads = []
    for key in KEYS:
        store.signer = signing["admin"]
        await store.own(key, "old", by="admin")
        store.signer = signing["old"]
        heads.append(await store.put(key, {"truck": key, "v": 1}, author="old"))
    store.signer = None
    return store, heads


async def plan_on(store: AsyncStore, records: list[Record]) -> str:
    return (await create_plan(store, author="planner", parents=[r.id for r in records])).id


async def test_a_frozen_owner_is_fenced_after_its_keys_are_reassigned(
    shared_url: str, keys: tuple[dict[str, SigningKey], dict[str, Path], Path], tmp_path: Path
) -> None:
    signing, files, ring_file = keys
    ring = PublicKeyring.parse(ring_file.read_text())
    store, old_heads = await seeded(shared_url, signing)
    freeze = tmp_path / "freeze"
    env = {k: v for k, v in os.environ.items() if k != "PLANFENCE_KEYRING"}
    servers: list[Server] = []
    old_pid = 0
    source: Recorded | None = None
    try:
        port = free_port()
        cmd = [sys.executable, str(HERE / "freezing_owner.py"), "--agent", "old"]
        cmd += ["--store", shared_url, "--port", str(port), "--keyring", str(ring_file)]
        cmd += ["--signing-key", str(files["old"]), "--freeze-file", str(freeze)]
        servers.append(start_server(cmd, env, tmp_path / "old.log", port))
        old_pid = servers[0].proc.pid
        port = free_port()
        cmd = [sys.executable, "-m", "planfence.adapters.cli", "serve-owner", "--agent", "new"]
        cmd += ["--store", shared_url, "--port", str(port), "--keyring", str(ring_file)]
        cmd += ["--signing-key", str(files["new"])]
        servers.append(start_server(cmd, env, tmp_path / "new.log", port))
        directory = {"old": servers[0].base_url, "new": servers[1].base_url}
        source = Recorded(
            HttpOwnerHeads(
                directory,
                ring,
                agent="executor",
                signing_key=signing["executor"],
                timeout=60,
                store=store,
            )
        )
        asking = Gate(store, POLICY, heads=source)  # asks the owner services
        untrusting = Gate(store, POLICY, verify_heads=ring, owner_assigners={"admin"})
        gate_key = SigningKey.generate("gate-1", role="gate")
        middleware = GateMiddleware(store, POLICY_TEXT, gate=asking, signing_key=gate_key)

        # Epoch 1: the old owner answers; an allow's token and lease name its epoch.
        old_plan = await plan_on(store, old_heads)
        judged = await middleware.judge(ToolCall("ship", {}, old_plan))
        assert judged.allowed and judged.fence is not None and judged.fence.lease is not None
        old_token = judged.fence
        assert (await untrusting.check(ToolCall("ship", {}, old_plan))).allowed

        # The old owner reads its keys for the next request, and freezes before answering.
        seen = len(source.rounds)
        freeze.touch()
        async with anyio.create_task_group() as tg:
            late: dict[str, object] = {}

            async def pending() -> None:
                late["verdict"] = await asking.check(ToolCall("ship", {}, old_plan))

            tg.start_soon(pending)
            await anyio.to_thread.run_sync(wait_stopped, old_pid)
            # Meanwhile: the assigner takes the keys over, the new owner advances them (its
            # writes are not held back by the old epoch's lease: the takeover ended it).
            for key in KEYS:
                done = cli(
                    "memory", "reassign", key, "--to", "new", "--as", "admin",
                    "--signing-key", str(files["admin"]), "--from-epoch", "1",
                    "--store", shared_url, "--json",
                )  # fmt: skip
                assert done.returncode == 0, done.stderr
                assert json.loads(done.stdout)["epoch"] == 2
            new_heads = []
            for key in KEYS:
                started = time.monotonic()
                done = cli(
                    "memory", "put", key, "--as", "new", "--signing-key", str(files["new"]),
                    "--value", json.dumps({"truck": key, "v": 2}), "--store", shared_url,
                    "--json",
                )  # fmt: skip
                assert done.returncode == 0, done.stderr
                assert time.monotonic() - started < 30  # not the lease's 60 s
                new_heads.append(await store.get(json.loads(done.stdout)["id"]))
            new_plan = await plan_on(store, new_heads)
            # While the old owner is frozen, gates allow plans on the new heads.
            for gate in (asking, untrusting):
                v = await gate.check(ToolCall("ship", {}, new_plan))
                assert (v.verdict, v.epochs) == ("allow", dict.fromkeys(KEYS, 2)), v.message
            os.kill(old_pid, signal.SIGCONT)
        # The old owner's late answer (epoch 1, its old heads) is refused: no allow on it.
        verdict = late["verdict"]
        assert (getattr(verdict, "verdict", None), getattr(verdict, "reason", None)) == (
            "block",
            "owner_epoch_stale",
        ), verdict
        [(asked, said)] = [r for r in source.rounds[seen:] if "old" in r[0]]
        assert asked == {"old": KEYS}
        assert {a.error for a in said.values()} == {"owner_epoch_stale"}
        assert all("epoch 1" in a.detail and "epoch 2" in a.detail for a in said.values())

        # Every later word of the old owner is refused too.
        fresh = await source.inner.heads({"old": KEYS})
        assert {a.error for a in fresh.values()} == {"owner_epoch_stale"}  # "not mine" now
        done = cli(
            "memory", "put", KEYS[0], "--as", "old", "--signing-key", str(files["old"]),
            "--value", '{"late": true}', "--store", shared_url,
        )  # fmt: skip
        assert done.returncode == 1 and "is not the owner" in done.stderr
        with pytest.raises(fence.StaleFenceError):
            await fence.verify(old_token, store, keyring=PublicKeyring(
                {"keys": [gate_key.public_jwk()]}
            ))  # fmt: skip
        effect = Record.create("effects/ship", 1, author="executor")
        await store.own("effects/ship", "executor")
        write = WriteBatch(
            records=(effect,), ops=(AdvanceHead(effect.key, effect.id, None, "executor"),)
        )
        with pytest.raises(fence.StaleFenceError):
            await fence.fenced_write(old_token, store, write)
        assert await store.head("effects/ship") is None
        # A signed head the old owner made for the old epoch does not count either.
        v = await untrusting.check(ToolCall("ship", {}, old_plan))
        assert v.verdict != "allow"
        # And the gates keep allowing plans on the new heads, after the old owner woke.
        for gate in (asking, Gate(store, POLICY, verify_heads=ring, owner_assigners={"admin"})):
            v = await gate.check(ToolCall("ship", {}, new_plan))
            assert (v.verdict, v.epochs) == ("allow", dict.fromkeys(KEYS, 2)), v.message
        await middleware.release(judged)
    finally:
        if source is not None:
            await source.aclose()
        if old_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(old_pid, signal.SIGCONT)
        for server in servers:
            server.stop()
        await store.aclose()
