"""One pass over the stream per strategy, and every strategy over seeds and rho.

Counting follows the authors' code: every post-warm-up step is a step for every strategy
(unchanged candidates included), so comparisons per step = comparisons / (steps - K), and the
cost proxy is comparisons x (K + L). Random and periodic are matched to Janus's comparisons
per step on the same seed and rho.
"""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import signal
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from planfence.plugins.janus import (
    CachedEncoder,
    CoverageMemo,
    Encoder,
    HashingEncoder,
    JanusConfig,
    JanusController,
    MomentumSource,
    Task,
    WordLlamaEncoder,
)
from planfence.shared_memory.extras import extra_imports

from ..harness.lifeline import die_with_parent
from .stream import Cheatsheet, Stream, StreamConfig

with extra_imports("janus", "planfence bench janus"):
    import numpy as np

STRATEGIES = (
    "plain",
    "janus",
    "always",
    "random",
    "periodic",
    "janus-no-coverage",
    "janus-no-boundary",
    "janus-no-fresh",
)
REFERENCE = ("memory-free", "ceiling")
"""Calibration runs without a controller: no memory, and only harmless candidates deployed."""


def other_source(source: MomentumSource) -> MomentumSource:
    return "all" if source == "deployed" else "deployed"


def source_strategy(source: MomentumSource) -> str:
    """The extra strategy that runs Janus with the other momentum source."""
    return f"janus-momentum-{other_source(source)}"


@dataclass
class Run:
    rho: float
    strategy: str
    seed: int
    final_accuracy: float
    eval_redraw: float = 1.0
    comparisons: int = 0
    post_warmup_steps: int = 0
    deployed: int = 0
    rejected: int = 0
    cost_proxy: int = 0
    harmful: int = 0
    harmful_compared: int = 0
    harmful_deployed: int = 0
    benign: int = 0
    benign_compared: int = 0
    benign_rejected: int = 0
    curve: list[float] = field(default_factory=list)

    @property
    def comparisons_per_step(self) -> float:
        return self.comparisons / self.post_warmup_steps if self.post_warmup_steps else 0.0

    def row(self) -> dict[str, Any]:
        return {
            "eval_redraw": self.eval_redraw,
            "rho": self.rho,
            "strategy": self.strategy,
            "seed": self.seed,
            "final_accuracy": round(self.final_accuracy, 5),
            "comparisons": self.comparisons,
            "comparisons_per_step": round(self.comparisons_per_step, 5),
            "cost_proxy": self.cost_proxy,
            "deployed": self.deployed,
            "rejected": self.rejected,
            "harmful": self.harmful,
            "harmful_compared": self.harmful_compared,
            "harmful_deployed": self.harmful_deployed,
            "benign": self.benign,
            "benign_compared": self.benign_compared,
            "benign_rejected": self.benign_rejected,
        }


class LatentEvaluator:
    """A task is solved under a memory when its `u` is below the solve probability: the task's
    latent `u` (paired: the same task gives the same answer under memories that give it the
    same probability), or with probability `stream.config.eval_redraw` a fresh draw (sampling
    at temperature). At R = 1 every evaluation is an independent draw."""

    def __init__(
        self, stream: Stream, rng: np.random.Generator, coins: np.random.Generator
    ) -> None:
        self.stream = stream
        self.rng = rng
        self.coins = coins

    async def evaluate(self, memory: Cheatsheet, tasks: Sequence[Task]) -> list[bool]:
        if not tasks:
            return []
        stream = self.stream
        r = stream.config.eval_redraw
        fresh = self.rng.random(len(tasks))
        index = stream.index
        at = [index.get(t.id, -1) for t in tasks]
        # Stream tasks (the controller only ever sees those) read the stream's arrays.
        known = -1 not in at and all(stream.tasks[i] is t for i, t in zip(at, tasks, strict=True))
        if r < 1.0:
            latent = stream.latents[at] if known else np.array([stream.latent[t.id] for t in tasks])
            u = latent if r <= 0.0 else np.where(self.coins.random(len(tasks)) < r, fresh, latent)
        else:
            u = fresh
        hits = u < (stream.p_tasks(memory)[at] if known else stream.p_many(memory, tasks))
        return [bool(h) for h in hits]


