"""The executors the demos and benchmarks compare, by name: one registry, used by
`planfence demo workflows`, `planfence bench replay`, and the planfence vs all-key comparisons
of `bench gate` and `bench link`.

Each entry builds a checker (`Checker`) from a `Wiring`: the store and policy, the agent, and the
parts a baseline needs (where owner heads come from, the shared key space, the eager update
path, the replica to keep current). A caller fills in the parts its executors use and meters them
as it likes; the registry decides what each executor is made of.

- `planfence`: the `Gate`, asking the owners of D(a) through `heads`.
- `freshness`: `FreshnessOnly`, catching `replica` up before each action (and, given `owner_of`,
  asking those owners for their heads first); never checks the plan.
- `eager`: `EagerExecutor` on the `eager` update path (every write pushed to every replica).
- `allkeys`: the `Gate` over `AllKeysHeads`: every key of `key_space`, every time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from planfence.plugins.gate import Gate, GateMiddleware, HeadSource, Policy, ToolCall
from planfence.plugins.gate.call import Checker
from planfence.plugins.gate.checkers import CheckerFactory
from planfence.plugins.gate.executor import CallFn, Outcome, ReplanFn
from planfence.plugins.gate.middleware import judge_with
from planfence.shared_memory import AsyncStore
from planfence.shared_memory.replica import Replica

from .baselines import (
    AllKeysHeads,
    EagerExecutor,
    EagerSync,
    FreshnessOnly,
    freshness_checker,
    store_key_space,
)

KeySpace = Callable[[], Awaitable[Mapping[str, str]]]


@dataclass(frozen=True)
class Wiring:
    """What an executor is built from; each executor uses some of the optional parts."""

    store: AsyncStore
    policy: Policy
    agent: str
    heads: HeadSource | None = None  # owner heads: planfence, allkeys (widened), freshness
    key_space: KeySpace | None = None  # allkeys: key -> owner of the whole shared space
    eager: EagerSync | None = None  # eager: the update path its replica is registered on
    replica: Replica | None = None  # freshness: the replica it keeps current
    owner_of: Mapping[str, str] | None = None  # freshness: whose heads to ask for first

    def head_source(self, executor: str) -> HeadSource:
        if self.heads is None:
            raise ValueError(f"the {executor} executor needs a head source (Wiring.heads)")
        return self.heads


def _planfence(w: Wiring) -> Checker:
    return Gate(w.store, w.policy, agent=w.agent, heads=w.head_source("planfence"))


def _freshness(w: Wiring) -> Checker:
    return FreshnessOnly(w.store, w.policy, replica=w.replica, heads=w.heads, owner_of=w.owner_of)


def _eager(w: Wiring) -> Checker:
    return EagerExecutor(w.store, w.policy, w.eager if w.eager is not None else EagerSync(w.store))


def _allkeys(w: Wiring) -> Checker:
    space = w.key_space if w.key_space is not None else store_key_space(w.store)
    return Gate(
        w.store, w.policy, agent=w.agent, heads=AllKeysHeads(w.head_source("allkeys"), space)
    )


REGISTRY: Mapping[str, Callable[[Wiring], Checker]] = {
    "planfence": _planfence,
    "freshness": _freshness,
    "eager": _eager,
    "allkeys": _allkeys,
}
EXECUTORS = tuple(REGISTRY)


async def flush_audit(executor: Checker) -> None:
    """Write the allows a gate's deferred audit has queued; its head source stays open (the
    benchmarks close theirs themselves)."""
    flush = getattr(executor, "flush", None)
    if flush is not None:
        await flush()


async def run_action(
    executor: Checker, call: ToolCall, fn: CallFn, replan: ReplanFn | None = None
) -> Outcome:
    """Run `fn` under `executor`'s verdicts, through the seam every adapter uses (the one-replan
    loop, the fencing token, the lease): `GateMiddleware.run` over the executor as its checker."""
    seam = judge_with(GateMiddleware(executor.store, executor.policy), executor)
    return await seam.run(call, fn, replan)


def on_baseline(
    gate: GateMiddleware, baseline: CheckerFactory = freshness_checker
) -> GateMiddleware:
    """An adapter's gate middleware (`adapter.gate`) judging with a baseline instead of the gate,
    for experiments: `on_baseline(fence.gate)` makes an adapter the freshness-only control.
    Adapters take no checker themselves; this is the one place a baseline plugs in."""
    return judge_with(gate, baseline)


def build_executor(name: str, wiring: Wiring) -> Checker:
    """The executor registered as `name`, built from `wiring`.

    Raises:
        ValueError: no executor has that name, or `wiring` lacks a part it needs.
    """
    try:
        build = REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown executor {name!r}; choose from {', '.join(EXECUTORS)}") from None
    return build(wiring)
