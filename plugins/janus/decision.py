"""One Janus step as pure logic: plan (trigger + evaluation set), then verdict from the scores.

The controller drives these two functions around its encoder and evaluator calls, the way a
generator-based auth flow is driven by sync and async shells. Both mutate only the `JanusState`
they are given and draw randomness only from its generator, so a step is reproducible.

Where this differs from the authors' code, on purpose (`JanusConfig.paper()` restores the
first three):
- The trigger is budgeted by default (`budget`: a calibrated harm probability from cheap
  signals, the budget spent on the highest); theirs is `trigger="momentum"`.
- A tie keeps the current memory by default (`on_tie="keep"`); theirs deploys.
- Each evaluation also holds up to `aim_size` tasks aimed at the edit (`aim`).
- `momentum_source="deployed"` is the default (a rejected candidate only decays the momentum);
  `"all"` is their rule.
- The evaluation set is de-duplicated: a task that is both a coverage and a fresh task is
  solved once per memory and counts once (concatenating the sets would weigh it twice).
- k-means is our own numpy Lloyd iteration: k-means++ from the controller's generator, warm
  starts from the previous centroids, at most `kmeans_iters` rounds, an emptied cluster
  re-seeded at the farthest point, and distinct representatives (the next nearest task when
  two centroids pick the same one). Initialisation and tie-breaking may pick other coverage
  tasks than another k-means implementation would on the same data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from planfence.shared_memory.extras import extra_imports

from .aim import aim
from .budget import decide_budget
from .calibration import PRIOR, fit, probability
from .evalset import CoverageFn, assemble, build_coverage, refill_boundary, sample
from .signals import NORMS_KEPT, SIGNALS, Edit, measure
from .state import JanusState
from .tasks import Task
from .trigger import TriggerInfo, cosine, decide_trigger, momentum_update, step_draw

with extra_imports("janus", "the Janus controller"):
    import numpy as np

VectorsOf = Callable[[Sequence[str]], np.ndarray]
"""Embeddings (one row per id) of seen tasks."""
LinesOf = Callable[[Sequence[str]], np.ndarray]
"""Embeddings (one row per line) of memory lines."""


@dataclass(frozen=True)
class Plan:
    """What a step needs: nothing (accept directly) or a comparison on `eval_ids`."""

    step: int
    compare: bool
    reason: str
    trigger: TriggerInfo | None = None
    coverage: tuple[str, ...] = ()
    boundary: tuple[str, ...] = ()
    fresh: tuple[str, ...] = ()
    z: np.ndarray | None = field(default=None, compare=False, repr=False)
    aimed: tuple[str, ...] = ()
    signals: tuple[float, ...] | None = None
    """The budgeted trigger's signals of a changed candidate (its calibration example)."""

    @property
    def eval_ids(self) -> list[str]:
        return assemble(self.aimed, self.coverage, self.boundary, self.fresh)


@dataclass(frozen=True)
class Verdict:
    """The decision for one candidate, with everything needed to audit it."""

    deploy: bool
    step: int
    reason: str
    compared: bool = False
    trigger: TriggerInfo | None = None
    acc_old: float | None = None
    acc_new: float | None = None
    coverage: tuple[str, ...] = ()
    boundary: tuple[str, ...] = ()
    fresh: tuple[str, ...] = ()
    flips: tuple[str, ...] = ()
    scores: dict[str, tuple[bool, bool]] = field(default_factory=dict)
    aimed: tuple[str, ...] = ()

    @property
    def verdict(self) -> str:
        return "deploy" if self.deploy else "keep"

    def to_payload(self) -> dict[str, Any]:
        """JSON form for the decision log."""
        return {
            "step": self.step,
            "compared": self.compared,
            "trigger": None if self.trigger is None else self.trigger.to_dict(),
            "scores": {"old": self.acc_old, "new": self.acc_new},
            "tasks": {
                "aimed": list(self.aimed),
                "coverage": list(self.coverage),
                "boundary": list(self.boundary),
                "fresh": list(self.fresh),
            },
            "flips": list(self.flips),
            "per_task": {k: {"old": o, "new": n} for k, (o, n) in self.scores.items()},
        }


