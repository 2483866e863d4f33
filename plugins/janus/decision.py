"""One Janus step as pure logic: plan (trigger + evaluation set), then verdict from the scores.

The controller drives these two functions around its encoder and evaluator calls, the way a
generator-based auth flow is driven by sync and async shells. Both mutate only the `JanusState`
they are given and draw randomness only from its generator, so a step is reproducible.

Where this differs from the authors' code, on purpose (`JanusConfig.paper()` restores the
first three):
- The trigger is budgeted by default (`budget`: a calibrated harm probability from cheap
  signals, the budget spent on the highest); theirs is `trigger="momentum"`.
- A tie keeps the current memory by default (`on_tie="keep"`: nothing is deployed without
  evidence; `"score"` lets the calibrated harm probability decide); theirs deploys.
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
from dataclasses import dataclass, field, replace
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

TIE_HARM = 0.5
"""Under `on_tie="score"` a tie keeps the current memory from this harm probability up."""

VectorsOf = Callable[[Sequence[str]], np.ndarray]
"""Embeddings (one row per id) of seen tasks."""
SimilarityOf = Callable[[Sequence[str], Sequence[str]], np.ndarray]
"""Similarity of seen tasks (rows, by id) to memory lines (columns, by text)."""


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
    """A changed candidate's signals, when its lines are known (its calibration example)."""

    @property
    def eval_ids(self) -> list[str]:
        return assemble(self.aimed, self.coverage, self.boundary, self.fresh)


@dataclass(frozen=True)
class JanusVerdict:
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
    similarity: SimilarityOf | None = None,
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
        similarity: task-to-line similarity (aimed tasks need it).
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
    score: float | None = None
    if not unchanged and (edit is not None or cfg.trigger == "budget"):
        signals = measure(edit, z, state.momentum, state.norms, task.question, cfg.eps)
        score = probability(state.weights or PRIOR, signals)
        state.norms = [*state.norms, float(np.sqrt(np.dot(z, z)))][-NORMS_KEPT:]
    named = None if signals is None else dict(zip(SIGNALS, signals, strict=True))
    if cfg.trigger == "budget":
        cos = cosine(z, state.momentum, cfg.eps) if state.momentum is not None else None
        info = decide_budget(cfg, score, state.window, cos, named)
        state.window = [*state.window, (score, info.fired)][-cfg.budget_window :]
    else:
        # Only the random trigger reads the step's draw (its own generator, so skipping it for
        # the other triggers changes nothing else).
        draw = step_draw(cfg.seed, t) if cfg.trigger == "random" else 0.0
        info = decide_trigger(cfg, z, state.momentum, index, draw)
        if score is not None:
            info = replace(info, score=score, signals=named)
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
    if cfg.aim_size and edit is not None and similarity is not None and edit.changed:
        ids = list(state.seen)
        lines = list(dict.fromkeys((*edit.old, *edit.new)))
        aimed = aim(
            ids,
            similarity(ids, lines),
            lines,
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


def accept(state: JanusState, plan: Plan) -> JanusVerdict:
    """The verdict for a step that needed no comparison: the candidate is deployed."""
    _feed_momentum(state, plan, deployed=True)
    state.counters.deployed += 1
    return JanusVerdict(True, plan.step, plan.reason, trigger=plan.trigger)


def _deploys_tie(rule: str, plan: Plan) -> bool:
    """Whether a tie deploys: always, never, or (`score`) when the candidate's calibrated harm
    probability is below one half (a candidate without one is deployed)."""
    if rule != "score":
        return rule == "deploy"
    score = None if plan.trigger is None else plan.trigger.score
    return score is None or score < TIE_HARM


def finish_step(
    state: JanusState,
    plan: Plan,
    old_correct: Sequence[bool],
    new_correct: Sequence[bool],
) -> JanusVerdict:
    """Compare scores on `plan.eval_ids` (a tie as `on_tie` says) and refill the boundary; a
    comparison of a candidate with signals whose changed tasks all moved one way (or none
    moved) becomes a calibration example."""
    cfg = state.config
    ids = plan.eval_ids
    if len(old_correct) != len(ids) or len(new_correct) != len(ids):
        raise ValueError(
            f"expected {len(ids)} results per memory, got {len(old_correct)} and {len(new_correct)}"
        )
    acc_old = sum(map(bool, old_correct)) / len(ids) if ids else 0.0
    acc_new = sum(map(bool, new_correct)) / len(ids) if ids else 0.0
    tie = acc_new == acc_old
    deploy = acc_new > acc_old or (tie and _deploys_tie(cfg.on_tie, plan))
    worse = sum(bool(o) and not bool(n) for o, n in zip(old_correct, new_correct, strict=True))
    better = sum(bool(n) and not bool(o) for o, n in zip(old_correct, new_correct, strict=True))
    # A comparison teaches the calibration only when every task that changed moved the same
    # way (none moving is "not harmful, as far as the evaluation saw"): a noisy evaluator
    # (sampling at temperature) flips tasks both ways, and its majorities would teach noise.
    if cfg.calibrate and plan.signals is not None and not (worse and better):
        example = [*plan.signals, 1.0 if worse else 0.0]
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
    if cfg.on_tie == "deploy":  # the authors' rule, in their words
        relation = ">=" if deploy else "<"
    else:
        relation = ">" if acc_new > acc_old else ("=" if tie else "<")
    reason = (
        f"{plan.reason}; compared on {len(ids)} tasks: new {acc_new:.3f} {relation} "
        f"old {acc_old:.3f}"
    )
    if tie and cfg.on_tie != "deploy":
        reason += f" (a tie {'deploys' if deploy else 'keeps the current memory'})"
    return JanusVerdict(
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