def strategy_config(name: str, base: JanusConfig, rate: float) -> JanusConfig:
    """Controller settings of one strategy; `rate` is Janus's comparisons per step."""
    rate = min(1.0, max(rate, 1e-6))
    table: dict[str, dict[str, Any]] = {
        "plain": {"trigger": "never"},
        "janus": {},
        "always": {"trigger": "always"},
        "random": {"trigger": "random", "random_rate": rate},
        "periodic": {"trigger": "periodic", "period": max(1, round(1 / rate))},
        "janus-no-coverage": {"use_coverage": False},
        "janus-no-boundary": {"use_boundary": False},
        "janus-no-fresh": {"use_fresh": False},
    }
    if name.startswith("janus-momentum-"):
        return replace(base, momentum_source=other_source(base.momentum_source))
    return replace(base, **table[name])


async def run_strategy(
    stream: Stream,
    name: str,
    config: JanusConfig,
    encoder: Encoder,
    *,
    rho: float,
    curve_every: int,
    eval_seed: int,
    memo: CoverageMemo | None = None,
) -> Run:
    """One pass over the stream under one strategy."""
    evaluator = LatentEvaluator(
        stream,
        np.random.default_rng([stream.seed, 6, eval_seed]),
        np.random.default_rng([stream.seed, 10, eval_seed]),
    )
    controller = JanusController(
        evaluator, config=config, encoder=encoder, render=stream.render, coverage_memo=memo
    )
    memory: Cheatsheet = ()
    out = Run(rho, name, stream.seed, 0.0, stream.config.eval_redraw)
    for step in range(len(stream.tasks)):
        proposal = stream.propose(memory, step, stream.attempt(memory, step))
        verdict = await controller.consider(memory, proposal.memory, stream.tasks[step])
        if step >= config.support_size:
            if proposal.harmful:
                out.harmful += 1
                out.harmful_compared += verdict.compared
                out.harmful_deployed += verdict.deploy
            elif proposal.label != "none":
                out.benign += 1
                out.benign_compared += verdict.compared
                out.benign_rejected += not verdict.deploy
        if verdict.deploy:
            memory = proposal.memory
        if (step + 1) % curve_every == 0:
            out.curve.append(stream.expected_accuracy(memory))
    c = controller.state.counters
    out.final_accuracy = stream.expected_accuracy(memory)
    out.comparisons, out.deployed, out.rejected = c.comparisons, c.deployed, c.rejected
    out.post_warmup_steps = max(0, c.steps - config.support_size)
    out.cost_proxy = c.comparisons * (config.support_size + config.fresh_size)
    return out


def run_reference(stream: Stream, name: str, *, rho: float, curve_every: int) -> Run:
    """Memory-free, or the harm-free ceiling (every harmless candidate, no harmful one)."""
    memory: Cheatsheet = ()
    out = Run(rho, name, stream.seed, 0.0, stream.config.eval_redraw)
    for step in range(len(stream.tasks)):
        if name == "ceiling":
            proposal = stream.propose(memory, step, stream.attempt(memory, step))
            if not proposal.harmful:
                memory = proposal.memory
        if (step + 1) % curve_every == 0:
            out.curve.append(stream.expected_accuracy(memory))
    out.final_accuracy = stream.expected_accuracy(memory)
    return out


@dataclass(frozen=True)
class SharedEncoder:
    """An encoder by name, loaded once per process (picklable, so a worker process can load it).

    Every stream of a run shares it, so a text met again (a seed's tasks at every rho, an
    early memory) is encoded once.
    """

    name: Literal["wordllama", "hashing"]

    def __call__(self) -> Encoder:
        return _loaded(self.name)


@functools.cache
def _loaded(name: str) -> Encoder:
    inner: Encoder = WordLlamaEncoder() if name == "wordllama" else HashingEncoder()
    return CachedEncoder(inner, max_items=200_000)


