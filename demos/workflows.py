"""Scripted multi-agent workflows with a post-plan revision (the SPEC's r3/r4 story).

Each workflow has owners publishing facts, a planner deriving a plan from what it read, a reviser
committing a new version after planning, and an executor calling a tool with the plan's arguments
through one of the executors (planfence, freshness, eager, allkeys). Whether an action was valid is
judged afterwards from the store's history (the heads at the moment the tool ran versus the plan's
frontier), never from the executor's own verdict.

A run reads only what it needs: its own keys are new, so the judge replays the change feed from
the run's start, never the whole feed, and the time per run does not grow with the store's
history. Each run also measures what its executor spent on coordination (`Cost`): synchronous
waits on the action path (owner head requests, the replica catch-up, eager pushes awaited) and the
messages and bytes exchanged.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planfence.demos.baselines import (
    AllKeysHeads,
    EagerExecutor,
    EagerReplica,
    EagerSync,
    FreshnessOnly,
)
from planfence.plugins.gate import (
    REPLAN,
    Gate,
    GuardedExecutor,
    HeadAnswer,
    HeadSource,
    Policy,
    Replanned,
    StoreHeads,
    Verdict,
    create_plan,
)
from planfence.shared_memory import (
    JSON,
    AdvanceHead,
    AssignOwner,
    AsyncStore,
    Change,
    Record,
    Replica,
    UnknownRecordError,
    WriteBatch,
)

EXECUTORS = ("planfence", "freshness", "eager", "allkeys")


@dataclass(frozen=True)
class Workflow:
    name: str
    tool: str
    depends_on: tuple[str, ...]  # key templates over the tool's arguments
    facts: Mapping[str, tuple[str, Any]]  # key suffix -> (owner, initial value)
    revisions: tuple[tuple[str, Any], ...]  # (key suffix, new value), committed after planning
    derive: Callable[[str, Mapping[str, Any]], dict[str, Any]]  # (run id, values) -> tool args
    goal: Callable[[Mapping[str, Any], Mapping[str, Any]], bool]  # (args, current values) -> ok
    # Shared keys of the same workflow that the plan does not read and the action does not depend
    # on, with a revision after planning: the all-key check asks for them and eager sync pushes
    # their updates anyway, which is the cost the baselines pay for safety.
    other_facts: Mapping[str, tuple[str, Any]] = field(default_factory=dict)
    other_revisions: tuple[tuple[str, Any], ...] = ()


def _booking_args(run: str, v: Mapping[str, Any]) -> dict[str, Any]:
    req = v["requirements"]
    return {"trip": run, "destination": req["destination"], "date": req["date"]}


def _fulfil_args(run: str, v: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "order": run,
        "ship": v["order"]["status"] == "confirmed",
        "address": v["address"]["line"],
    }


def _deploy_args(run: str, v: Mapping[str, Any]) -> dict[str, Any]:
    return {"service": run, "build": v["release"]["build"], "region": v["config"]["region"]}


WORKFLOWS: dict[str, Workflow] = {
    "booking": Workflow(
        "booking",
        "book_trip",
        ("trip/{trip}/requirements",),
        {"requirements": ("customer", {"destination": "Lisbon", "date": "2026-12-03"})},
        (("requirements", {"destination": "Porto", "date": "2026-12-03"}),),
        _booking_args,
        lambda args, cur: args["destination"] == cur["requirements"]["destination"],
        {"notes": ("travel-agent", {"seat": "window"})},
        (("notes", {"seat": "aisle"}),),
    ),
    "fulfilment": Workflow(
        "fulfilment",
        "ship_order",
        ("order/{order}/order", "order/{order}/address"),
        {
            "order": ("sales", {"status": "confirmed", "items": 3}),
            "address": ("customer", {"line": "1 Harbour St"}),
        },
        (("order", {"status": "cancelled", "items": 3}),),
        _fulfil_args,
        lambda args, cur: args["ship"] == (cur["order"]["status"] == "confirmed"),
        {"notes": ("support", {"delivery": "leave at the door"})},
        (("notes", {"delivery": "ring twice"}),),
    ),
    "deploy": Workflow(
        "deploy",
        "deploy_build",
        ("svc/{service}/release", "svc/{service}/config"),
        {
            "release": ("release-manager", {"build": "b-101"}),
            "config": ("sre", {"region": "eu-west"}),
        },
        (("release", {"build": "b-102"}),),
        _deploy_args,
        lambda args, cur: args["build"] == cur["release"]["build"],
        {"oncall": ("sre", {"engineer": "ana"})},
        (("oncall", {"engineer": "bo"}),),
    ),
}


def key_prefix(wf: Workflow, run: str) -> str:
    return wf.depends_on[0].split("/", 1)[0] + "/" + run


# --- coordination cost ------------------------------------------------------------------------


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


def _eager_push(cost: Cost) -> Callable[[EagerReplica, Change, Record], Any]:
    async def push(replica: EagerReplica, change: Change, record: Record) -> None:
        cost.send({"change": change.to_dict(), "record": record.to_dict()})
        cost.send({"ack": change.seq})

    return push


# --- judging ----------------------------------------------------------------------------------


@dataclass
class ActionLog:
    tool: str
    args: dict[str, Any]
    plan_id: str | None
    seq: int  # the last feed entry when the tool ran
    verdict: str


@dataclass(frozen=True)
class Judgement:
    """Whether an action was valid, and for each key in its scope the versions its plan used and
    the head when the tool ran."""

    valid: bool
    used: Mapping[str, frozenset[str]] = field(default_factory=dict)
    heads: Mapping[str, str | None] = field(default_factory=dict)

    @property
    def stale(self) -> list[str]:
        return [k for k, ids in self.used.items() if ids != {self.heads.get(k)}]


_FEED_BATCH = 1000


def heads_as_of(changes: Iterable[Change], seq: int) -> dict[str, str | None]:
    """Every key's head right after feed entry `seq`, replayed from the change feed (the entries
    before the first one given are taken as already applied)."""
    heads: dict[str, str | None] = {}
    for ch in changes:
        if ch.seq > seq:
            break
        if ch.kind == "head":
            heads[ch.key] = ch.head
    return heads


async def feed_between(store: AsyncStore, since: int, until: int | None = None) -> list[Change]:
    """The feed entries after `since` (up to `until`, inclusive): bounded by the entries in that
    window, whatever the store's history before it."""
    out: list[Change] = []
    while batch := await store.changes(since, _FEED_BATCH):
        for ch in batch:
            if until is not None and ch.seq > until:
                return out
            out.append(ch)
        since = batch[-1].seq
        if len(batch) < _FEED_BATCH or since == until:  # the end of the feed, or of the window
            break
    return out


