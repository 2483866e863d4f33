"""Seeded k-means with k-means++ initialisation and warm starts; numpy only."""

from __future__ import annotations

from dataclasses import dataclass

from planfence.shared_memory.extras import extra_imports

with extra_imports("janus", "the Janus controller"):
    import numpy as np


@dataclass(frozen=True)
class KMeansResult:
    centroids: np.ndarray
    labels: np.ndarray
    iterations: int
    dists: np.ndarray | None = None
    """Squared distances of every point to `centroids`, when the last round computed them."""


def _sq_norms(points: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.einsum("ij,ij->i", points, points)
    return out


def _sq_dists(
    points: np.ndarray, centroids: np.ndarray, norms: np.ndarray | None = None
) -> np.ndarray:
    # |p|^2 - 2 p.c + |c|^2, clipped: rounding can make tiny distances negative. einsum, not a
    # BLAS matmul: these matrices are small, and a threaded BLAS on a busy machine is 10x slower.
    # `norms` is `_sq_norms(points)` when the caller already has it (same numbers either way).
    d = (
        (_sq_norms(points) if norms is None else norms)[:, None]
        - 2.0 * np.einsum("ij,kj->ik", points, centroids)
        + np.einsum("ij,ij->i", centroids, centroids)[None, :]
    )
    out: np.ndarray = np.maximum(d, 0.0)
    return out


def kmeans_pp_init(points: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++: each next centre drawn with probability proportional to squared distance."""
    n = points.shape[0]
    first = int(rng.integers(n))
    centres = [points[first]]
    closest = _sq_dists(points, points[first : first + 1])[:, 0]
    for _ in range(1, k):
        total = float(closest.sum())
        # When every point already sits on a centre, any point will do.
        idx = int(rng.integers(n)) if total <= 0.0 else int(rng.choice(n, p=closest / total))
        centres.append(points[idx])
        closest = np.minimum(closest, _sq_dists(points, points[idx : idx + 1])[:, 0])
    return np.array(centres, dtype=np.float64)


def kmeans(
    points: np.ndarray,
    k: int,
    rng: np.random.Generator,
    *,
    init: np.ndarray | None = None,
    max_iter: int = 50,
) -> KMeansResult:
    """Lloyd's algorithm; `init` (k x d) warm-starts from earlier centroids.

    k is clipped to the number of points. An emptied cluster is re-seeded at the point farthest
    from its centre, so the result always has k centroids.
    """
    points = np.asarray(points, dtype=np.float64)
    n = points.shape[0]
    if n == 0:
        raise ValueError("k-means needs at least one point")
    k = max(1, min(k, n))
    if init is not None and init.shape == (k, points.shape[1]):
        centroids = np.array(init, dtype=np.float64, copy=True)
    else:
        centroids = kmeans_pp_init(points, k, rng)
    labels = np.zeros(n, dtype=np.int64)
    norms = _sq_norms(points)
    it = 0
    dists, same = np.zeros((n, k)), False
    for it in range(1, max_iter + 1):
        dists = _sq_dists(points, centroids, norms)
        new_labels = np.argmin(dists, axis=1)
        counts = np.bincount(new_labels, minlength=k)
        if counts.all():
            new_centroids = _means(points, new_labels, counts)
        else:
            new_centroids = _reseeded(points, centroids, dists, new_labels)
        converged = it > 1 and np.array_equal(new_labels, labels)
        # Usually the last round moved no centroid, so its distances are the final ones.
        same = np.array_equal(new_centroids, centroids)
        labels, centroids = new_labels, new_centroids
        if converged:
            break
    return KMeansResult(centroids, labels, it, dists if same else None)


def _means(points: np.ndarray, labels: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each cluster's mean, when none is empty: the mean of its members in index order, the
    rows `points[labels == c]` holds (so the same numbers), gathered by one stable sort."""
    grouped = points[np.argsort(labels, kind="stable")]
    ends = np.cumsum(counts)
    out = np.empty((counts.shape[0], points.shape[1]), dtype=np.float64)
    start = 0
    for c, end in enumerate(ends.tolist()):
        out[c] = grouped[start:end].mean(axis=0)
        start = end
    return out


def _reseeded(
    points: np.ndarray, centroids: np.ndarray, dists: np.ndarray, new_labels: np.ndarray
) -> np.ndarray:
    """Cluster means, an emptied cluster re-seeded at the point farthest from its centre
    (`new_labels` is updated in place)."""
    n, k = points.shape[0], centroids.shape[0]
    new_centroids: np.ndarray = centroids.copy()
    for c in range(k):
        members = points[new_labels == c]
        if len(members):
            new_centroids[c] = members.mean(axis=0)
        else:
            far = int(np.argmax(dists[np.arange(n), new_labels]))
            new_centroids[c] = points[far]
            new_labels[far] = c
    return new_centroids


def representatives(
    points: np.ndarray, centroids: np.ndarray, dists: np.ndarray | None = None
) -> list[int]:
    """Index of the point nearest each centroid, all distinct (next nearest on collisions).

    `dists`: the squared distances of `points` to `centroids`, when already known."""
    if dists is None:
        dists = _sq_dists(np.asarray(points, dtype=np.float64), centroids)
    chosen: list[int] = []
    taken: set[int] = set()
    for c in range(centroids.shape[0]):
        # The first nearest point (what a stable sort puts first), unless it is taken.
        nearest = int(np.argmin(dists[:, c]))
        if nearest not in taken:
            chosen.append(nearest)
            taken.add(nearest)
            continue
        for idx in np.argsort(dists[:, c], kind="stable"):
            if int(idx) not in taken:
                chosen.append(int(idx))
                taken.add(int(idx))
                break
    return chosen
