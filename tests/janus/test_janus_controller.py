"""The controller end to end on a toy stream: determinism, resume after restart, atomic steps."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from planfence.plugins.janus import (
    FunctionEvaluator,
    JanusConfig,
    JanusController,
    JanusVerdict,
    Task,
)
from planfence.plugins.janus.controller import JanusUpdater
from planfence.plugins.janus.errors import JanusStateError
from planfence.plugins.janus.state import read_state_file, write_state_file
from planfence.plugins.janus.tasks import Feedback

TOPICS = ["algebra", "geometry", "probability", "chemistry", "history", "poetry"]
CONFIG = JanusConfig(support_size=8, coverage_size=5, fresh_size=3, seed=11)


def stream(n: int, seed: int = 0) -> list[Task]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        topic = TOPICS[int(rng.integers(len(TOPICS)))]
        words = " ".join(rng.choice(["solve", "find", "explain", "compare"], size=2))
        out.append(Task(id=f"q{i}", question=f"{words} {topic} problem {i}", answer=topic))
    return out


def judge(memory: Any, task: Task) -> bool:
    return task.answer in memory


def propose(memory: list[str], task: Task, step: int) -> list[str]:
    """Learns the task's topic, but every few steps forgets an old topic."""
    rng = np.random.default_rng([7, step])
    new = [t for t in memory if t != task.answer] + [str(task.answer)]
    if len(new) > 1 and rng.random() < 0.35:
        del new[int(rng.integers(len(new) - 1))]
    return new


def summary(v: JanusVerdict) -> tuple[Any, ...]:
    return (v.deploy, v.compared, v.coverage, v.boundary, v.fresh, v.acc_old, v.acc_new)


async def run(
    controller: JanusController, tasks: Sequence[Task], memory: list[str], start: int
) -> tuple[list[str], list[tuple[Any, ...]]]:
    out = []
    for step, task in enumerate(tasks, start):
        candidate = propose(memory, task, step)
        verdict = await controller.consider(memory, candidate, task)
        if verdict.deploy:
            memory = candidate
        out.append(summary(verdict))
    return memory, out


async def test_controller_compares_and_rejects_some_candidates() -> None:
    controller = JanusController(FunctionEvaluator(judge), config=CONFIG)
    _, verdicts = await run(controller, stream(80), [], 1)
    c = controller.state.counters
    assert c.steps == 80 and c.comparisons > 0 and c.rejected > 0
    assert c.deployed + c.rejected == 80
    assert all(v[0] for v in verdicts[:8])  # warm-up always deploys
    assert sum(v[1] for v in verdicts) == c.comparisons


async def test_never_trigger_is_the_plain_updater() -> None:
    controller = JanusController(FunctionEvaluator(judge), config=JanusConfig(trigger="never"))
    _, verdicts = await run(controller, stream(40), [], 1)
    assert all(v[0] and not v[1] for v in verdicts)
    assert controller.state.counters.evaluations == 0


async def test_restarted_controller_makes_the_same_decisions(tmp_path: Path) -> None:
    tasks = stream(90)
    uninterrupted = JanusController(FunctionEvaluator(judge), config=CONFIG)
    final_a, verdicts_a = await run(uninterrupted, tasks, [], 1)

    first = JanusController(FunctionEvaluator(judge), config=CONFIG)
    memory, verdicts_b = await run(first, tasks[:45], [], 1)
    write_state_file(tmp_path / "janus.json", first.save_state())
    del first  # the process "restarts": nothing survives but the file and the memory
    resumed = JanusController.resume(
        read_state_file(tmp_path / "janus.json"), FunctionEvaluator(judge), config=CONFIG
    )
    final_b, rest = await run(resumed, tasks[45:], memory, 46)

    assert verdicts_b + rest == verdicts_a
    assert final_b == final_a
    assert json.dumps(resumed.save_state(), sort_keys=True) == json.dumps(
        uninterrupted.save_state(), sort_keys=True
    )


async def test_resume_refuses_other_settings() -> None:
    controller = JanusController(FunctionEvaluator(judge), config=CONFIG)
    await run(controller, stream(10), [], 1)
    with pytest.raises(JanusStateError, match="other settings"):
        JanusController.resume(
            controller.save_state(), FunctionEvaluator(judge), config=JanusConfig()
        )
    with pytest.raises(JanusStateError):
        JanusController.resume({"version": 99}, FunctionEvaluator(judge))
    bad = controller.save_state()
    bad["coverage"] = ["nope"]
    with pytest.raises(JanusStateError, match="unknown tasks"):
        JanusController.resume(bad, FunctionEvaluator(judge))


