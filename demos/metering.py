"""What an executor spends on coordination in a workflow run (`Cost`), and the metered parts
the demo wires into the executors: a head source, a replica and an eager push that count."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from planfence.plugins.gate import HeadSource
from planfence.plugins.gate.decision import HeadAnswer
from planfence.shared_memory import JSON, AsyncStore, Change
from planfence.shared_memory.replica import Replica

from .baselines import EagerReplica
from .pushes import PushedHead


def _size(payload: JSON) -> int:
    return len(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())


@dataclass
class Cost:
    """What an executor spent on coordination in one run.

    `stalls` counts the synchronous waits on a run's path and `stall_ms` their total: the gate's
    owner head requests (one wait per check, the owners asked in parallel), the freshness replica's
    catch-up before each action, and every eager write held until all replicas acknowledged it.
    `messages` and `bytes` count what crossed between agents: head requests and answers, feed
    entries and records delivered to a replica, eager pushes and their acknowledgements, as
    compact JSON.
    """

    stalls: int = 0
    stall_ms: float = 0.0
    messages: int = 0
    bytes: int = 0

    def stall(self, seconds: float) -> None:
        self.stalls += 1
        self.stall_ms += seconds * 1000

    def send(self, payload: JSON) -> None:
        self.messages += 1
        self.bytes += _size(payload)

    def add(self, other: Cost) -> None:
        self.stalls += other.stalls
        self.stall_ms += other.stall_ms
        self.messages += other.messages
        self.bytes += other.bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "stalls": self.stalls,
            "stall_ms": round(self.stall_ms, 3),
            "messages": self.messages,
            "bytes": self.bytes,
        }


class MeteredHeads:
    """A head source that counts each request as one wait, and each owner's request and answer
    as two messages."""

    def __init__(self, inner: HeadSource, cost: Cost) -> None:
        self.inner = inner
        self.cost = cost

    async def heads(self, owners: Mapping[str, tuple[str, ...]]) -> Mapping[str, HeadAnswer]:
        start = time.perf_counter()
        try:
            answers = await self.inner.heads(owners)
        finally:
            self.cost.stall(time.perf_counter() - start)
        for owner, keys in owners.items():
            self.cost.send({"owner": owner, "keys": list(keys)})
            answer: dict[str, JSON] = {}
            for key in keys:
                got = answers.get(key)
                answer[key] = None if got is None else (got.error or got.head)
            self.cost.send(answer)
        return answers

    async def aclose(self) -> None:
        await self.inner.aclose()


class MeteredReplica(Replica):
    """The freshness executor's replica: current up to the run's start (a run's keys are new), it
    catches up from there; each catch-up is a wait, each feed entry and record a message."""

    def __init__(self, store: AsyncStore, cost: Cost, *, since: int) -> None:
        super().__init__(store)
        self.cost = cost
        self.seq = since

    async def sync(self) -> list[Change]:
        start = time.perf_counter()
        held = set(self.records)
        try:
            applied = await super().sync()
        finally:
            self.cost.stall(time.perf_counter() - start)
        for change in applied:
            self.cost.send(change.to_dict())
        for rid, record in self.records.items():
            if rid not in held:
                self.cost.send(record.to_dict())
        return applied


def eager_push(cost: Cost) -> Callable[[EagerReplica, PushedHead], Any]:
    """Counts each push (the owner's head with its signature, when signed, and the record) and
    its acknowledgement."""

    async def push(replica: EagerReplica, pushed: PushedHead) -> None:
        cost.send(pushed.to_dict())
        cost.send({"ack": pushed.feed_seq})

    return push
