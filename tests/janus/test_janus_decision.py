"""The pure step: warm-up, first post-warm-up step, trigger, set construction, verdicts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from planfence.plugins.janus import JanusConfig, Task, accept
from planfence.plugins.janus.decision import finish_step, plan_step
from planfence.plugins.janus.state import JanusState

# The authors' method with their momentum rule (every candidate feeds the momentum as soon as
# it is planned); the `deployed` source has its own tests below, the budgeted trigger and the
# tie rule theirs in test_janus_budget.
SMALL = JanusConfig.paper(
    support_size=4, coverage_size=2, fresh_size=2, seed=3, momentum_source="all"
)
VECS = {
    "t0": [0.0, 0.0],
    "t1": [0.1, 0.0],
    "t2": [5.0, 5.0],
    "t3": [5.1, 5.0],
    "t4": [0.0, 0.2],
    "t5": [5.0, 5.2],
    "t6": [0.2, 0.1],
}
TASKS = {i: Task(id=i, question=f"question {i}") for i in VECS}


def vectors_of(ids: Sequence[str]) -> np.ndarray:
    return np.array([VECS[i] for i in ids])


def z(*xs: float) -> np.ndarray:
    return np.array(xs, dtype=np.float64)


def warmed(config: JanusConfig = SMALL) -> JanusState:
    state = JanusState.initial(config)
    for i in range(4):
        plan = plan_step(state, TASKS[f"t{i}"], z(1, 0), vectors_of)
        assert not plan.compare and "warm-up" in plan.reason
        assert accept(state, plan).deploy
    return state


def test_warm_up_deploys_and_seeds_coverage_and_boundary() -> None:
    state = warmed()
    assert state.step == 4 and state.momentum is None
    assert len(state.coverage) == 2
    # k-means over two blobs picks one task of each; the other two seed the boundary set.
    assert {int(i[1]) // 2 for i in state.coverage} == {0, 1}
    assert sorted(state.coverage + state.boundary) == ["t0", "t1", "t2", "t3"]
    assert state.since_trigger == []
    assert state.counters.deployed == 4 and state.counters.comparisons == 0


def test_first_step_after_warm_up_never_triggers_and_sets_momentum() -> None:
    state = warmed()
    plan = plan_step(state, TASKS["t4"], z(-1, 0), vectors_of)
    assert not plan.compare and "no momentum yet" in plan.reason
    assert state.momentum is not None and state.momentum.tolist() == [-1.0, 0.0]


def test_aligned_update_is_accepted_and_opposite_one_compared() -> None:
    state = warmed()
    plan_step(state, TASKS["t4"], z(1, 0), vectors_of)
    aligned = plan_step(state, TASKS["t5"], z(1, 1), vectors_of)
    assert not aligned.compare
    assert state.momentum.tolist() == pytest.approx([1.0, 0.1])  # 0.9*[1,0] + 0.1*[1,1]
    opposite = plan_step(state, TASKS["t6"], z(-1, 0), vectors_of)
    assert opposite.compare
    assert opposite.trigger is not None and opposite.trigger.cosine == pytest.approx(
        -1 / np.sqrt(1.01)
    )
    # fresh: L=2 of the tasks met since the last trigger (here: since warm-up), current included
    assert "t6" in opposite.fresh and set(opposite.fresh) <= {"t4", "t5", "t6"}
    assert len(opposite.fresh) == 2
    assert opposite.eval_ids[:2] == list(opposite.coverage)
    assert set(opposite.boundary) == set(state.boundary)
    assert state.since_trigger == []
    # the momentum moved even though the verdict is still to come
    assert state.momentum.tolist() == pytest.approx([0.9 - 0.1, 0.09])


def compared_state(config: JanusConfig = SMALL) -> tuple[JanusState, object]:
    state = warmed(config)
    plan_step(state, TASKS["t4"], z(1, 0), vectors_of)
    plan = plan_step(state, TASKS["t5"], z(-1, 0), vectors_of)
    assert plan.compare
    return state, plan


def test_ties_go_to_the_new_memory_in_the_papers_method() -> None:
    state, plan = compared_state()
    n = len(plan.eval_ids)
    verdict = finish_step(state, plan, [True] * n, [True] * n)
    assert verdict.deploy and verdict.acc_new == verdict.acc_old == 1.0
    assert verdict.flips == ()
    assert state.counters.comparisons == 1 and state.counters.evaluations == 2 * n


def test_worse_candidate_is_kept_out_and_flips_refill_boundary() -> None:
    state, plan = compared_state()
    ids = plan.eval_ids
    old = [True] * len(ids)
    new = [i in plan.coverage for i in ids]  # the candidate fails every non-coverage task
    verdict = finish_step(state, plan, old, new)
    assert not verdict.deploy and verdict.verdict == "keep"
    assert verdict.acc_new < verdict.acc_old
    flips = [i for i in ids if i not in plan.coverage]
    assert set(verdict.flips) == set(flips)
    assert not set(verdict.flips) & set(plan.coverage)  # coverage tasks are never flips
    assert set(state.boundary) <= set(flips) | set(plan.boundary)
    assert len(state.boundary) == 2
    assert state.counters.rejected == 1


def test_coverage_flips_do_not_enter_the_boundary() -> None:
    state, plan = compared_state()
    ids = plan.eval_ids
    before = list(state.boundary)
    old = [True] * len(ids)
    new = [i not in plan.coverage for i in ids]  # flips only on coverage tasks
    finish_step(state, plan, old, new)
    assert state.boundary == before


def test_unchanged_candidates_count_as_steps_as_in_the_reference_code() -> None:
    always = warmed(replace(SMALL, trigger="always"))
    plan = plan_step(always, TASKS["t4"], z(0, 0), vectors_of, unchanged=True)
    assert plan.compare and always.counters.candidates == 0
    plan = plan_step(always, TASKS["t5"], z(1, 0), vectors_of)
    assert plan.compare and always.counters.candidates == 1
    # the momentum trigger never fires on an unchanged candidate (z = 0, cos = 0, tau = 0)
    janus = warmed()
    plan_step(janus, TASKS["t4"], z(1, 0), vectors_of)
    assert not plan_step(janus, TASKS["t5"], z(0, 0), vectors_of, unchanged=True).compare


def test_periodic_fires_at_step_zero_of_its_cycle() -> None:
    state = warmed(replace(SMALL, trigger="periodic", period=3))
    fired = [plan_step(state, TASKS["t4"], z(1, 0), vectors_of).compare for _ in range(7)]
    assert fired == [True, False, False, True, False, False, True]


def test_random_trigger_draws_from_a_per_step_seed() -> None:
    config = replace(SMALL, trigger="random", random_rate=0.5)
    a, b = warmed(config), warmed(config)
    b.rng.random(17)  # other consumers of the controller's generator do not shift the draws
    fired_a = [plan_step(a, TASKS["t4"], z(1, 0), vectors_of).compare for _ in range(40)]
    fired_b = [plan_step(b, TASKS["t4"], z(1, 0), vectors_of).compare for _ in range(40)]
    assert fired_a == fired_b and 5 < sum(fired_a) < 35


DEPLOYED = replace(SMALL, momentum_source="deployed")


def test_deployed_source_feeds_the_momentum_only_with_deployed_changes() -> None:
    state = warmed(DEPLOYED)
    first = plan_step(state, TASKS["t4"], z(1, 0), vectors_of)
    assert state.momentum is None  # not before the verdict
    accept(state, first)
    assert state.momentum.tolist() == [1.0, 0.0]
    plan = plan_step(state, TASKS["t5"], z(-3, 0), vectors_of)
    assert plan.compare and state.momentum.tolist() == [1.0, 0.0]
    n = len(plan.eval_ids)
    assert not finish_step(state, plan, [True] * n, [False] * n).deploy
    # rejected: the memory did not change, so the momentum only decays
    assert state.momentum.tolist() == pytest.approx([0.9, 0.0])
    # a second rewrite in the same direction still looks like a deviation
    again = plan_step(state, TASKS["t6"], z(-3, 0), vectors_of)
    m = len(again.eval_ids)
    assert again.compare and finish_step(state, again, [True] * m, [True] * m).deploy
    assert state.momentum.tolist() == pytest.approx([0.81 - 0.3, 0.0])


def test_all_source_lets_a_rejected_rewrite_hide_the_next_one() -> None:
    state = warmed()  # momentum_source="all", the reference rule
    accept(state, plan_step(state, TASKS["t4"], z(1, 0), vectors_of))
    plan = plan_step(state, TASKS["t5"], z(-30, 0), vectors_of)
    n = len(plan.eval_ids)
    assert not finish_step(state, plan, [True] * n, [False] * n).deploy
    assert not plan_step(state, TASKS["t6"], z(-30, 0), vectors_of).compare


@pytest.mark.parametrize(
    ("flag", "field"),
    [("use_coverage", "coverage"), ("use_boundary", "boundary"), ("use_fresh", "fresh")],
)
def test_evaluation_set_ablations(flag: str, field: str) -> None:
    cfg = replace(SMALL, trigger="always", **{flag: False})
    state = warmed(cfg)
    plan = plan_step(state, TASKS["t4"], z(1, 0), vectors_of)
    assert plan.compare
    assert getattr(plan, field) == ()
    others = {"coverage", "boundary", "fresh"} - {field}
    assert all(getattr(plan, f) for f in others)


def test_result_length_mismatch_is_an_error() -> None:
    state, plan = compared_state()
    with pytest.raises(ValueError, match="results per memory"):
        finish_step(state, plan, [True], [True])


def test_same_seed_same_decisions() -> None:
    def run(seed: int) -> list[tuple[bool, tuple[str, ...]]]:
        state = warmed(replace(SMALL, trigger="always", seed=seed))
        out = []
        for i, t in enumerate(["t4", "t5", "t6"]):
            plan = plan_step(state, TASKS[t], z(1, i), vectors_of)
            n = len(plan.eval_ids)
            v = finish_step(state, plan, [i % 2 == 0] * n, [True] * n)
            out.append((v.deploy, plan.fresh))
        return out

    assert run(1) == run(1)


def test_boundary_top_up_leaves_out_tasks_now_in_coverage() -> None:
    state, plan = compared_state()
    ids = plan.eval_ids
    # Put a coverage task into the old boundary: after a flip-free comparison it must not stay.
    state.boundary = [plan.coverage[0], *state.boundary]
    n = len(ids)
    finish_step(state, plan, [True] * n, [True] * n)
    assert plan.coverage[0] not in state.boundary
    assert not set(state.boundary) & set(plan.coverage)