class FlakyEvaluator:
    def __init__(self) -> None:
        self.fail = False

    async def evaluate(self, memory: Any, tasks: Sequence[Task]) -> list[bool]:
        if self.fail:
            raise ConnectionError("evaluator down")
        return [judge(memory, t) for t in tasks]


async def test_a_failed_evaluation_leaves_the_controller_unchanged() -> None:
    evaluator = FlakyEvaluator()
    controller = JanusController(evaluator, config=replace(CONFIG, trigger="always"))
    tasks = stream(12)
    memory, _ = await run(controller, tasks[:10], [], 1)
    before = json.dumps(controller.save_state(), sort_keys=True)
    evaluator.fail = True
    with pytest.raises(ConnectionError):
        await controller.consider(memory, [*memory, "extra"], tasks[10])
    assert json.dumps(controller.save_state(), sort_keys=True) == before
    evaluator.fail = False
    verdict = await controller.consider(memory, [*memory, "extra"], tasks[10])
    assert verdict.compared and verdict.step == 11


def test_sync_wrapper() -> None:
    controller = JanusController(FunctionEvaluator(judge), config=CONFIG)
    verdict = controller.consider_sync([], ["algebra"], stream(1)[0])
    assert verdict.deploy and verdict.step == 1


class ToyUpdater:
    name = "toy"

    def __init__(self) -> None:
        self.step = 0

    def initial_memory(self) -> Any:
        return []

    async def propose(self, memory: Any, task: Task, feedback: Feedback) -> Any:
        self.step += 1
        return propose(memory, task, self.step)

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step}

    def load_state_dict(self, data: dict[str, Any]) -> None:
        self.step = int(data["step"])


async def test_janus_updater_wraps_a_base_updater() -> None:
    wrapped = JanusUpdater(ToyUpdater(), JanusController(FunctionEvaluator(judge), config=CONFIG))
    assert wrapped.name == "janus(toy)"
    memory: Any = []
    kept = 0
    for task in stream(60):
        result = await wrapped.step(memory, task, Feedback("x", judge(memory, task)))
        kept += result.memory is memory and result.candidate != memory
        memory = result.memory
    assert kept == wrapped.controller.state.counters.rejected


async def test_max_seen_tasks_bounds_the_state_but_keeps_the_sets() -> None:
    cfg = replace(CONFIG, max_seen_tasks=12, trigger="always")
    controller = JanusController(FunctionEvaluator(judge), config=cfg)
    await run(controller, stream(60), [], 1)
    state = controller.state
    assert len(state.seen) <= 12 + len(state.since_trigger)
    assert set(state.coverage) | set(state.boundary) <= set(state.seen)
    assert "q59" in state.seen


async def test_a_state_saved_before_the_budgeted_trigger_resumes_as_it_ran() -> None:
    """A version 1 state (no budget, tie rule or aimed tasks in its settings) ran the paper's
    method: it resumes as that, and refuses settings that would change it silently."""
    paper = JanusConfig.paper(support_size=8, coverage_size=5, fresh_size=3, seed=11)
    controller = JanusController(FunctionEvaluator(judge), config=paper)
    memory, _ = await run(controller, stream(30), [], 1)
    old = controller.save_state()
    old["version"] = 1
    for key in ("window", "norms", "examples", "weights"):
        del old[key]
    new_settings = set(JanusConfig().to_dict()) - {
        "support_size", "coverage_size", "fresh_size", "tau", "beta", "trigger",
        "momentum_source", "random_rate", "period", "use_coverage", "use_boundary",
        "use_fresh", "seed", "kmeans_iters", "eps", "max_seen_tasks",
    }  # fmt: skip
    for key in new_settings:
        del old["config"][key]
    resumed = JanusController.resume(old, FunctionEvaluator(judge), config=paper)
    assert resumed.config == paper and resumed.state.step == 30
    _, after = await run(resumed, stream(40)[30:], memory, 31)
    _, want = await run(controller, stream(40)[30:], memory, 31)
    assert after == want
    with pytest.raises(JanusStateError, match="other settings"):
        JanusController.resume(
            old, FunctionEvaluator(judge), config=replace(paper, on_tie="keep", aim_size=8)
        )
