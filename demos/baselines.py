"""The executors PlanFence is compared against, behind the same interface as `Gate` (for the demos
and benchmarks; an adapter judges with it through `executors.on_baseline` in experiments).

- `FreshnessOnly`: keeps the local replica current, never checks which records produced the plan.
  Unsafe: it acts on stale plans.
- `EagerSync` + `EagerExecutor`: every update is pushed synchronously to every replica before it
  counts; plans whose parents are superseded are invalidated on arrival. Safe; pays a stall on
  every update whether or not an action depends on it. With owners' signing keys, each push is
  the owner's signed head and the replicas verify it (`pushes`).
- `AllKeysHeads`: the batch all-key check, as a head source that asks owners for every shared key
  (D(a) = X). Safe; traffic grows with the key space.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from planfence.plugins.gate import HeadSource, Policy, ToolCall
from planfence.plugins.gate.call import Checker
from planfence.plugins.gate.decision import (
    ALLOW,
    BLOCK,
    REPLAN,
    STALE,
    STALE_AFTER_REPLAN,
    UNKNOWN_PLAN,
    HeadAnswer,
    StaleKey,
    Verdict,
    args_digest,
    base_verdict,
    resolve_call,
)
from planfence.shared_memory import (
    JSON,
    AsyncStore,
    KeyState,
    Record,
    UnknownKeyError,
    UnknownRecordError,
    WriteBatch,
)
from planfence.shared_memory.batches import AdvanceHead
from planfence.shared_memory.records import KIND_PLAN
from planfence.shared_memory.replica import Replica
from planfence.shared_memory.signing import HeadSigner, HeadVerifier

from .pushes import PushCheck, PushedHead


def _precheck(policy: Policy, call: ToolCall) -> Verdict | tuple[str, ...]:
    """The same read-free checks as the gate: a verdict ends the check, else the scope D(a)."""
    return resolve_call(call, policy, base_verdict(call))


class FreshnessOnly:
    """Brings the local replica up to date before every action; never checks the plan.

    With `heads` and `owner_of` (key -> owner) it takes the owner-head form: it first asks the
    owners of D(a) for their heads, as an executor that trusts fresh heads would, then catches
    its replica up.
    """

    name = "freshness"

    def __init__(
        self,
        store: AsyncStore,
        policy: Policy,
        *,
        replica: Replica | None = None,
        heads: HeadSource | None = None,
        owner_of: Mapping[str, str] | None = None,
    ) -> None:
        self.store = store
        self.policy = policy
        self.replica = replica if replica is not None else Replica(store)
        self.heads = heads
        self.owner_of: Mapping[str, str] = owner_of or {}

    async def _ask_owners(self, scope: tuple[str, ...]) -> None:
        if self.heads is None:
            return
        owners: dict[str, list[str]] = {}
        for key in scope:
            if key in self.owner_of:
                owners.setdefault(self.owner_of[key], []).append(key)
        if owners:
            await self.heads.heads({o: tuple(ks) for o, ks in owners.items()})

    async def check(self, call: ToolCall) -> Verdict:
        tool, args, plan_id, agent = call.tool, call.args, call.plan, call.agent
        pre = _precheck(self.policy, call)
        if isinstance(pre, Verdict):
            return pre
        await self._ask_owners(pre)
        await self.replica.sync()
        heads = {k: self.replica.head(k) for k in pre}
        return Verdict(
            ALLOW,
            "fresh_state",
            tool,
            plan_id,
            agent,
            scope=pre,
            heads=heads,
            message="local state is current (plan lineage not checked)",
            args_digest=args_digest(args),
        )


@dataclass
class EagerReplica:
    """One executor's replica under eager sync; invalidates plans as updates arrive.

    With `check` (the owners' public keys behind a `PushCheck`), it takes only updates that
    carry their owner's signed head; a refused update leaves its head where it was and
    invalidates every plan that used the key (the replica no longer knows it is current).
    """

    heads: dict[str, str | None] = field(default_factory=dict)
    plan_uses: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)
    invalid: dict[str, set[str]] = field(default_factory=dict)
    received: int = 0
    check: PushCheck | None = None

    def receive(self, pushed: PushedHead) -> None:
        """Take one update (verified first, when this replica checks signatures).

        Raises:
            PushRefused: the update did not verify.
        """
        self.received += 1
        if self.check is not None:
            self.check.check(pushed)
        self.apply(pushed.state.key, pushed.state.head)

    def apply(self, key: str, head: str | None) -> None:
        self.heads[key] = head
        for plan_id, uses in self.plan_uses.items():
            used = uses.get(key)
            if used and used != {head}:
                self.invalid.setdefault(plan_id, set()).add(key)

    def distrust(self, key: str) -> None:
        """An update of `key` did not arrive: no plan that used `key` may act on this replica."""
        for plan_id, uses in self.plan_uses.items():
            if key in uses:
                self.invalid.setdefault(plan_id, set()).add(key)


Push = Callable[[EagerReplica, PushedHead], Awaitable[None]]


class EagerSync:
    """The update path of the eager baseline: a write counts only after every replica has it."""

    def __init__(
        self,
        store: AsyncStore,
        *,
        push: Push | None = None,
        signers: Mapping[str, HeadSigner] | None = None,
        verifier: HeadVerifier | None = None,
    ) -> None:
        """`push(replica, pushed)` delivers one update to one replica (e.g. over the network)
        and returns once that replica acknowledged it (raises `PushRefused` when it did not); a
        write fans out to every replica at once and counts when the last one acknowledged.

        `signers` (author -> its key) sign each owner's head inside its write, as a store's
        signer does; `verifier` (the owners' public keys) makes every replica registered here
        check each update in process before it takes it. A replica behind `push` checks on its
        own side (see the replay's push endpoint).
        """
        self.store = store
        self.replicas: list[EagerReplica] = []
        self.stall_s = 0.0
        self.messages = 0
        self._push = push
        self.signers: Mapping[str, HeadSigner] = signers or {}
        self.verifier = verifier

    def register(self) -> EagerReplica:
        check = PushCheck(self.verifier) if self.verifier is not None else None
        replica = EagerReplica(check=check)
        self.replicas.append(replica)
        return replica

    async def put(
        self, key: str, value: JSON, *, author: str, parents: Iterable[str] = ()
    ) -> Record:
        """Store a new version of `key`; return only after every replica has received it.

        The store commits first and the pushes follow, so an action checked concurrently with a
        `put` can still see its plan as valid: the baseline is safe for writers and actions that
        take turns, which is how the benchmarks drive it.

        Raises:
            PushRefused: some replica did not take the update (after every push finished; that
                replica's plans on `key` are invalidated). And everything `AsyncStore.write`
                raises.
        """
        state = (await self.store.states([key])).get(key)
        if state is None:
            raise UnknownKeyError(key)
        record = Record.create(key, value, author=author, parents=parents, limits=self.store.limits)
        batch = WriteBatch(
            records=(record,),
            ops=(AdvanceHead(key, record.id, state.head, author),),
            signer=self.signers.get(author),
        )
        changes = await self.store.write(batch)
        start = time.perf_counter()
        failures: list[BaseException] = []
        for change in changes:
            # The write was a compare-and-set on the head read above, so the head's sequence is
            # the next one; should it not be (the head went away and back in between), the
            # signature does not match and the replicas refuse: the write fails closed.
            # The owner as the write left it (a transfer to the author may have come between).
            signed = KeyState(
                key, change.owner, change.head, state.version + 1, change.epoch, change.sig
            )
            pushed = PushedHead(signed, record, change.seq)
            results = await asyncio.gather(
                *(self._deliver(replica, pushed) for replica in self.replicas),
                return_exceptions=True,  # every push finishes before a failure is reported
            )
            failures += [r for r in results if isinstance(r, BaseException)]
        self.stall_s += time.perf_counter() - start
        if failures:
            raise failures[0]
        return record

    async def _deliver(self, replica: EagerReplica, pushed: PushedHead) -> None:
        self.messages += 1
        try:
            if self._push is not None:
                await self._push(replica, pushed)
            replica.receive(pushed)
        except BaseException:
            replica.distrust(pushed.state.key)
            raise


class EagerExecutor:
    """Acts without contacting owners: its replica already invalidated superseded plans."""

    name = "eager"

    def __init__(self, store: AsyncStore, policy: Policy, sync: EagerSync) -> None:
        self.store = store
        self.policy = policy
        self.sync = sync
        self.replica = sync.register()

    async def _adopt(self, plan: Record, scope: tuple[str, ...]) -> dict[str, frozenset[str]]:
        """Learn which versions a plan used: the versions of its parents' keys and of D(a)."""
        uses = self.replica.plan_uses.get(plan.id)
        if uses is None:
            parents = await self.store.get_many(plan.parents)
            keys = {r.key for r in parents.values() if r.kind != KIND_PLAN} | set(scope)
            frontier = await self.store.frontier([plan.id], keys)
            uses = {k: v for k, v in frontier.versions.items() if v}
            self.replica.plan_uses[plan.id] = uses
            missing = [k for k in uses if k not in self.replica.heads]
            if missing:
                self.replica.heads.update(await self.store.heads(missing))
            for key, used in uses.items():
                if used != {self.replica.heads.get(key)}:
                    self.replica.invalid.setdefault(plan.id, set()).add(key)
        return uses

    async def check(self, call: ToolCall) -> Verdict:
        tool, args, plan_id, agent = call.tool, call.args, call.plan, call.agent
        pre = _precheck(self.policy, call)
        if isinstance(pre, Verdict):
            return pre
        try:
            plan = await self.store.get(plan_id)
        except UnknownRecordError:
            return Verdict(BLOCK, UNKNOWN_PLAN, tool, plan_id, agent)
        uses = await self._adopt(plan, pre)
        bad = sorted(self.replica.invalid.get(plan.id, set()) | {k for k in pre if k not in uses})
        if not bad:
            return Verdict(
                ALLOW,
                "not_invalidated",
                tool,
                plan_id,
                agent,
                scope=pre,
                args_digest=args_digest(args),
            )
        stale = tuple(
            StaleKey(k, tuple(sorted(uses.get(k, ()))), self.replica.heads.get(k)) for k in bad
        )
        if call.replan_spent:
            return Verdict(BLOCK, STALE_AFTER_REPLAN, tool, plan_id, agent, scope=pre, stale=stale)
        current = await self.store.get_many(s.current for s in stale if s.current)
        records = {s.key: current[s.current] for s in stale if s.current in current}
        return Verdict(
            REPLAN,
            STALE,
            tool,
            plan_id,
            agent,
            scope=pre,
            stale=stale,
            current_records=records,
            args_digest=args_digest(args),
        )


class AllKeysHeads:
    """Head source for the batch all-key check: every request asks for every shared key."""

    def __init__(self, inner: HeadSource, all_keys: Callable[[], Awaitable[Mapping[str, str]]]):
        """`all_keys` returns key -> owner for the whole shared key space."""
        self.inner = inner
        self.all_keys = all_keys
        self.keys_asked = 0

    async def heads(self, owners: Mapping[str, tuple[str, ...]]) -> Mapping[str, HeadAnswer]:
        widened: dict[str, list[str]] = {}
        for key, owner in (await self.all_keys()).items():
            widened.setdefault(owner, []).append(key)
        for owner, keys in owners.items():  # keys the space listing did not know yet
            widened.setdefault(owner, [])
            widened[owner].extend(k for k in keys if k not in widened[owner])
        self.keys_asked += sum(len(v) for v in widened.values())
        return await self.inner.heads({o: tuple(ks) for o, ks in widened.items()})

    async def aclose(self) -> None:
        await self.inner.aclose()


def store_key_space(store: AsyncStore, prefix: str = "") -> Callable[[], Awaitable[dict[str, str]]]:
    async def listing() -> dict[str, str]:
        return {s.key: s.owner for s in await store.keys(prefix)}

    return listing


def freshness_checker(store: AsyncStore, policy: Policy, agent: str | None = None) -> Checker:
    """The freshness-only baseline as a checker factory, for `executors.on_baseline`."""
    return FreshnessOnly(store, policy)
