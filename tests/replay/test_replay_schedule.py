"""The replayed stream and the crossover rule: pure, seeded, no clock."""

from __future__ import annotations

import math

import pytest

from planfence.demos.bench.replay.schedule import RATES, Window, crossover, expect, schedule


def test_same_seed_same_stream_other_seed_other_stream() -> None:
    assert schedule(4, 30, seed=7) == schedule(4, 30, seed=7)
    assert schedule(4, 30, seed=7) != schedule(4, 30, seed=8)


@pytest.mark.parametrize("rate", [0, *RATES, 3.3])
def test_update_count_is_rate_times_actions(rate: float) -> None:
    windows = schedule(rate, 30)
    assert len(windows) == 30
    assert sum(w.updates for w in windows) == math.floor(rate * 30 + 0.5)


def test_actions_are_the_same_at_every_rate() -> None:
    streams = [schedule(rate, 40, seed=3) for rate in (0, *RATES)]
    actions = {tuple((w.index, w.replica, w.keys) for w in s) for s in streams}
    assert len(actions) == 1


def test_windows_stay_within_the_team() -> None:
    windows = schedule(16, 50, keys=16, replicas=3, seed=2)
    assert [w.index for w in windows] == list(range(50))
    for w in windows:
        assert 0 <= w.replica < 3
        assert 1 <= len(w.keys) <= 2
        assert list(w.keys) == sorted(set(w.keys))
        assert all(0 <= k < 16 for k in (*w.keys, *w.post, *w.late))
    assert {len(w.keys) for w in windows} == {1, 2}
    assert {w.replica for w in windows} == {0, 1, 2}


def test_late_share_splits_the_window() -> None:
    everything_post = schedule(8, 20, late_share=0.0)
    assert all(not w.late for w in everything_post)
    split = schedule(8, 200, late_share=0.2)
    late = sum(len(w.late) for w in split)
    post = sum(len(w.post) for w in split)
    assert 0 < late < post  # uniform placement: about one update in five lands late
    # the same updates, only moved between the two phases
    same = schedule(8, 20, late_share=0.5)
    for a, b in zip(everything_post, same, strict=True):
        assert sorted(a.post) == sorted(b.post + b.late)


def test_post_plan_revisions_make_stale_plans_at_every_rate() -> None:
    for rate in RATES:
        exp = expect(schedule(rate, 400, seed=1))
        assert exp.stale > 0
        assert exp.overtaken <= exp.stale
    low, high = expect(schedule(0.25, 400)), expect(schedule(16, 400))
    assert low.stale < high.stale
    assert expect(schedule(0, 50)).stale == 0


def test_expect_counts_stale_and_overtaken_plans() -> None:
    windows = [
        Window(0, 0, (1,), post=(), late=(1,)),  # revised only after the action: fine
        Window(1, 1, (1, 2), post=(3, 2), late=()),  # stale, replan goes through
        Window(2, 2, (4,), post=(4,), late=(5, 4)),  # stale, and overtaken during its replan
        Window(3, 0, (6, 7), post=(8,), late=(7,)),  # untouched before the check
    ]
    exp = expect(windows)
    assert (exp.actions, exp.updates, exp.stale, exp.overtaken) == (4, 8, 2, 1)
    assert [w.stale for w in windows] == [False, True, True, False]
    assert [w.overtaken for w in windows] == [False, False, True, False]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rate": -1, "actions": 5},
        {"rate": 1, "actions": 0},
        {"rate": 1, "actions": 5, "keys": 1},
        {"rate": 1, "actions": 5, "replicas": 0},
        {"rate": 1, "actions": 5, "late_share": 1.0},
    ],
)
def test_schedule_refuses_impossible_streams(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="need rate"):
        schedule(**kwargs)  # type: ignore[arg-type]


def test_crossover_interpolates_between_the_grid_points_around_it() -> None:
    # planfence costs 4 per action; the rival 1 per update: they cross at r = 4
    pts = [(r, 4.0, r * 1.0) for r in (1.0, 2.0, 8.0, 16.0)]
    assert crossover(pts) == (8.0, 4.0)


def test_crossover_is_the_start_of_the_last_run_below() -> None:
    pts = [(0.25, 1.0, 2.0), (1.0, 3.0, 2.0), (4.0, 1.0, 2.0), (16.0, 1.0, 9.0)]
    grid, interp = crossover(pts)
    assert grid == 4.0
    assert interp is not None and 1.0 < interp < 4.0


def test_crossover_when_always_or_never_below() -> None:
    assert crossover([(1.0, 1.0, 2.0), (2.0, 1.0, 3.0)]) == (1.0, None)
    assert crossover([(1.0, 3.0, 2.0), (2.0, 1.0, 1.0)]) == (None, None)  # a tie is not below
    assert crossover([]) == (None, None)
