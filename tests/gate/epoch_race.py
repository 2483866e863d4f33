"""Processes for the transfer race (`test_gate_epoch_race.py`): run as a script.

    python epoch_race.py transfer URL ROUNDS          hand every key back and forth
    python epoch_race.py check URL STOP_FILE LAG_S    check calls until STOP_FILE exists

The checker's owners answer from a view of the store refreshed every LAG_S seconds, as owner
services that learn of a transfer late would: after losing a key, an owner keeps answering for
its old epoch for a while. Each check prints one JSON line: the feed position read before the
check, the verdict, and the answers the owners gave (owner, key, epoch), from the owners' side.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Mapping

from planfence.plugins.gate import Gate, Policy, ToolCall
from planfence.plugins.gate.decision import HeadAnswer
from planfence.shared_memory import AsyncStore, KeyState, open_async_store

KEYS = ("k/0", "k/1")
OWNERS = ("a", "b")
POLICY = Policy.from_toml('[tools.ship]\ndepends_on = ["k/{id}"]\n')


class LaggingOwners:
    """Owners whose view of who owns what is refreshed every `lag` seconds."""

    def __init__(self, store: AsyncStore, lag: float) -> None:
        self.store = store
        self.lag = lag
        self.view: dict[str, KeyState] = {}
        self.read_at = 0.0
        self.given: list[tuple[str, str, int | None]] = []

    async def heads(self, owners: Mapping[str, tuple[str, ...]]) -> Mapping[str, HeadAnswer]:
        if time.monotonic() - self.read_at > self.lag:
            self.view = await self.store.states(KEYS)
            self.read_at = time.monotonic()
        out: dict[str, HeadAnswer] = {}
        for owner, keys in owners.items():
            for key in keys:
                state = self.view[key]
                if state.owner == owner:
                    out[key] = HeadAnswer(state.head, epoch=state.epoch)
                    self.given.append((owner, key, state.epoch))
                else:
                    out[key] = HeadAnswer(error="owner_epoch_stale", detail="not mine")
                    self.given.append((owner, key, None))
        return out

    async def aclose(self) -> None:
        return None


def stopped(path: str) -> bool:
    return os.path.exists(path)


async def transfer(url: str, rounds: int) -> None:
    store = await open_async_store(url)
    try:
        for _ in range(rounds):
            for key in KEYS:
                owner = await store.owner(key)
                other = OWNERS[1] if owner == OWNERS[0] else OWNERS[0]
                await store.transfer(key, other, by=str(owner))
            await asyncio.sleep(0.004)
    finally:
        await store.aclose()


async def check(url: str, stop: str, lag: float) -> None:
    store = await open_async_store(url)
    owners = LaggingOwners(store, lag)
    gate = Gate(store, POLICY, heads=owners, audit=False)
    plans: dict[str, str] = {}
    for entry in await store.journal(kind="race-plan", limit=10):
        plans[str(entry.labels["key"])] = str(entry.subject)
    seq = 0
    try:
        n = 0
        while not stopped(stop):
            while batch := await store.changes(seq, 1000):
                seq = batch[-1].seq
            key = KEYS[n % len(KEYS)]
            n += 1
            owners.given = []
            verdict = await gate.check(ToolCall("ship", {"id": key[-1]}, plans[key]))
            line = {
                "seq0": seq,
                "key": key,
                "verdict": verdict.verdict,
                "reason": str(verdict.reason),
                "answers": owners.given,
            }
            print(json.dumps(line), flush=True)
    finally:
        await gate.aclose()
        await store.aclose()


if __name__ == "__main__":
    role, url = sys.argv[1], sys.argv[2]
    if role == "transfer":
        asyncio.run(transfer(url, int(sys.argv[3])))
    else:
        asyncio.run(check(url, sys.argv[3], float(sys.argv[4])))
