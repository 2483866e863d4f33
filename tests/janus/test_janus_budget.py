"""The budgeted trigger: cheap signals, the online calibration, the budget over a sliding
window with its floor, the tie rule, and evaluation tasks aimed at the edit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planfence.plugins.janus import JanusConfig, Task
from planfence.plugins.janus.aim import aim, row_dots
from planfence.plugins.janus.budget import decide_budget
from planfence.plugins.janus.calibration import PRIOR, fit, probability
from planfence.plugins.janus.decision import finish_step, plan_step
from planfence.plugins.janus.signals import SIGNALS, Edit, measure
from planfence.plugins.janus.state import JanusState

BUDGET = JanusConfig(support_size=4, coverage_size=2, fresh_size=2, seed=3, aim_size=0)
VECS = {f"t{i}": [float(i % 2), float(i // 2)] for i in range(12)}
TASKS = {i: Task(id=i, question=f"question {i} about 42") for i in VECS}


def vectors_of(ids: Sequence[str]) -> np.ndarray:
    return np.array([VECS[i] for i in ids])


def z(*xs: float) -> np.ndarray:
    return np.array(xs, dtype=np.float64)


def memory(n: int) -> str:
    return "\n".join(f"rule {i}" for i in range(n))


# ---- signals


def test_edit_reads_removed_and_added_lines_as_multisets() -> None:
    edit = Edit.between("a\nb\nb\nc", "b\nc\nd\n\n  ")
    assert edit.removed == ("a", "b") and edit.added == ("d",)
    assert edit.changed == ("a", "b", "d")
    assert Edit.between("a\nb", "a\nb").changed == ()


def test_signals_of_an_append_a_truncation_and_an_echo() -> None:
    old = memory(10)
    append = measure(Edit.between(old, old + "\nrule 10"), z(1, 0), None, [], "q")
    assert dict(zip(SIGNALS, append, strict=True)) == pytest.approx(
        {"lost": 0.0, "fresh": 1 / 11, "against": 0.0, "size": 0.0, "echo": 0.0}
    )
    cut = measure(Edit.between(old, memory(4)), z(-1, 0), z(1, 0), [0.5, 0.5], "q")
    lost, fresh, against, size, echo = cut
    assert (lost, fresh, against, echo) == (0.6, 0.0, 1.0, 0.0)
    assert size == pytest.approx(np.log(2.0))
    # an added line that repeats the task's numbers memorises the task
    task = "Ana has 17 apples and 4 pears; how many?"
    echo = measure(Edit.between(old, old + "\nAna: 17 and 4 make 21"), z(1, 0), None, [], task)
    assert echo[4] == 1.0
    assert measure(None, z(0, 0), None, [1.0], task) == (0.0, 0.0, 0.0, 0.0, 0.0)


# ---- calibration


def test_the_prior_ranks_a_truncation_far_above_an_append() -> None:
    append = probability(PRIOR, (0.0, 0.05, 0.0, 0.0, 0.0))
    truncation = probability(PRIOR, (0.5, 0.0, 0.5, 1.0, 0.0))
    assert append < 0.06 < 0.8 < truncation
    assert fit([]) == list(PRIOR)


def test_calibration_learns_a_teams_own_harm() -> None:
    # In this team, appends that turn against the momentum are the harmful ones.
    harmful = [0.0, 0.05, 1.0, 0.0, 0.0, 1.0]
    benign = [0.0, 0.05, -1.0, 0.0, 0.0, 0.0]
    weights = fit([harmful, benign] * 20)
    assert probability(weights, harmful[:-1]) > 0.5 > probability(PRIOR, harmful[:-1])
    assert probability(weights, benign[:-1]) < probability(PRIOR, benign[:-1])
    assert fit([harmful, benign] * 20) == weights  # deterministic


# ---- the budget


def test_an_unchanged_candidate_is_never_compared() -> None:
    assert not decide_budget(BUDGET, None, []).fired


def test_the_floor_overrides_a_spent_budget() -> None:
    spent = [(0.9, True)] * 49
    assert not decide_budget(BUDGET, 0.79, spent).fired
    info = decide_budget(BUDGET, 0.8, spent)
    assert info.fired and "floor" in info.reason


def test_the_budget_goes_to_the_highest_scores() -> None:
    # Every step changes something: the budget pays for 30% of the candidates.
    window = [(s, False) for s in np.linspace(0.01, 0.5, 40)]
    assert decide_budget(BUDGET, 0.45, window).fired
    assert not decide_budget(BUDGET, 0.2, window).fired
    # Few changed candidates: the budget covers all of them.
    quiet = [(None, False)] * 40 + [(0.02, False)] * 3
    assert decide_budget(BUDGET, 0.01, quiet).fired


@settings(max_examples=40, deadline=None)
@given(
    scores=st.lists(st.one_of(st.none(), st.floats(0.0, 0.79)), min_size=60, max_size=200),
    budget=st.sampled_from([0.1, 0.3, 0.5]),
    window=st.integers(5, 40),
)
def test_no_window_compares_more_than_the_budget_below_the_floor(
    scores: list[float | None], budget: float, window: int
) -> None:
    config = replace(BUDGET, budget=budget, budget_window=window)
    slots: list[tuple[float | None, bool]] = []
    for score in scores:
        slots.append((score, decide_budget(config, score, slots).fired))
    fired = [c for _, c in slots]
    for end in range(window, len(fired) + 1):
        assert sum(fired[end - window : end]) <= budget * window


# ---- a step under the budgeted trigger


def warmed(config: JanusConfig = BUDGET) -> JanusState:
    state = JanusState.initial(config)
    for i in range(4):
        plan_step(state, TASKS[f"t{i}"], z(1, 0), vectors_of)
    return state


def truncated_plan(state: JanusState, step: int = 4) -> object:
    edit = Edit.between(memory(10), memory(3))
    plan = plan_step(state, TASKS[f"t{step}"], z(-1, 0), vectors_of, edit=edit)
    assert plan.compare and plan.signals is not None
    assert plan.trigger is not None and plan.trigger.score is not None
    assert plan.trigger.signals is not None and plan.trigger.signals["lost"] == 0.7
    return plan


def test_a_one_way_comparison_calibrates_and_a_mixed_one_does_not() -> None:
    state = warmed()
    plan = truncated_plan(state)
    n = len(plan.eval_ids)  # type: ignore[attr-defined]
    verdict = finish_step(state, plan, [True] * n, [False] + [True] * (n - 1))  # type: ignore[arg-type]
    assert not verdict.deploy
    assert state.examples == [[*plan.signals, 1.0]]  # type: ignore[attr-defined]
    assert state.weights is not None and state.weights != list(PRIOR)
    mixed = truncated_plan(state, 5)
    m = len(mixed.eval_ids)  # type: ignore[attr-defined]
    old = [True, False] + [True] * (m - 2)
    new = [False, True] + [True] * (m - 2)
    finish_step(state, mixed, old, new)  # type: ignore[arg-type]
    assert len(state.examples) == 1


@pytest.mark.parametrize(("rule", "deploy"), [("keep", False), ("deploy", True), ("score", False)])
def test_ties_are_decided_by_the_tie_rule(rule: str, deploy: bool) -> None:
    state = warmed(replace(BUDGET, on_tie=rule))  # type: ignore[arg-type]
    plan = truncated_plan(state)  # 70% of the lines lost: harm probability above one half
    assert plan.trigger.score > 0.5  # type: ignore[attr-defined]
    n = len(plan.eval_ids)  # type: ignore[attr-defined]
    verdict = finish_step(state, plan, [True] * n, [True] * n)  # type: ignore[arg-type]
    assert verdict.deploy is deploy and verdict.acc_new == verdict.acc_old
    assert "a tie keeps" in verdict.reason or deploy
    # a tie in which no task moved teaches "not harmful", as far as the evaluation saw
    assert state.examples == [[*plan.signals, 0.0]]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("rule", "deploy"), [(None, False), ("score", True), ("deploy", True)])
def test_an_unsuspicious_tie_is_kept_by_default_and_deployed_under_score(
    rule: str | None, deploy: bool
) -> None:
    config = replace(BUDGET, trigger="always")
    state = warmed(config if rule is None else replace(config, on_tie=rule))  # type: ignore[arg-type]
    edit = Edit.between(memory(10), memory(11))  # an append
    plan = plan_step(state, TASKS["t4"], z(1, 0), vectors_of, edit=edit)
    assert plan.compare and plan.trigger is not None and plan.trigger.score < 0.5
    n = len(plan.eval_ids)
    verdict = finish_step(state, plan, [True] * n, [True] * n)
    assert verdict.deploy is deploy
    if rule is None:  # nothing is deployed without evidence, and the log says why
        assert verdict.reason.endswith("(a tie keeps the current memory)")
        assert state.counters.rejected == 1


# ---- aimed tasks


def test_aimed_tasks_are_those_whose_relevant_lines_changed() -> None:
    ids = ["a1", "a2", "b1", "c1"]
    lines = ["alpha rule", "beta rule", "gamma rule"]
    sims = np.array(
        [[0.9, 0.1, 0.0], [0.8, 0.0, 0.1], [0.1, 0.9, 0.2], [0.0, 0.2, 0.9]], dtype=np.float64
    )
    # tasks take turns by changed line: alpha's best, gamma's best, then alpha's second
    assert aim(ids, sims, lines, {"alpha rule", "gamma rule"}, 3, per_task=1) == [
        "a1",
        "c1",
        "a2",
    ]
    assert aim(ids, sims, lines, {"beta rule"}, 5, per_task=1) == ["b1"]
    assert aim(ids, sims, lines, {"beta rule"}, 5, per_task=2) == ["b1", "c1", "a1"]
    assert aim(ids, sims, lines, {"alpha rule"}, 5, per_task=1, exclude={"a1"}) == ["a2"]
    assert aim(ids, sims, lines, set(), 5) == [] and aim(ids, sims, lines, {"x"}, 0) == []


def test_row_dots_do_not_depend_on_how_many_rows_there_are() -> None:
    rng = np.random.default_rng(0)
    rows, vector = rng.standard_normal((50, 33)), rng.standard_normal(33)
    whole = row_dots(rows, vector)
    assert np.array_equal(
        np.concatenate([row_dots(rows[:7], vector), row_dots(rows[7:], vector)]), whole
    )
    assert whole == pytest.approx(rows @ vector)


def test_a_compared_edit_is_evaluated_on_tasks_aimed_at_it() -> None:
    config = replace(BUDGET, trigger="always", aim_size=2, use_coverage=False, use_boundary=False)
    config = replace(config, use_fresh=False)
    state = warmed(config)
    near = {("t2", "speed rule"): 1.0, ("t3", "speed rule"): 0.5, ("t1", "fractions rule"): 1.0}

    def similarity(ids: Sequence[str], memory_lines: Sequence[str]) -> np.ndarray:
        return np.array([[near.get((i, line), 0.0) for line in memory_lines] for i in ids])

    edit = Edit.between("fractions rule\nspeed rule", "fractions rule")
    plan = plan_step(state, TASKS["t4"], z(1, 0), vectors_of, edit=edit, similarity=similarity)
    assert plan.compare and plan.aimed == ("t2", "t3") and plan.eval_ids == ["t2", "t3"]
    # without lines to read (the paper's method) nothing is aimed
    plain = plan_step(warmed(config), TASKS["t4"], z(1, 0), vectors_of)
    assert plain.aimed == () and plain.eval_ids == []