async def feed_end(store: AsyncStore, since: int) -> int:
    """The last feed entry, reading forward from `since` (a recent entry) rather than from 0."""
    changes = await feed_between(store, since)
    return changes[-1].seq if changes else since


async def used_versions(
    store: AsyncStore, root: str, scope: tuple[str, ...]
) -> dict[str, set[str]]:
    """Which versions of each scope key the plan `root` used, by walking its parents one level
    at a time: written apart from the gate's own walk, so the judge does not share its bugs.

    Raises:
        UnknownRecordError: a record of the lineage that the store does not hold.
    """
    used: dict[str, set[str]] = {k: set() for k in scope}
    seen: set[str] = set()
    level = [root]
    while level:
        wanted = [rid for rid in dict.fromkeys(level) if rid not in seen]
        seen.update(wanted)
        found = await store.get_many(wanted)
        missing = [rid for rid in wanted if rid not in found]
        if missing:
            raise UnknownRecordError(missing)
        level = []
        for rid in wanted:
            rec = found[rid]
            if rec.key in used:
                used[rec.key].add(rid)
            else:
                level.extend(rec.parents)
    return used


async def judge(
    store: AsyncStore, policy: Policy, action: ActionLog, *, since: int = 0
) -> Judgement:
    """Valid iff the plan behind the arguments had F(x) == {H(x)} for every x in D(a) when the
    tool ran, by the store's history: the feed after `since` replayed up to the action.

    `since` must precede every change to the action's scope keys (the start of the run that
    created them); the judge reads the records the plan used and the feed after `since` only.
    """
    if action.plan_id is None:
        return Judgement(False)
    tool = policy.get(action.tool)
    if tool is None or tool.ungated:
        return Judgement(False)
    scope = tool.scope(action.args)
    if not scope:
        return Judgement(False)
    used = await used_versions(store, action.plan_id, scope)
    all_heads = heads_as_of(await feed_between(store, since, action.seq), action.seq)
    heads = {k: all_heads.get(k) for k in scope}
    valid = all(used[k] == {heads[k]} for k in scope)
    return Judgement(valid, {k: frozenset(v) for k, v in used.items()}, heads)


# --- what changed, in values ------------------------------------------------------------------