@dataclass(frozen=True)
class Plan:
    """What to run: seeds x rhos x eval_redraws, every strategy, with one encoder and momentum
    source."""

    seeds: int
    rhos: tuple[float, ...]
    stream: StreamConfig
    encoder: Callable[[], Encoder]
    momentum_source: MomentumSource = "deployed"
    curve_every: int = 25
    jobs: int = 1
    """Worker processes; above 1 `encoder` must be picklable (a `SharedEncoder`)."""
    redraws: tuple[float, ...] = (1.0,)
    """The values of `eval_redraw` (R) swept."""

    @property
    def cells(self) -> list[tuple[float, float]]:
        """(R, rho) in report order."""
        return [(r, rho) for r in self.redraws for rho in self.rhos]


async def run_seed(
    plan: Plan, rho: float, seed: int, memo: CoverageMemo | None = None, redraw: float = 1.0
) -> list[Run]:
    """Every strategy (and the two references) on one stream.

    `memo` shares coverage sets between the strategies (and the rhos of a seed, which meet the
    same tasks): always-compare clusters at every step, identically at every rho, and the
    Janus variants often cluster the same tasks from the same centroids. The sets are the ones
    each controller would compute itself."""
    memo = CoverageMemo() if memo is None else memo
    stream = Stream(replace(plan.stream, rho=rho, eval_redraw=redraw), seed)
    made = plan.encoder()
    encoder = made if isinstance(made, CachedEncoder) else CachedEncoder(made)
    base = JanusConfig(seed=seed, momentum_source=plan.momentum_source)
    every = plan.curve_every
    runs = [run_reference(stream, n, rho=rho, curve_every=every) for n in REFERENCE]
    names = [*STRATEGIES, source_strategy(plan.momentum_source)]
    janus = await run_strategy(
        stream, "janus", base, encoder, rho=rho, curve_every=every, eval_seed=1, memo=memo
    )
    for i, name in enumerate(names):
        if name == "janus":
            runs.append(janus)
            continue
        cfg = strategy_config(name, base, janus.comparisons_per_step)
        runs.append(
            await run_strategy(
                stream, name, cfg, encoder, rho=rho, curve_every=every, eval_seed=i + 2, memo=memo
            )
        )
    return runs


Cell = tuple[float, float]
"""(eval_redraw, rho)"""


def _cells(plan: Plan, seed: int) -> Iterator[tuple[Cell, list[Run]]]:
    """One seed in every cell (its tasks, shared by every cell, are encoded and clustered
    once)."""
    memo = CoverageMemo()
    for redraw, rho in plan.cells:
        yield (redraw, rho), asyncio.run(run_seed(plan, rho, seed, memo, redraw))


_worker_plan: Plan | None = None


def _start_worker(plan: Plan) -> None:
    global _worker_plan
    # Ctrl-C is the parent's to handle: it stops the workers itself; a killed parent cannot.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    _worker_plan = plan


def _work(seed: int) -> tuple[int, list[tuple[Cell, list[Run]]]]:
    assert _worker_plan is not None
    return seed, list(_cells(_worker_plan, seed))


def run_all(
    plan: Plan,
    *,
    progress: Callable[[str], None] = lambda _: None,
    runs: list[Run] | None = None,
) -> list[Run]:
    """Every (R, rho, seed); `runs` holds the finished streams' runs as they come, always in
    the order R by R, rho by rho, seed by seed (whatever order the workers finish in).

    With `plan.jobs` > 1 the seeds run in that many worker processes; each stream's results
    depend only on its seed and rho, so they are the same as in one process.
    """
    runs = [] if runs is None else runs
    done: dict[tuple[Cell, int], list[Run]] = {}

    def finished(key: Cell, seed: int, cell: list[Run]) -> None:
        done[key, seed] = cell
        runs[:] = [r for c in plan.cells for s in range(plan.seeds) for r in done.get((c, s), [])]
        progress(f"R {key[0]} rho {key[1]} seed {seed}")

    jobs = min(plan.jobs, plan.seeds)
    if jobs <= 1:
        for seed in range(plan.seeds):
            for key, cell in _cells(plan, seed):
                finished(key, seed, cell)
        return runs
    context = multiprocessing.get_context("spawn")
    pool = context.Pool(jobs, initializer=_start_worker, initargs=(plan,))
    try:
        for seed, cells in pool.imap_unordered(_work, range(plan.seeds)):
            for key, cell in cells:
                finished(key, seed, cell)
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()
    return runs
