"""One pass over a stream per strategy, and every strategy over streams, seeds, R and rho.

Counting follows the authors' code: every post-warm-up step is a step for every strategy
(unchanged candidates included), so comparisons per step = comparisons / (steps - K), and the
cost proxy is comparisons x (K + L); `evaluations` counts the tasks actually solved (aimed
tasks included). Random and periodic are matched to Janus's comparisons per step on the same
stream, seed, R and rho.
"""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import signal
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from planfence.plugins.janus import (
    CoverageMemo,
    Encoder,
    HashingEncoder,
    JanusConfig,
    JanusController,
    Task,
    WordLlamaEncoder,
)
from planfence.plugins.janus.calibration import PRIOR
from planfence.plugins.janus.config import MomentumSource
from planfence.plugins.janus.encoders import CachedEncoder
from planfence.shared_memory.extras import extra_imports

from ..harness.lifeline import die_with_parent
from .runbook import RunbookConfig, RunbookStream
from .strategies import (
    PAPER_STRATEGIES,
    REFERENCE,
    RUNBOOK_RHO,
    SETTLE_TOLERANCE,
    STRATEGIES,
    STREAMS,
    settle_point,
    source_strategy,
    strategy_config,
)
from .stream import Proposal, Stream, StreamConfig

__all__ = ["REFERENCE", "STRATEGIES", "STREAMS", "LatentEvaluator", "Plan", "Run", "run_all"]

with extra_imports("janus", "planfence bench janus"):
    import numpy as np


class StreamSettings(Protocol):
    @property
    def eval_redraw(self) -> float: ...


class BenchStream(Protocol):
    """What a strategy's pass and the evaluator read from a stream (`Stream`, `RunbookStream`)."""

    seed: int
    tasks: list[Task]
    latent: dict[str, float]
    index: dict[str, int]
    latents: np.ndarray

    @property
    def config(self) -> StreamSettings: ...

    def p_tasks(self, memory: Any) -> np.ndarray: ...
    def p_many(self, memory: Any, tasks: Sequence[Task]) -> np.ndarray: ...
    def render(self, memory: Any) -> str: ...
    def expected_accuracy(self, memory: Any) -> float: ...
    def attempt(self, memory: Any, step: int) -> bool: ...
    def propose(self, memory: Any, step: int, solved: bool) -> Proposal[Any]: ...


@dataclass
class Run:
    rho: float
    strategy: str
    seed: int
    final_accuracy: float
    eval_redraw: float = 1.0
    stream: str = "calibrated"
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
    benign_against: int = 0
    """Benign candidates that turned against the momentum (cos < 0): the paper's premise."""
    evaluations: int = 0
    labelled: int = 0
    """Comparisons whose changed tasks all moved one way (the calibration's examples)."""
    settle: int | None = None
    """Comparisons after which the calibrated harm probability of the run's candidates stays
    within `SETTLE_TOLERANCE` of the final model's, on average (see `settle_point`)."""
    curve: list[float] = field(default_factory=list)

    @property
    def comparisons_per_step(self) -> float:
        return self.comparisons / self.post_warmup_steps if self.post_warmup_steps else 0.0

    def row(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
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
            "benign_against": self.benign_against,
            "evaluations": self.evaluations,
            "labelled": self.labelled,
            "settle": self.settle,
        }


class LatentEvaluator:
    """A task is solved under a memory when its `u` is below the solve probability: the task's
    latent `u` (paired: the same task gives the same answer under memories that give it the
    same probability), or with probability `stream.config.eval_redraw` a fresh draw (sampling
    at temperature). At R = 1 every evaluation is an independent draw."""

    def __init__(
        self, stream: BenchStream, rng: np.random.Generator, coins: np.random.Generator
    ) -> None:
        self.stream = stream
        self.rng = rng
        self.coins = coins

    async def evaluate(self, memory: Any, tasks: Sequence[Task]) -> list[bool]:
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