def value_changes(old: JSON, new: JSON) -> dict[str, list[JSON]]:
    """Field -> [old, new] for the fields that differ (`""` for a value that is not an object)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return {
            k: [old.get(k), new.get(k)]
            for k in sorted(old.keys() | new.keys())
            if old.get(k) != new.get(k)
        }
    return {} if old == new else {"": [old, new]}


def _show(value: JSON) -> str:
    if value is None:
        return "(none)"
    return value if isinstance(value, str) else json.dumps(value)


def describe_change(change: Mapping[str, Any]) -> str:
    """`trip/42/requirements: destination Lisbon -> Porto`."""
    fields = change.get("changed") or {}
    parts = [
        f"{name + ' ' if name else ''}{_show(old)} -> {_show(new)}"
        for name, (old, new) in fields.items()
    ]
    if not parts:  # same content, or a record the store no longer answers for
        used = (change.get("used") or ["none"])[0][:10]
        parts = [f"{used} -> {(change.get('current') or 'none')[:10]}"]
    return f"{change['key']}: {', '.join(parts)}"


async def changes_since_plan(
    store: AsyncStore, stale: Iterable[tuple[str, Iterable[str], str | None]]
) -> list[dict[str, Any]]:
    """For each (key, versions the plan used, current head): the record ids and the changed
    field values of the version the plan used against the current one."""
    rows = [(k, sorted(used), cur) for k, used, cur in stale]
    ids = {i for _, used, cur in rows for i in [*used[:1], cur] if i}
    records = await store.get_many(ids)
    out = []
    for key, used, cur in rows:
        old = records.get(used[0]) if used else None
        new = records.get(cur) if cur else None
        changed = value_changes(old.value, new.value) if old and new else {}
        out.append({"key": key, "used": used, "current": cur, "changed": changed})
    return out


# --- one run ----------------------------------------------------------------------------------


@dataclass
class WorkflowResult:
    workflow: str
    executor: str
    run: str
    completed: bool
    invalid_actions: int
    replans: int
    blocked: int
    actions: list[dict[str, Any]] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    cost: Cost = field(default_factory=Cost)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "executor": self.executor,
            "run": self.run,
            "completed": self.completed,
            "invalid_actions": self.invalid_actions,
            "replans": self.replans,
            "blocked": self.blocked,
            "steps": self.steps,
            "actions": self.actions,
            "cost": self.cost.to_dict(),
        }


async def run_workflow(
    store: AsyncStore,
    workflow: str | Workflow,
    executor: str = "planfence",
    *,
    run: str | None = None,
    revise_during_replan: bool = False,
) -> WorkflowResult:
    """Play one workflow against `store` with the named executor.

    The run's keys are new (`run` is a fresh id unless given), so everything the run reads is
    bounded by the run itself, not by the store's history.
    """
    wf = WORKFLOWS[workflow] if isinstance(workflow, str) else workflow
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; choose from {', '.join(EXECUTORS)}")
    run = run or uuid.uuid4().hex[:8]
    prefix = key_prefix(wf, run)
    owners = {**wf.other_facts, **wf.facts}
    all_keys = {suffix: f"{prefix}/{suffix}" for suffix in owners}
    keys = {suffix: all_keys[suffix] for suffix in wf.facts}  # what the planner reads
    policy = Policy().declare(wf.tool, wf.depends_on)
    planner = "planner"
    cost = Cost()

    # Owners take their keys and publish their first versions, in one write (under eager sync
    # the first versions go through the replicas like every later write). The run's first entry
    # in the feed marks where it starts.
    first = {
        suffix: Record.create(all_keys[suffix], value, author=owner, limits=store.limits)
        for suffix, (owner, value) in owners.items()
        if executor != "eager"
    }
    setup = await store.write(
        WriteBatch(
            records=tuple(first.values()),
            ops=(
                *(AssignOwner(all_keys[s], owner, owner) for s, (owner, _) in owners.items()),
                *(AdvanceHead(all_keys[s], rec.id, None, owners[s][0]) for s, rec in first.items()),
            ),
        )
    )
    start = setup[0].seq - 1

    async def key_space() -> dict[str, str]:
        """The workflow's shared key space, key -> owner: what `store_key_space(store, prefix)`
        lists, known here without a scan of the store's key table."""
        return {all_keys[suffix]: owner for suffix, (owner, _) in owners.items()}

    eager = EagerSync(store, push=_eager_push(cost)) if executor == "eager" else None
    ex: GuardedExecutor
    if executor == "planfence":
        ex = Gate(store, policy, agent="executor", heads=MeteredHeads(StoreHeads(store), cost))
    elif executor == "allkeys":
        ex = Gate(
            store,
            policy,
            agent="executor",
            heads=AllKeysHeads(MeteredHeads(StoreHeads(store), cost), key_space),
        )
    elif executor == "freshness":
        fresh = FreshnessOnly(store, policy)
        fresh.replica = MeteredReplica(store, cost, since=start)
        ex = fresh
    else:
        assert eager is not None
        ex = EagerExecutor(store, policy, eager)

    # Each owner's last version of its key (it is the only writer).
    written: dict[str, str] = {suffix: rec.id for suffix, rec in first.items()}

    async def publish(suffix: str, value: Any) -> None:
        """The owner writes a new version on top of its last one (compare-and-set); under eager
        sync it counts once every replica has it, which the writer waits for."""
        owner, key = owners[suffix][0], all_keys[suffix]
        current = written.get(suffix)
        parents = [current] if current else []
        if eager is None:
            rec = await store.put(key, value, author=owner, parents=parents, expected_head=current)
        else:
            before = eager.stall_s
            rec = await eager.put(key, value, author=owner, parents=parents)
            cost.stall(eager.stall_s - before)
        written[suffix] = rec.id

    if eager is not None:
        for suffix, (_, value) in owners.items():
            await publish(suffix, value)

    async def read_all() -> tuple[dict[str, Any], list[str]]:
        states = await store.states(keys.values())
        recs = await store.get_many(s.head for s in states.values() if s.head)
        by_key: dict[str, Record] = {r.key: r for r in recs.values()}
        values = {suffix: by_key[k].value for suffix, k in keys.items()}
        return values, [by_key[k].id for k in keys.values()]

    values, read_set = await read_all()
    plan = await create_plan(
        store, author=planner, parents=read_set, value={"args": wf.derive(run, values)}
    )

    async def revise(changes: tuple[tuple[str, Any], ...]) -> None:
        for suffix, new_value in changes:
            await publish(suffix, new_value)

    await revise(wf.revisions + wf.other_revisions)

    async def replan(verdict: Verdict) -> Replanned:
        vals, reads = await read_all()
        new = await create_plan(
            store,
            author=planner,
            parents=reads,
            value={"args": wf.derive(run, vals)},
            supersedes=verdict.plan,
        )
        if revise_during_replan:  # another revision lands while the new plan is in flight
            suffix, value = wf.revisions[0]
            await revise(((suffix, {**value, "_rev": 2}),))
        return Replanned(new.id, new.value["args"])

    ran_at: list[int] = []

    async def call(args: Mapping[str, Any]) -> dict[str, Any]:
        ran_at.append(await feed_end(store, start))  # the tool's effect happens here
        return {"ok": True, "args": dict(args)}

    outcome = await ex.run(wf.tool, wf.derive(run, values), plan.id, call, replan)
    seq = ran_at[0] if ran_at else await feed_end(store, start)
    actions = [ActionLog(wf.tool, dict(outcome.args), outcome.plan_id, seq, outcome.final.verdict)]

    steps = []
    for v in outcome.verdicts:
        stale = await changes_since_plan(store, ((s.key, s.used, s.current) for s in v.stale))
        steps.append(
            {"verdict": v.verdict, "reason": v.reason, "message": v.message, "stale": stale}
        )

    action_rows = []
    invalid = 0
    for a in actions:
        executed = a.verdict == "allow"
        stale_rows: list[dict[str, Any]] = []
        valid = True
        if executed:
            verdict = await judge(store, policy, a, since=start)
            valid = verdict.valid
            stale_rows = await changes_since_plan(
                store, ((k, verdict.used[k], verdict.heads.get(k)) for k in verdict.stale)
            )
        if executed and not valid:
            invalid += 1
        action_rows.append(
            {
                "tool": a.tool,
                "args": a.args,
                "valid": valid,
                "verdict": a.verdict,
                "executed": executed,
                "stale": stale_rows,
            }
        )
    current, _ = await read_all()
    completed = outcome.executed and wf.goal(outcome.args, current) and invalid == 0
    return WorkflowResult(
        workflow=wf.name,
        executor=executor,
        run=run,
        completed=completed,
        invalid_actions=invalid,
        replans=sum(1 for v in outcome.verdicts if v.verdict == REPLAN),
        blocked=0 if outcome.executed else 1,
        actions=action_rows,
        verdicts=list(outcome.verdicts),
        steps=steps,
        cost=cost,
    )
