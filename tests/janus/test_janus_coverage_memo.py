"""The coverage memo: controllers sharing it decide exactly as they do alone, and share work."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from test_janus_controller import CONFIG, judge, run, stream

from planfence.plugins.janus import (
    CoverageMemo,
    FunctionEvaluator,
    HashingEncoder,
    JanusConfig,
    JanusController,
)
from planfence.plugins.janus.evalset import build_coverage, chain_digest

PAPER = JanusConfig.paper(support_size=8, coverage_size=5, fresh_size=3, seed=11)
STRATEGIES = [
    replace(PAPER, trigger="always"),
    PAPER,
    replace(PAPER, use_fresh=False),
    replace(PAPER, trigger="periodic", period=3),
    replace(PAPER, seed=12),
    CONFIG,  # the default controller: budgeted trigger, aimed tasks
]


async def decisions(memo: CoverageMemo | None, seed: int) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    encoder = HashingEncoder(dim=64)
    for config in STRATEGIES:
        controller = JanusController(
            FunctionEvaluator(judge), config=config, encoder=encoder, coverage_memo=memo
        )
        _, verdicts = await run(controller, stream(70, seed), [], 1)
        out.append((verdicts, json.dumps(controller.save_state(), sort_keys=True)))
    return out


async def test_controllers_sharing_a_memo_decide_as_they_do_alone() -> None:
    memo = CoverageMemo()
    for seed in (0, 1):  # a second stream: other tasks, the same memo, no false sharing
        assert await decisions(memo, seed) == await decisions(None, seed)
    assert memo.hits > 0 and memo.misses > 0
    # always-compare clusters at every step; the others mostly find its sets in the memo
    assert memo.hits > memo.misses / 2


vectors = arrays(
    np.float64,
    st.tuples(st.integers(1, 12), st.just(3)),
    elements=st.floats(-4, 4, allow_nan=False, allow_subnormal=False),
)


@settings(max_examples=60, deadline=None)
@given(points=vectors, k=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_memo_gives_build_coverages_sets_and_draws(points: np.ndarray, k: int, seed: int) -> None:
    ids = [f"t{i}" for i in range(len(points))]
    key = chain_digest(b"", points)
    memo = CoverageMemo()
    # A first clustering draws from the generator (k-means++): computed, never stored.
    rng_a, rng_b = np.random.default_rng(seed), np.random.default_rng(seed)
    first = memo.build(key, ids, points, k, rng_a)
    want = build_coverage(ids, points, k, rng_b)
    assert first.ids == want.ids and np.array_equal(first.centroids, want.centroids)
    assert rng_a.random() == rng_b.random() and memo.misses == memo.hits == 0
    # Warm starts: the same sets as computing afresh, found again the second time.
    previous = want.centroids + 0.25
    for _ in range(2):
        got = memo.build(key, ids, points, k, rng_a, previous=previous)
        fresh = build_coverage(ids, points, k, rng_b, previous=previous)
        assert got.ids == fresh.ids and np.array_equal(got.centroids, fresh.centroids)
        got.centroids[:] = 0.0  # the caller may change what it got; the memo keeps its copy
    assert (memo.misses, memo.hits) == (1, 1)
    assert rng_a.random() == rng_b.random()


def test_chain_digest_names_content_whatever_the_batches() -> None:
    rows = np.arange(12.0).reshape(4, 3)
    whole = chain_digest(b"", rows)
    assert chain_digest(chain_digest(b"", rows[:1]), rows[1:]) == whole
    changed = rows.copy()
    changed[3, 2] += 1e-12
    assert chain_digest(b"", changed) != whole
    assert chain_digest(b"", rows[:3]) != whole
