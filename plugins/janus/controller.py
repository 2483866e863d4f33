"""The Janus controller: deploy a candidate memory or keep the current one.

    controller = JanusController(evaluator, config=JanusConfig(seed=7))
    verdict = await controller.consider(current, candidate, task)
    memory = candidate if verdict.deploy else current

`JanusUpdater` wraps any `MemoryUpdater` with a controller for the usual sequential loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from planfence.plugins.telemetry import janus_span
from planfence.shared_memory.extras import extra_imports

from .aim import row_dots
from .config import JanusConfig
from .decision import JanusVerdict, Plan, accept, finish_step, plan_step
from .encoders import CachedEncoder, Encoder, default_encoder
from .errors import JanusError
from .evalset import Coverage, CoverageMemo, build_coverage, chain_digest
from .evaluators import Evaluator
from .memory import Memory, Render, render_memory
from .signals import Edit
from .state import Counters, JanusState
from .tasks import Feedback, Task
from .updaters.base import MemoryUpdater

with extra_imports("janus", "the Janus controller"):
    import numpy as np

T = TypeVar("T")


def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise JanusError("use the async method inside a running event loop")


_ANY_SEED = np.random.SeedSequence(0)  # the copied state replaces whatever this seeds


def _copy_state(state: JanusState) -> JanusState:
    # Cheaper than a deep copy: tasks are immutable and may be shared. The generator is built
    # from a fixed seed sequence, not from OS entropy, then given the state's position.
    bit_generator = type(state.rng.bit_generator)(_ANY_SEED)
    bit_generator.state = state.rng.bit_generator.state
    return JanusState(
        config=state.config,
        rng=np.random.Generator(bit_generator),
        step=state.step,
        momentum=None if state.momentum is None else state.momentum.copy(),
        centroids=None if state.centroids is None else state.centroids.copy(),
        coverage=list(state.coverage),
        boundary=list(state.boundary),
        seen=dict(state.seen),
        since_trigger=list(state.since_trigger),
        last_trigger_step=state.last_trigger_step,
        counters=Counters(**state.counters.to_dict()),
        window=list(state.window),
        norms=list(state.norms),
        examples=list(state.examples),  # rows are never changed in place
        weights=None if state.weights is None else list(state.weights),
    )


class JanusController:
    """Decides deploy-new vs keep-old for each candidate; seeded and resumable.

    A step either completes or leaves the controller exactly as it was (the work happens on a
    copy of the state, committed at the end), so a failed evaluation can simply be retried.
    """

    def __init__(
        self,
        evaluator: Evaluator,
        *,
        config: JanusConfig | None = None,
        encoder: Encoder | None = None,
        render: Render = render_memory,
        state: JanusState | None = None,
        coverage_memo: CoverageMemo | None = None,
    ) -> None:
        """`coverage_memo`: coverage sets shared with other controllers (same sets, computed
        once; see `CoverageMemo`)."""
        if state is not None and config is not None and state.config != config:
            raise JanusError("state and config disagree; resume with the saved config")
        self.config = state.config if state is not None else (config or JanusConfig())
        self.evaluator = evaluator
        enc = encoder if encoder is not None else default_encoder()
        self.encoder: Encoder = enc if isinstance(enc, CachedEncoder) else CachedEncoder(enc)
        self.render = render
        self.state = state if state is not None else JanusState.initial(self.config)
        # Embeddings of the seen tasks in order: k-means reads all of them at every trigger,
        # and the list only grows (unless trimmed), so new tasks are appended, not re-stacked.
        self._seen_ids: list[str] = []
        self._seen_vectors: np.ndarray | None = None
        self.coverage_memo = coverage_memo
        self._seen_digest = b""  # content key of _seen_vectors, kept when there is a memo
        # Similarity columns of memory lines over the seen tasks (aimed tasks): a memory
        # changes a line or two per step, so each comparison computes only what is new.
        self._line_ids: list[str] = []
        self._line_sims: dict[str, np.ndarray] = {}

    # ---- persistence

    def save_state(self) -> dict[str, Any]:
        """JSON-ready state; feed it to `resume` after a restart."""
        return self.state.to_json()

    @classmethod
    def resume(
        cls,
        data: dict[str, Any],
        evaluator: Evaluator,
        *,
        config: JanusConfig | None = None,
        encoder: Encoder | None = None,
        render: Render = render_memory,
    ) -> JanusController:
        """A controller continuing from `save_state()` output (config checked when given)."""
        state = JanusState.from_json(data, config=config)
        return cls(evaluator, encoder=encoder, render=render, state=state)

    # ---- one step

    def _vectors_of(self, state: JanusState) -> Any:
        def vectors_of(ids: Sequence[str]) -> np.ndarray:
            ids = list(ids)
            if not ids:
                return self.encoder.encode([])
            known = len(self._seen_ids)
            if self._seen_vectors is None or ids[:known] != self._seen_ids:
                known, self._seen_ids, self._seen_vectors = 0, [], None
                self._seen_digest = b""
            if len(ids) > known:
                rows = self.encoder.encode([state.seen[i].question for i in ids[known:]])
                if self.coverage_memo is not None:
                    self._seen_digest = chain_digest(self._seen_digest, rows)
                if self._seen_vectors is not None:
                    rows = np.concatenate([self._seen_vectors, rows])
                self._seen_ids, self._seen_vectors = ids, rows
            assert self._seen_vectors is not None
            return self._seen_vectors

        return vectors_of

    def _similarity_of(self, state: JanusState) -> Any:
        vectors_of = self._vectors_of(state)

        def similarity(ids: Sequence[str], lines: Sequence[str]) -> np.ndarray:
            ids = list(ids)
            rows = vectors_of(ids)
            if ids[: len(self._line_ids)] != self._line_ids:
                self._line_sims = {}
            vectors = self.encoder.encode(list(lines))
            cols: dict[str, np.ndarray] = {}
            for line, vector in zip(lines, vectors, strict=True):
                col = self._line_sims.get(line)
                if col is None:
                    col = row_dots(rows, vector)
                elif len(col) < len(ids):
                    col = np.concatenate([col, row_dots(rows[len(col) :], vector)])
                cols[line] = col
            self._line_ids, self._line_sims = ids, cols
            return np.stack([cols[line] for line in lines], axis=1)

        return similarity

    def _coverage_of(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        k: int,
        rng: np.random.Generator,
        *,
        previous: np.ndarray | None = None,
        max_iter: int = 50,
    ) -> Coverage:
        memo = self.coverage_memo
        if memo is None or vectors is not self._seen_vectors:
            return build_coverage(ids, vectors, k, rng, previous=previous, max_iter=max_iter)
        return memo.build(
            self._seen_digest, ids, vectors, k, rng, previous=previous, max_iter=max_iter
        )

    async def consider(
        self, current: Memory, candidate: Memory, task: Task, *, key: str = "memory"
    ) -> JanusVerdict:
        """Judge `candidate` against `current` after `task`; the verdict says which to keep.
        `key` names the memory in the decision's trace span."""
        with janus_span(key) as traced:
            old_text, new_text = self.render(current), self.render(candidate)
            old_vec, new_vec = self.encoder.encode([old_text, new_text])
            work = _copy_state(self.state)
            plan = plan_step(
                work,
                task,
                new_vec - old_vec,
                self._vectors_of(work),
                unchanged=old_text == new_text,
                coverage_of=self._coverage_of,
                edit=self._edit_of(old_text, new_text),
                similarity=self._similarity_of(work),
            )
            verdict = await self._judge(work, plan, current, candidate)
            self.state = work
            trigger = verdict.trigger
            traced.janus(
                {
                    "planfence.janus.cosine": None if trigger is None else trigger.cosine,
                    "planfence.janus.harm": None if trigger is None else trigger.score,
                    "planfence.janus.score.old": verdict.acc_old,
                    "planfence.janus.score.new": verdict.acc_new,
                    "planfence.janus.reason": verdict.reason,
                },
                deployed=verdict.deploy,
                triggered=bool(trigger is not None and trigger.fired),
            )
        return verdict

    def _edit_of(self, old_text: str, new_text: str) -> Edit | None:
        """The lines changed, when a setting reads them (the paper's method does not)."""
        cfg = self.config
        if cfg.trigger != "budget" and not cfg.aim_size and cfg.on_tie != "score":
            return None
        return Edit.between(old_text, new_text)

    async def _judge(
        self, work: JanusState, plan: Plan, current: Memory, candidate: Memory
    ) -> JanusVerdict:
        if not plan.compare:
            return accept(work, plan)
        tasks = [work.seen[i] for i in plan.eval_ids]
        old_correct, new_correct = await asyncio.gather(
            self.evaluator.evaluate(current, tasks),
            self.evaluator.evaluate(candidate, tasks),
        )
        return finish_step(work, plan, old_correct, new_correct)

    def consider_sync(self, current: Memory, candidate: Memory, task: Task) -> JanusVerdict:
        """`consider` for synchronous callers (not from inside a running event loop)."""
        return _run_sync(self.consider(current, candidate, task))


@dataclass(frozen=True)
class StepResult:
    memory: Memory
    candidate: Memory
    verdict: JanusVerdict


class JanusUpdater:
    """A base updater with Janus in front: proposes with the updater, deploys what Janus keeps."""

    def __init__(self, updater: MemoryUpdater, controller: JanusController) -> None:
        self.updater = updater
        self.controller = controller

    @property
    def name(self) -> str:
        return f"janus({self.updater.name})"

    async def step(self, memory: Memory, task: Task, feedback: Feedback) -> StepResult:
        candidate = await self.updater.propose(memory, task, feedback)
        verdict = await self.controller.consider(memory, candidate, task)
        return StepResult(candidate if verdict.deploy else memory, candidate, verdict)
