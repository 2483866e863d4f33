"""Scripted multi-agent workflows with a post-plan revision (the SPEC's r3/r4 story).

Each workflow has owners publishing facts, a planner deriving a plan from what it read, a reviser
committing a new version after planning, and an executor calling a tool with the plan's arguments
through one of the executors (planfence, freshness, eager, allkeys). Whether an action was valid is
judged afterwards from the store's history (the heads at the moment the tool ran versus the plan's
frontier), never from the executor's own verdict.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planfence.plugins.gate import (
    REPLAN,
    AllKeysHeads,
    EagerExecutor,
    EagerSync,
    FreshnessOnly,
    Gate,
    GuardedExecutor,
    Policy,
    Replanned,
    StoreHeads,
    Verdict,
    create_plan,
    store_key_space,
)
from planfence.shared_memory import AsyncStore, Change, Record

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
    ),
}


def key_prefix(wf: Workflow, run: str) -> str:
    return wf.depends_on[0].split("/", 1)[0] + "/" + run


@dataclass
class ActionLog:
    tool: str
    args: dict[str, Any]
    plan_id: str | None
    seq: int
    verdict: str


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "executor": self.executor,
            "completed": self.completed,
            "invalid_actions": self.invalid_actions,
            "replans": self.replans,
            "blocked": self.blocked,
            "actions": self.actions,
        }


def heads_as_of(changes: list[Change], seq: int) -> dict[str, str | None]:
    """Every key's head right after feed entry `seq`, replayed from the change feed."""
    heads: dict[str, str | None] = {}
    for ch in changes:
        if ch.seq > seq:
            break
        if ch.kind == "head":
            heads[ch.key] = ch.head
    return heads


async def used_versions(
    store: AsyncStore, root: str, scope: tuple[str, ...]
) -> dict[str, set[str]]:
    """Which versions of each scope key the plan `root` used, by walking its parents one record
    at a time: written apart from the gate's own walk, so the judge does not share its bugs."""
    used: dict[str, set[str]] = {k: set() for k in scope}
    seen: set[str] = set()
    stack = [root]
    while stack:
        rid = stack.pop()
        if rid in seen:
            continue
        seen.add(rid)
        rec = await store.get(rid)
        if rec.key in used:
            used[rec.key].add(rid)
        else:
            stack.extend(rec.parents)
    return used


async def judge(store: AsyncStore, policy: Policy, action: ActionLog) -> bool:
    """Valid iff the plan behind the arguments had F(x) == {H(x)} for every x in D(a) when the
    tool ran, by the store's history."""
    if action.plan_id is None:
        return False
    tool = policy.get(action.tool)
    if tool is None or tool.ungated:
        return False
    scope = tool.scope(action.args)
    if not scope:
        return False
    used = await used_versions(store, action.plan_id, scope)
    changes: list[Change] = []
    since = 0
    while batch := await store.changes(since, 1000):
        changes.extend(batch)
        since = batch[-1].seq
    heads = heads_as_of(changes, action.seq)
    return all(used[k] == {heads.get(k)} for k in scope)


async def run_workflow(
    store: AsyncStore,
    workflow: str | Workflow,
    executor: str = "planfence",
    *,
    run: str | None = None,
    revise_during_replan: bool = False,
) -> WorkflowResult:
    """Play one workflow against `store` with the named executor."""
    wf = WORKFLOWS[workflow] if isinstance(workflow, str) else workflow
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; choose from {', '.join(EXECUTORS)}")
    run = run or uuid.uuid4().hex[:8]
    prefix = key_prefix(wf, run)
    keys = {suffix: f"{prefix}/{suffix}" for suffix in wf.facts}
    policy = Policy().declare(wf.tool, wf.depends_on)
    planner = "planner"

    # Owners publish the initial facts.
    for suffix, (owner, value) in wf.facts.items():
        await store.own(keys[suffix], owner)
        await store.put(keys[suffix], value, author=owner)

    eager = EagerSync(store) if executor == "eager" else None
    ex: GuardedExecutor
    if executor == "planfence":
        ex = Gate(store, policy, agent="executor")
    elif executor == "allkeys":
        ex = Gate(
            store,
            policy,
            agent="executor",
            heads=AllKeysHeads(StoreHeads(store), store_key_space(store, prefix)),
        )
    elif executor == "freshness":
        ex = FreshnessOnly(store, policy)
    else:
        assert eager is not None
        ex = EagerExecutor(store, policy, eager)

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
            owner = wf.facts[suffix][0]
            current = await store.head(keys[suffix])
            parents = [current] if current else []
            if eager is not None:
                await eager.put(keys[suffix], new_value, author=owner, parents=parents)
            else:
                await store.put(keys[suffix], new_value, author=owner, parents=parents)

    await revise(wf.revisions)

    actions: list[ActionLog] = []

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
        ran_at.append(await store.last_seq())  # the tool's effect happens here
        return {"ok": True, "args": dict(args)}

    outcome = await ex.run(wf.tool, wf.derive(run, values), plan.id, call, replan)
    seq = ran_at[0] if ran_at else await store.last_seq()
    actions.append(
        ActionLog(wf.tool, dict(outcome.args), outcome.plan_id, seq, outcome.final.verdict)
    )

    action_rows = []
    invalid = 0
    for a in actions:
        executed = a.verdict == "allow"
        valid = (await judge(store, policy, a)) if executed else True
        if executed and not valid:
            invalid += 1
        action_rows.append(
            {
                "tool": a.tool,
                "args": a.args,
                "valid": valid,
                "verdict": a.verdict,
                "executed": executed,
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
    )
