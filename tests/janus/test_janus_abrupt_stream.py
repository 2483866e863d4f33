"""The momentum trigger on the paper's own premise: harmful updates are abrupt rewrites.

On `abrupt_stream` (benign updates append one rule; harmful ones truncate the cheatsheet or
rewrite it around one topic) the `deployed` momentum source catches most harmful updates with
few comparisons, and the reference rule (`all`, a rejected rewrite feeds the momentum) is the
control that shows the property can fail. Both run the paper's method (`JanusConfig.paper`).
The budgeted trigger (the default) catches what the momentum misses: a rewrite around the
current topic points where the recent appends pointed, but it drops most of the lines.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from abrupt_stream import AbruptStream, accuracy, solved

from planfence.plugins.janus import FunctionEvaluator, HashingEncoder, JanusConfig, JanusController
from planfence.plugins.janus.config import MomentumSource
from planfence.plugins.janus.encoders import CachedEncoder

SEEDS = range(6)


@dataclass
class Outcome:
    accuracy: float
    comparisons_per_step: float
    harmful: int
    caught: int


async def run(seed: int, config: JanusConfig, encoder: CachedEncoder) -> Outcome:
    stream = AbruptStream(seed)
    controller = JanusController(
        FunctionEvaluator(solved), config=config, encoder=encoder, render="\n".join
    )
    memory: list[str] = []
    harmful = caught = 0
    for step, task in enumerate(stream.tasks):
        candidate, bad = stream.propose(memory, step)
        verdict = await controller.consider(memory, candidate, task)
        if bad:
            harmful += 1
            caught += verdict.compared
        if verdict.deploy:
            memory = candidate
    c = controller.state.counters
    steps = c.steps - config.support_size
    return Outcome(accuracy(memory, stream.holdout), c.comparisons / steps, harmful, caught)


def totals(
    source: MomentumSource | None, trigger: str = "momentum", *, paper: bool = True
) -> Outcome:
    encoder = CachedEncoder(HashingEncoder())
    runs = []
    make = JanusConfig.paper if paper else JanusConfig
    for seed in SEEDS:
        config = make(seed=seed, trigger=trigger)
        if source is not None:
            config = make(seed=seed, momentum_source=source)
        runs.append(asyncio.run(run(seed, config, encoder)))
    return Outcome(
        sum(r.accuracy for r in runs) / len(runs),
        sum(r.comparisons_per_step for r in runs) / len(runs),
        sum(r.harmful for r in runs),
        sum(r.caught for r in runs),
    )


@pytest.fixture(scope="module")
def deployed() -> Outcome:
    return totals("deployed")


@pytest.fixture(scope="module")
def reference() -> Outcome:
    return totals("all")


@pytest.fixture(scope="module")
def always() -> Outcome:
    return totals(None, trigger="always")


def test_deployed_momentum_catches_most_abrupt_harm_with_few_comparisons(
    deployed: Outcome,
) -> None:
    assert deployed.harmful >= 60
    assert deployed.caught / deployed.harmful >= 0.8
    assert deployed.comparisons_per_step <= 0.3


def test_the_reference_rule_is_the_control_rejected_rewrites_hide_the_next_one(
    deployed: Outcome, reference: Outcome
) -> None:
    assert reference.caught / reference.harmful < 0.7
    assert reference.accuracy < deployed.accuracy - 0.2


@pytest.fixture(scope="module")
def budgeted() -> Outcome:
    return totals(None, "budget", paper=False)


@pytest.fixture(scope="module")
def budgeted_always() -> Outcome:
    return totals(None, "always", paper=False)


def test_the_budgeted_trigger_catches_the_rewrites_the_momentum_misses(
    budgeted: Outcome, budgeted_always: Outcome, deployed: Outcome
) -> None:
    assert budgeted.caught / budgeted.harmful >= 0.95 > deployed.caught / deployed.harmful
    assert budgeted.comparisons_per_step <= 0.3
    assert budgeted.accuracy >= budgeted_always.accuracy - 0.01
    assert budgeted.accuracy > deployed.accuracy


@pytest.mark.xfail(
    strict=True,
    reason="a rewrite around the current topic points where recent appends pointed, so the "
    "trigger misses it (cos > 0) and the lost rules cost more than 0.01 of accuracy",
)
def test_accuracy_within_a_point_of_always_compare(deployed: Outcome, always: Outcome) -> None:
    assert deployed.accuracy >= always.accuracy - 0.01
