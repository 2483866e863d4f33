"""One executor's replicas replaying one stream in their own key space: planning, the owners'
updates, the checks, and the row of numbers it leaves."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from planfence.adapters.owner_service import PublicKeyring
from planfence.demos.baselines import EagerExecutor, EagerSync, FreshnessOnly
from planfence.demos.bench.harness.stats import percentile
from planfence.demos.bench.harness.tasks import together
from planfence.demos.executors import flush_audit, run_action
from planfence.demos.judging import heads_as_of, used_versions
from planfence.plugins.gate import BLOCK, Policy, Replanned, ToolCall, Verdict, create_plan
from planfence.plugins.gate.call import Checker
from planfence.shared_memory import AsyncStore, Change

from ..harness.wire import CountedOwnerHeads
from .config import Config, Team
from .executors import Timed, replica_executor
from .push import HTTP_TIMEOUT_S, KEEPALIVE_S, Pusher
from .schedule import Window, expect

PLANNER = "planner"
TOOL_1, TOOL_2 = "act1", "act2"


def replay_policy() -> Policy:
    return (
        Policy()
        .declare(TOOL_1, ["rp/{space}/{x}"])
        .declare(TOOL_2, ["rp/{space}/{x}", "rp/{space}/{y}"])
    )


@dataclass
class Tally:
    action_s: list[float] = field(default_factory=list)  # per window
    update_s: list[float] = field(default_factory=list)  # per window
    push_s: list[float] = field(default_factory=list)  # per update (eager)
    replans: int = 0
    blocks: int = 0
    executed: int = 0
    updates: int = 0
    block_reasons: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Acted:
    tool: str
    args: Mapping[str, Any]
    plan_id: str
    seq: int


class Run:
    """One executor's replicas replaying one stream in their own key space."""

    def __init__(
        self,
        store: AsyncStore,
        policy: Policy,
        team: Team,
        config: Config,
        executor: str,
        path: str,
        rate: float,
        windows: list[Window],
        owner_urls: Mapping[str, str],
        replica_urls: Mapping[str, str],
    ) -> None:
        self.store = store
        self.policy = policy
        self.team = team
        self.executor = executor
        self.path = path
        self.rate = rate
        self.windows = windows
        self.owner_urls = owner_urls
        self.replica_urls = replica_urls
        self.space_id = f"{path}-r{rate:g}-{executor}"  # one key segment
        self.space = f"rp/{self.space_id}"
        self.keys = [f"{self.space}/k{i:02d}" for i in range(config.keys)]
        self.owner_of = {k: team.owners[i % len(team.owners)] for i, k in enumerate(self.keys)}
        self.pad = "." * config.value_bytes
        self.versions = [0] * config.keys
        self.tally = Tally()
        self.acted: list[Acted] = []
        self.executors: list[Timed] = []
        self.heads: list[CountedOwnerHeads] = []
        self.sync: EagerSync | None = None
        self.pusher: Pusher | None = None
        self.start_seq = 0
        self._sent = (0, 0)

    # -- set-up and tear-down

    async def setup(self) -> None:
        self.start_seq = await self.store.last_seq()
        for i, key in enumerate(self.keys):
            await self.store.own(key, self.owner_of[key])
            await self.store.put(key, self._value(i), author=self.owner_of[key])
        keyring = self.team.keyring
        if self.executor == "eager":  # owners sign each head in its write; replicas verify
            self.pusher = Pusher(self.replica_urls)
            self.sync = EagerSync(self.store, push=self.pusher.push, signers=self.team.owner_keys)
        for name in self.team.replicas:
            self.executors.append(Timed(self._executor(name, keyring)))
        await self._warm()
        self._sent = self._traffic()

    def _executor(self, name: str, keyring: PublicKeyring) -> Checker:
        heads = None
        if self.executor != "eager":  # eager never asks owners: updates come to it
            heads = CountedOwnerHeads(
                self.owner_urls,
                keyring,
                agent=name,
                timeout=HTTP_TIMEOUT_S,
                limits=httpx.Limits(keepalive_expiry=KEEPALIVE_S),
                signing_key=self.team.keys[name],
            )
            self.heads.append(heads)
        built = replica_executor(
            self.executor,
            name,
            self.store,
            self.policy,
            heads=heads,
            space=self.space,
            owner_of=self.owner_of,
            sync=self.sync,
        )
        if isinstance(built, EagerExecutor):
            assert self.pusher is not None
            self.pusher.bind(built.replica, name)
        return built

    async def _warm(self) -> None:
        """Open every connection and fill every cache that a first timed action would pay for."""
        one_key = {
            owner: (next(k for k, o in self.owner_of.items() if o == owner),)
            for owner in self.team.owners
        }

        async def ask(http: CountedOwnerHeads) -> None:
            answers = await http.heads(one_key)
            bad = [a for a in answers.values() if a.error]
            if bad:
                raise RuntimeError(f"owner service refused the replay: {bad[0]}")

        # untimed, so the connections open side by side (over the link, one after another
        # would cost a round trip each)
        await together([ask(http) for http in self.heads])
        if self.pusher is not None:
            await self.pusher.warm()
        for ex in self.executors:
            if isinstance(ex.inner, FreshnessOnly):
                await ex.inner.replica.sync()

    def _traffic(self) -> tuple[int, int]:
        if self.pusher is not None:
            return self.pusher.requests, self.pusher.bytes
        return (
            sum(h.stats.requests for h in self.heads),
            sum(h.stats.total_bytes for h in self.heads),
        )

    async def aclose(self) -> None:
        for ex in self.executors:
            await flush_audit(ex.inner)  # the allows a gate's deferred audit queued
        if self.pusher is not None:
            await self.pusher.aclose()
        for heads in self.heads:
            await heads.aclose()

    # -- the stream

    def _value(self, i: int) -> dict[str, Any]:
        return {"n": self.versions[i], "pad": self.pad}

    async def _update(self, indexes: tuple[int, ...]) -> float:
        """The owners commit new versions; the update path's stall (eager: push waits)."""
        stall = 0.0
        for i in indexes:
            key, owner = self.keys[i], self.owner_of[self.keys[i]]
            self.versions[i] += 1
            current = await self.store.head(key)
            parents = [current] if current else []
            if self.sync is not None:
                before = self.sync.stall_s
                await self.sync.put(key, self._value(i), author=owner, parents=parents)
                self.tally.push_s.append(self.sync.stall_s - before)
                stall += self.sync.stall_s - before
            else:
                await self.store.put(key, self._value(i), author=owner, parents=parents)
            self.tally.updates += 1
        return stall

    async def _plan(
        self, indexes: tuple[int, ...], supersedes: str | None = None
    ) -> tuple[str, str, dict[str, Any]]:
        """The planner reads the current versions of D(a) and derives a plan citing them."""
        keys = [self.keys[i] for i in indexes]
        states = await self.store.states(keys)
        heads = [states[k].head for k in keys]
        records = await self.store.get_many(h for h in heads if h)
        tool = TOOL_1 if len(indexes) == 1 else TOOL_2
        args: dict[str, Any] = {"space": self.space_id, "x": f"k{indexes[0]:02d}"}
        if len(indexes) == 2:
            args["y"] = f"k{indexes[1]:02d}"
        args["basis"] = [records[h].value["n"] for h in heads if h]
        plan = await create_plan(
            self.store,
            author=PLANNER,
            parents=[h for h in heads if h],
            value={"tool": tool, "args": args},
            supersedes=supersedes,
        )
        return plan.id, tool, args

    async def window(self, w: Window) -> None:
        ex = self.executors[w.replica]
        plan_id, tool, args = await self._plan(w.keys)
        update_s = await self._update(w.post)
        late_done = False

        async def replan(verdict: Verdict) -> Replanned:
            nonlocal late_done, update_s
            new_id, _, new_args = await self._plan(w.keys, supersedes=verdict.plan)
            update_s += await self._update(w.late)  # revisions land while the replan is made
            late_done = True
            return Replanned(new_id, new_args)

        ran_at: list[int] = []

        async def call(a: Mapping[str, Any]) -> dict[str, Any]:
            ran_at.append(await self.store.last_seq())  # the tool's effect happens here
            return {"ok": True}

        spent = ex.spent
        agent = self.team.replicas[w.replica]
        outcome = await run_action(ex, ToolCall(tool, args, plan_id, agent), call, replan)
        action_s = ex.spent - spent
        if not late_done:
            update_s += await self._update(w.late)
        self.tally.action_s.append(action_s)
        self.tally.update_s.append(update_s)
        self.tally.replans += outcome.replans
        if outcome.executed:
            assert outcome.plan_id is not None
            self.tally.executed += 1
            self.acted.append(Acted(tool, dict(outcome.args), outcome.plan_id, ran_at[0]))
        elif outcome.final.verdict == BLOCK:
            self.tally.blocks += 1
            reason = outcome.final.reason
            self.tally.block_reasons[reason] = self.tally.block_reasons.get(reason, 0) + 1
        else:  # pragma: no cover - the executors above allow, replan or block
            raise RuntimeError(f"unexpected verdict {outcome.final.verdict}")

    # -- judging and reporting

    async def invalid_actions(self) -> int:
        """Executed actions whose plan was not on the heads when the tool ran, by the store's
        change feed (not by any executor's own verdict)."""
        changes: list[Change] = []
        since = self.start_seq
        while batch := await self.store.changes(since, 1000):
            changes.extend(c for c in batch if c.key.startswith(self.space + "/"))
            since = batch[-1].seq
        invalid = 0
        for act in self.acted:
            declared = self.policy.get(act.tool)
            assert declared is not None
            scope = declared.scope(act.args)
            used = await used_versions(self.store, act.plan_id, scope)
            heads = heads_as_of(changes, act.seq)
            if not all(used[k] == {heads.get(k)} for k in scope):
                invalid += 1
        return invalid

    async def row(self) -> dict[str, Any]:
        t = self.tally
        n = len(t.action_s)
        stall_ms = [(a + u) * 1000 for a, u in zip(t.action_s, t.update_s, strict=True)]
        requests, sent = self._traffic()
        exp = expect(self.windows)
        return {
            "path": self.path,
            "rate": self.rate,
            "executor": self.executor,
            "actions": n,
            "updates": t.updates,
            "stall_p50_ms": round(percentile(stall_ms, 50), 3),
            "stall_mean_ms": round(statistics.fmean(stall_ms), 3),
            "action_path_mean_ms": round(statistics.fmean(t.action_s) * 1000, 3),
            "update_path_mean_ms": round(statistics.fmean(t.update_s) * 1000, 3),
            "push_p50_ms": round(percentile(t.push_s, 50) * 1000, 3) if t.push_s else None,
            "messages_per_action": round((requests - self._sent[0]) / n, 3),
            "bytes_per_action": round((sent - self._sent[1]) / n, 1),
            "replans": t.replans,
            "blocks": t.blocks,
            "block_reasons": dict(sorted(t.block_reasons.items())),
            "executed": t.executed,
            "invalid": await self.invalid_actions(),
            "expected_stale": exp.stale,
            "expected_overtaken": exp.overtaken,
            "trace_ms": None,  # on the emulated link: how much of the trace this rate replayed
        }