def plan_step(
    state: JanusState,
    task: Task,
    z: np.ndarray,
    vectors_of: VectorsOf,
    *,
    unchanged: bool = False,
    coverage_of: CoverageFn = build_coverage,
    edit: Edit | None = None,
    lines_of: LinesOf | None = None,
) -> Plan:
    """Advance the state by one candidate and say whether it must be compared.

    Every post-warm-up step goes through the trigger, an unchanged candidate included (its z
    is zero, so the momentum trigger never fires on it at tau <= 0; always, random and periodic
    act on it as the reference code does). With `momentum_source="all"` the momentum takes z
    here; with "deployed" it is updated by the verdict (`accept` / `finish_step`).

    Args:
        z: phi(candidate) - phi(current memory).
        vectors_of: embeddings of seen tasks (for k-means).
        unchanged: the candidate renders exactly as the current memory (counted apart).
        coverage_of: clusters the seen tasks (`build_coverage`, or a memo of it that gives the
            same sets, e.g. `CoverageMemo`).
        edit: the lines the candidate removed and added (the budgeted trigger's signals and
            the aimed tasks read them; without it neither sees lines).
        lines_of: embeds memory lines (aimed tasks need it).
    """
    cfg = state.config
    state.step += 1
    state.counters.steps += 1
    t = state.step
    state.remember(task)
    state.since_trigger.append(task.id)

    if t <= cfg.support_size:
        if t == cfg.support_size:
            _seed_sets(state, vectors_of, coverage_of)
        return Plan(t, False, f"warm-up step {t} of {cfg.support_size}: deploy")

    if not unchanged:
        state.counters.candidates += 1
    index = t - cfg.support_size - 1
    signals: tuple[float, ...] | None = None
    if cfg.trigger == "budget":
        info, signals = _budget(state, task, z, unchanged, edit)
    else:
        # Only the random trigger reads the step's draw (its own generator, so skipping it for
        # the other triggers changes nothing else).
        draw = step_draw(cfg.seed, t) if cfg.trigger == "random" else 0.0
        info = decide_trigger(cfg, z, state.momentum, index, draw)
    if cfg.momentum_source == "all":
        state.momentum = momentum_update(state.momentum, z, cfg.beta)
    if not info.fired:
        return Plan(t, False, f"no trigger ({info.reason}): deploy", info, z=z, signals=signals)

    fresh: list[str] = []
    if cfg.use_fresh:
        fresh = sample(state.since_trigger, cfg.fresh_size, state.rng)
    coverage: list[str] = []
    if cfg.use_coverage:
        ids = list(state.seen)
        cov = coverage_of(
            ids,
            vectors_of(ids),
            cfg.coverage_size,
            state.rng,
            previous=state.centroids,
            max_iter=cfg.kmeans_iters,
        )
        state.centroids = cov.centroids
        state.coverage = coverage = cov.ids
    boundary = list(state.boundary) if cfg.use_boundary else []
    aimed: list[str] = []
    if cfg.aim_size and edit is not None and lines_of is not None and edit.changed:
        ids = list(state.seen)
        lines = list(dict.fromkeys((*edit.old, *edit.new)))
        aimed = aim(
            ids,
            vectors_of(ids),
            lines,
            lines_of(lines),
            set(edit.changed),
            cfg.aim_size,
            per_task=cfg.aim_lines,
            exclude={*coverage, *boundary, *fresh},
        )
    state.since_trigger = []
    state.last_trigger_step = t
    return Plan(
        t,
        True,
        info.reason,
        info,
        tuple(coverage),
        tuple(boundary),
        tuple(fresh),
        z=z,
        aimed=tuple(aimed),
        signals=signals,
    )


def _budget(
    state: JanusState, task: Task, z: np.ndarray, unchanged: bool, edit: Edit | None
) -> tuple[TriggerInfo, tuple[float, ...] | None]:
    """The budgeted trigger's decision; the step joins its window (and its norm the recent
    ones)."""
    cfg = state.config
    cos = cosine(z, state.momentum, cfg.eps) if state.momentum is not None else None
    signals: tuple[float, ...] | None = None
    if unchanged:
        info = decide_budget(cfg, None, state.window, cos)
    else:
        signals = measure(edit, z, state.momentum, state.norms, task.question, cfg.eps)
        score = probability(state.weights or PRIOR, signals)
        named = dict(zip(SIGNALS, signals, strict=True))
        info = decide_budget(cfg, score, state.window, cos, named)
        state.norms = [*state.norms, float(np.sqrt(np.dot(z, z)))][-NORMS_KEPT:]
    state.window = [*state.window, (info.score, info.fired)][-cfg.budget_window :]
    return info, signals


