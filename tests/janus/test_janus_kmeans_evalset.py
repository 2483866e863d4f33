"""k-means (seeded, k-means++, warm start) and the evaluation-set helpers."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from planfence.plugins.janus.evalset import assemble, build_coverage, refill_boundary, sample
from planfence.plugins.janus.kmeans import kmeans, representatives

BLOBS = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 0.1], [10.0, 10.0], [10.1, 10.0], [10.0, 10.2]])


def test_two_blobs_give_one_representative_each() -> None:
    result = kmeans(BLOBS, 2, np.random.default_rng(0))
    assert sorted(np.bincount(result.labels).tolist()) == [3, 3]
    reps = representatives(BLOBS, result.centroids)
    assert sorted(r // 3 for r in reps) == [0, 1]


def test_same_seed_same_clusters_and_different_k_clipped() -> None:
    a = kmeans(BLOBS, 3, np.random.default_rng(5))
    b = kmeans(BLOBS, 3, np.random.default_rng(5))
    assert np.array_equal(a.centroids, b.centroids)
    assert kmeans(BLOBS, 50, np.random.default_rng(0)).centroids.shape == (6, 2)


def test_warm_start_uses_previous_centroids() -> None:
    init = np.array([[10.0, 10.0], [0.0, 0.0]])
    result = kmeans(BLOBS, 2, np.random.default_rng(0), init=init)
    # Started from the given centres, cluster 0 stays the far blob.
    assert result.centroids[0][0] > 5 and result.centroids[1][0] < 5
    assert result.iterations <= 3


def test_representatives_are_distinct_even_for_identical_centroids() -> None:
    reps = representatives(BLOBS, np.array([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]))
    assert len(set(reps)) == 3


def test_coverage_maps_back_to_ids() -> None:
    ids = [f"t{i}" for i in range(6)]
    cov = build_coverage(ids, BLOBS, 2, np.random.default_rng(1))
    assert len(cov.ids) == 2 and {int(i[1:]) // 3 for i in cov.ids} == {0, 1}


def test_boundary_refill_tops_up_with_old_items_in_order() -> None:
    rng = np.random.default_rng(0)
    out = refill_boundary(["f1", "f2"], ["b1", "f1", "b2", "b3"], 4, rng)
    assert sorted(out[:2]) == ["f1", "f2"]
    assert out[2:] == ["b1", "b2"]


def test_boundary_refill_samples_flips_when_there_are_enough() -> None:
    flips = [f"f{i}" for i in range(10)]
    out = refill_boundary(flips, ["b1"], 8, np.random.default_rng(0))
    assert len(out) == 8 and set(out) <= set(flips)


def test_boundary_refill_with_no_flips_keeps_old_boundary() -> None:
    assert refill_boundary([], ["b1", "b2"], 8, np.random.default_rng(0)) == ["b1", "b2"]


def test_assemble_dedupes_in_order() -> None:
    assert assemble(["a", "b"], ["b", "c"], ["a", "d"]) == ["a", "b", "c", "d"]


def test_sample_small_pool_returns_everything() -> None:
    assert sorted(sample(["x", "y", "x"], 5, np.random.default_rng(0))) == ["x", "y"]
    assert sample(["x"], 0, np.random.default_rng(0)) == []


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.floats(-5, 5), st.floats(-5, 5)), min_size=1, max_size=30),
    st.integers(1, 8),
    st.integers(0, 2**31),
)
def test_kmeans_properties(points: list[tuple[float, float]], k: int, seed: int) -> None:
    arr = np.array(points, dtype=np.float64)
    result = kmeans(arr, k, np.random.default_rng(seed))
    kk = min(k, len(points))
    assert result.centroids.shape == (kk, 2)
    assert result.labels.min() >= 0 and result.labels.max() < kk
    reps = representatives(arr, result.centroids)
    assert len(reps) == len(set(reps)) == kk
    again = kmeans(arr, k, np.random.default_rng(seed))
    assert np.array_equal(result.labels, again.labels)


def test_boundary_refill_skips_old_items_that_became_coverage() -> None:
    # Reference method: remaining = old boundary items not in F and not in the coverage set.
    out = refill_boundary(["f1"], ["b1", "c1", "b2"], 3, np.random.default_rng(0), coverage=["c1"])
    assert out == ["f1", "b1", "b2"]