async def run_strategy(
    stream: BenchStream,
    name: str,
    config: JanusConfig,
    encoder: Encoder,
    *,
    rho: float,
    curve_every: int,
    eval_seed: int,
    memo: CoverageMemo | None = None,
    stream_name: str = "calibrated",
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
    memory: Any = ()
    out = Run(rho, name, stream.seed, 0.0, stream.config.eval_redraw, stream_name)
    calibrating = config.calibrate
    history: list[list[float]] = [list(PRIOR)]
    probes: list[list[float]] = []
    for step in range(len(stream.tasks)):
        proposal = stream.propose(memory, step, stream.attempt(memory, step))
        verdict = await controller.consider(memory, proposal.memory, stream.tasks[step])
        trigger = verdict.trigger
        if step >= config.support_size:
            if proposal.harmful:
                out.harmful += 1
                out.harmful_compared += verdict.compared
                out.harmful_deployed += verdict.deploy
            elif proposal.label != "none":
                out.benign += 1
                out.benign_compared += verdict.compared
                out.benign_rejected += not verdict.deploy
                out.benign_against += bool(trigger and trigger.cosine and trigger.cosine < 0)
        if trigger is not None and trigger.signals is not None:
            probes.append(list(trigger.signals.values()))
        if verdict.compared:
            moved = [o for o, n in verdict.scores.values() if o != n]
            out.labelled += bool(moved) and len(set(moved)) == 1
            if calibrating and trigger is not None and trigger.signals is not None:
                history.append(list(controller.state.weights or PRIOR))
        if verdict.deploy:
            memory = proposal.memory
        if (step + 1) % curve_every == 0:
            out.curve.append(stream.expected_accuracy(memory))
    c = controller.state.counters
    out.final_accuracy = stream.expected_accuracy(memory)
    out.comparisons, out.deployed, out.rejected = c.comparisons, c.deployed, c.rejected
    out.post_warmup_steps = max(0, c.steps - config.support_size)
    out.cost_proxy = c.comparisons * (config.support_size + config.fresh_size)
    out.evaluations = c.evaluations
    if calibrating and probes and len(history) > 1:
        out.settle = settle_point(history, probes, SETTLE_TOLERANCE)
    return out


def run_reference(
    stream: BenchStream, name: str, *, rho: float, curve_every: int, stream_name: str
) -> Run:
    """Memory-free, or the harm-free ceiling (every harmless candidate, no harmful one)."""
    memory: Any = ()
    out = Run(rho, name, stream.seed, 0.0, stream.config.eval_redraw, stream_name)
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


JanusKind = Literal["default", "paper"]


@dataclass(frozen=True)
class Plan:
    """What to run: streams x seeds x eval_redraws x rhos (the calibrated stream's; the runbook
    stream has rho 1), every strategy, with one encoder and momentum source."""

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
    streams: tuple[str, ...] = ("calibrated",)
    janus: JanusKind = "default"
    """The Janus under test: planfence's defaults, or the paper's method (its study's
    strategies, as the bench ran them before the budgeted trigger)."""
    runbook: RunbookConfig = field(default_factory=RunbookConfig)

    @property
    def cells(self) -> list[Cell]:
        """(stream, R, rho), R by R, then rho by rho (the runbook's 1 after the calibrated
        stream's), as the rows are written."""
        out: list[Cell] = []
        for r in self.redraws:
            for name in self.streams:
                rhos = self.rhos if name == "calibrated" else (RUNBOOK_RHO,)
                out += [(name, r, rho) for rho in rhos]
        return out

    def strategies(self) -> list[str]:
        if self.janus == "paper":
            return [*PAPER_STRATEGIES, source_strategy(self.momentum_source)]
        return list(STRATEGIES)

    def base(self, seed: int) -> JanusConfig:
        if self.janus == "paper":
            return JanusConfig.paper(seed=seed, momentum_source=self.momentum_source)
        return JanusConfig(seed=seed, momentum_source=self.momentum_source)


def make_stream(plan: Plan, name: str, rho: float, redraw: float, seed: int) -> BenchStream:
    if name == "runbook":
        return RunbookStream(replace(plan.runbook, eval_redraw=redraw), seed)
    return Stream(replace(plan.stream, rho=rho, eval_redraw=redraw), seed)


async def run_seed(
    plan: Plan,
    rho: float,
    seed: int,
    memo: CoverageMemo | None = None,
    redraw: float = 1.0,
    stream_name: str = "calibrated",
) -> list[Run]:
    """Every strategy (and the two references) on one stream.

    `memo` shares coverage sets between the strategies (and the cells of a seed, which meet
    the same tasks): always-compare clusters at every step, identically at every rho, and the
    Janus variants often cluster the same tasks from the same centroids. The sets are the ones
    each controller would compute itself."""
    memo = CoverageMemo() if memo is None else memo
    stream = make_stream(plan, stream_name, rho, redraw, seed)
    made = plan.encoder()
    encoder = made if isinstance(made, CachedEncoder) else CachedEncoder(made)
    base = plan.base(seed)
    every = plan.curve_every
    kw: dict[str, Any] = {"rho": rho, "curve_every": every}
    runs = [run_reference(stream, n, stream_name=stream_name, **kw) for n in REFERENCE]
    kw |= {"memo": memo, "stream_name": stream_name}
    janus = await run_strategy(stream, "janus", base, encoder, eval_seed=1, **kw)
    for i, name in enumerate(plan.strategies()):
        if name == "janus":
            runs.append(janus)
            continue
        cfg = strategy_config(name, base, janus.comparisons_per_step)
        runs.append(await run_strategy(stream, name, cfg, encoder, eval_seed=i + 2, **kw))
    return runs


Cell = tuple[str, float, float]
"""(stream, eval_redraw, rho)"""


def _cells(plan: Plan, seed: int) -> Iterator[tuple[Cell, list[Run]]]:
    """One seed in every cell (its tasks, shared by every cell of a stream, are encoded and
    clustered once)."""
    memo = CoverageMemo()
    for name, redraw, rho in plan.cells:
        runs = asyncio.run(run_seed(plan, rho, seed, memo, redraw, name))
        yield (name, redraw, rho), runs


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
    """Every (stream, R, rho, seed); `runs` holds the finished streams' runs as they come,
    always in the order of `plan.cells`, seed by seed (whatever order the workers finish in).
    `progress` hears of each seed once all its cells are done.

    With `plan.jobs` > 1 the seeds run in that many worker processes; each stream's results
    depend only on its seed and cell, so they are the same as in one process.
    """
    runs = [] if runs is None else runs
    done: dict[tuple[Cell, int], list[Run]] = {}

    def finished(key: Cell, seed: int, cell: list[Run]) -> None:
        done[key, seed] = cell
        runs[:] = [r for c in plan.cells for s in range(plan.seeds) for r in done.get((c, s), [])]

    def seed_done(seed: int) -> None:
        progress(f"seed {seed} ({len(plan.cells)} cells)")

    jobs = min(plan.jobs, plan.seeds)
    if jobs <= 1:
        for seed in range(plan.seeds):
            for key, cell in _cells(plan, seed):
                finished(key, seed, cell)
            seed_done(seed)
        return runs
    context = multiprocessing.get_context("spawn")
    pool = context.Pool(jobs, initializer=_start_worker, initargs=(plan,))
    try:
        for seed, cells in pool.imap_unordered(_work, range(plan.seeds)):
            for key, cell in cells:
                finished(key, seed, cell)
            seed_done(seed)
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()
    return runs