def _seed_sets(state: JanusState, vectors_of: VectorsOf, coverage_of: CoverageFn) -> None:
    """End of warm-up: k-means over the first K tasks; the rest seed the boundary set."""
    cfg = state.config
    ids = list(state.seen)
    cov = coverage_of(ids, vectors_of(ids), cfg.coverage_size, state.rng, max_iter=cfg.kmeans_iters)
    state.centroids = cov.centroids
    state.coverage = cov.ids
    state.boundary = [i for i in ids if i not in cov.ids][: cfg.boundary_size]
    state.since_trigger = []


def _feed_momentum(state: JanusState, plan: Plan, *, deployed: bool) -> None:
    """Under momentum_source="deployed": the memory's actual change (zero when kept)."""
    cfg = state.config
    if cfg.momentum_source != "deployed" or plan.z is None:
        return
    z = plan.z if deployed else np.zeros_like(plan.z)
    state.momentum = momentum_update(state.momentum, z, cfg.beta)


def accept(state: JanusState, plan: Plan) -> Verdict:
    """Verdict for a step that needed no comparison: the candidate is deployed."""
    _feed_momentum(state, plan, deployed=True)
    state.counters.deployed += 1
    return Verdict(True, plan.step, plan.reason, trigger=plan.trigger)


def finish_step(
    state: JanusState,
    plan: Plan,
    old_correct: Sequence[bool],
    new_correct: Sequence[bool],
) -> Verdict:
    """Compare scores on `plan.eval_ids` (a tie as `on_tie` says) and refill the boundary; a
    decisive comparison under the budgeted trigger becomes a calibration example."""
    cfg = state.config
    ids = plan.eval_ids
    if len(old_correct) != len(ids) or len(new_correct) != len(ids):
        raise ValueError(
            f"expected {len(ids)} results per memory, got {len(old_correct)} and {len(new_correct)}"
        )
    acc_old = sum(map(bool, old_correct)) / len(ids) if ids else 0.0
    acc_new = sum(map(bool, new_correct)) / len(ids) if ids else 0.0
    tie = acc_new == acc_old
    deploy = acc_new > acc_old or (tie and cfg.on_tie == "deploy")
    if cfg.trigger == "budget" and cfg.calibrate and plan.signals is not None and not tie:
        example = [*plan.signals, 1.0 if acc_new < acc_old else 0.0]
        state.examples = [*state.examples, example][-cfg.max_examples :]
        state.weights = fit(state.examples)
    coverage = set(plan.coverage)
    flips = [
        i
        for i, o, n in zip(ids, old_correct, new_correct, strict=True)
        if i not in coverage and bool(o) != bool(n)
    ]
    if cfg.use_boundary:
        state.boundary = refill_boundary(
            flips, state.boundary, cfg.boundary_size, state.rng, coverage=plan.coverage
        )
    _feed_momentum(state, plan, deployed=deploy)
    state.counters.comparisons += 1
    state.counters.evaluations += 2 * len(ids)
    if deploy:
        state.counters.deployed += 1
    else:
        state.counters.rejected += 1
    if cfg.on_tie == "deploy":
        relation = ">=" if deploy else "<"
    else:
        relation = ">" if deploy else ("=" if tie else "<")
    reason = (
        f"{plan.reason}; compared on {len(ids)} tasks: new {acc_new:.3f} {relation} "
        f"old {acc_old:.3f}"
    )
    if tie and cfg.on_tie == "keep":
        reason += " (a tie keeps the current memory)"
    return Verdict(
        deploy,
        plan.step,
        reason,
        compared=True,
        trigger=plan.trigger,
        acc_old=acc_old,
        acc_new=acc_new,
        coverage=plan.coverage,
        boundary=plan.boundary,
        fresh=plan.fresh,
        flips=tuple(flips),
        aimed=plan.aimed,
        scores={
            i: (bool(o), bool(n)) for i, o, n in zip(ids, old_correct, new_correct, strict=True)
        },
    )
