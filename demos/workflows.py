"""Scripted multi-agent workflows with a post-plan revision (the SPEC's r3/r4 story).

Each workflow has owners publishing facts, a planner deriving a plan from what it read, a reviser
committing a new version after planning, and an executor calling a tool with the plan's arguments
through one of the executors of the registry in `executors` (planfence, freshness, eager,
allkeys). Whether an action was valid is judged afterwards from the store's history (`judging`:
the heads at the moment the tool ran versus the plan's frontier), never from the executor's own
verdict.

A run reads only what it needs: its own keys are new, so the judge replays the change feed from
the run's start, never the whole feed, and the time per run does not grow with the store's
history. Each run also measures what its executor spent on coordination (`metering.Cost`):
synchronous waits on the action path (owner head requests, the replica catch-up, eager pushes
awaited) and the messages and bytes exchanged.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planfence.plugins.gate import (
    REPLAN,
    Policy,
    Replanned,
    StoreHeads,
    ToolCall,
    Verdict,
    create_plan,
)
from planfence.shared_memory import AsyncStore, Record, WriteBatch
from planfence.shared_memory.batches import AdvanceHead, AssignOwner

from .baselines import EagerSync
from .executors import EXECUTORS, Wiring, build_executor, run_action
from .judging import ActionLog, changes_since_plan, feed_end, judge
from .metering import Cost, MeteredHeads, MeteredReplica, eager_push


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

    first, start = await _take_keys(store, owners, all_keys, publish=executor != "eager")

    async def key_space() -> dict[str, str]:
        """The workflow's shared key space, key -> owner: what `store_key_space(store, prefix)`
        lists, known here without a scan of the store's key table."""
        return {all_keys[suffix]: owner for suffix, (owner, _) in owners.items()}

    eager = EagerSync(store, push=eager_push(cost)) if executor == "eager" else None
    wiring = Wiring(
        store,
        policy,
        agent="executor",
        heads=MeteredHeads(StoreHeads(store), cost),
        key_space=key_space,
        eager=eager,
        replica=MeteredReplica(store, cost, since=start),
    )
    ex = build_executor(executor, wiring)

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

    try:
        action = ToolCall(wf.tool, wf.derive(run, values), plan.id)
        outcome = await run_action(ex, action, call, replan)
    finally:
        close = getattr(ex, "aclose", None)
        if close is not None:  # the gate writes the allows its audit queued
            await close()
    seq = ran_at[0] if ran_at else await feed_end(store, start)
    actions = [ActionLog(wf.tool, dict(outcome.args), outcome.plan_id, seq, outcome.final.verdict)]

    steps = [await _step_row(store, v) for v in outcome.verdicts]
    action_rows = [await _action_row(store, policy, a, start) for a in actions]
    invalid = sum(1 for row in action_rows if row["executed"] and not row["valid"])
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


async def _take_keys(
    store: AsyncStore,
    owners: Mapping[str, tuple[str, Any]],
    all_keys: Mapping[str, str],
    *,
    publish: bool,
) -> tuple[dict[str, Record], int]:
    """Owners take their keys and (unless `publish` is off: under eager sync the first versions
    go through the replicas like every later write) publish their first versions, in one write.
    Returns those versions and the feed position just before the run's first entry."""
    first = {
        suffix: Record.create(all_keys[suffix], value, author=owner, limits=store.limits)
        for suffix, (owner, value) in owners.items()
        if publish
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
    return first, setup[0].seq - 1


async def _step_row(store: AsyncStore, v: Verdict) -> dict[str, Any]:
    stale = await changes_since_plan(store, ((s.key, s.used, s.current) for s in v.stale))
    return {"verdict": v.verdict, "reason": v.reason, "message": v.message, "stale": stale}


async def _action_row(
    store: AsyncStore, policy: Policy, action: ActionLog, start: int
) -> dict[str, Any]:
    """One executed (or refused) action, judged against the store's history since `start`."""
    executed = action.verdict == "allow"
    stale_rows: list[dict[str, Any]] = []
    valid = True
    if executed:
        verdict = await judge(store, policy, action, since=start)
        valid = verdict.valid
        stale_rows = await changes_since_plan(
            store, ((k, verdict.used[k], verdict.heads.get(k)) for k in verdict.stale)
        )
    return {
        "tool": action.tool,
        "args": action.args,
        "valid": valid,
        "verdict": action.verdict,
        "executed": executed,
        "stale": stale_rows,
    }
