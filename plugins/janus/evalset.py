"""The hybrid trigger-time evaluation set: coverage, boundary and fresh tasks. Pure."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from planfence.shared_memory.extras import extra_imports

from .kmeans import kmeans, representatives

with extra_imports("janus", "the Janus controller"):
    import numpy as np


@dataclass(frozen=True)
class Coverage:
    """Representative task ids (nearest each centroid) and the centroids that chose them."""

    ids: list[str]
    centroids: np.ndarray


def build_coverage(
    ids: Sequence[str],
    vectors: np.ndarray,
    k: int,
    rng: np.random.Generator,
    *,
    previous: np.ndarray | None = None,
    max_iter: int = 50,
) -> Coverage:
    """Cluster every seen task into k groups and keep the task nearest each centroid."""
    result = kmeans(vectors, k, rng, init=previous, max_iter=max_iter)
    picked = representatives(vectors, result.centroids, result.dists)
    return Coverage([ids[i] for i in picked], result.centroids)


class CoverageFn(Protocol):
    """`build_coverage`'s signature: what the decision logic calls to cluster the seen tasks."""

    def __call__(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        k: int,
        rng: np.random.Generator,
        *,
        previous: np.ndarray | None = None,
        max_iter: int = 50,
    ) -> Coverage: ...


def chain_digest(digest: bytes, rows: np.ndarray) -> bytes:
    """`digest` extended by `rows`, one row at a time (so it does not depend on how the rows
    were batched): the content key of a growing matrix of task vectors."""
    for row in np.asarray(rows, dtype=np.float64):
        digest = hashlib.blake2b(digest + row.tobytes(), digest_size=16).digest()
    return digest


class CoverageMemo:
    """Warm-started coverage sets already computed, shared by controllers.

    From the previous centroids, k-means draws no random numbers: the coverage set is a pure
    function of the task vectors and those centroids. Controllers that meet the same tasks with
    the same encoder (the strategies of a benchmark, one stream under several settings) often
    cluster the same vectors from the same centroids, and then compute it once. The vectors are
    named by their content (`key`, e.g. `chain_digest`), the centroids by a digest of theirs; a
    first clustering (k-means++, which draws from the caller's generator) is never shared.
    """

    def __init__(self, *, max_items: int = 4096) -> None:
        self.max_items = max_items
        self.hits = 0
        self.misses = 0
        self._items: dict[tuple[object, ...], tuple[np.ndarray, list[int]]] = {}

    def build(
        self,
        key: bytes,
        ids: Sequence[str],
        vectors: np.ndarray,
        k: int,
        rng: np.random.Generator,
        *,
        previous: np.ndarray | None = None,
        max_iter: int = 50,
    ) -> Coverage:
        """`build_coverage(ids, vectors, ...)`, where `key` names the content of `vectors`."""
        n, dim = vectors.shape
        if previous is None or previous.shape != (max(1, min(k, n)), dim):
            return build_coverage(ids, vectors, k, rng, previous=previous, max_iter=max_iter)
        start = np.asarray(previous, dtype=np.float64)
        item = (key, n, dim, k, max_iter, hashlib.blake2b(start.tobytes(), digest_size=16).digest())
        found = self._items.get(item)
        if found is None:
            self.misses += 1
            result = kmeans(vectors, k, rng, init=previous, max_iter=max_iter)
            picked = representatives(vectors, result.centroids, result.dists)
            if len(self._items) >= self.max_items:
                self._items.clear()
            found = self._items[item] = (result.centroids, picked)
        else:
            self.hits += 1
        centroids, picked = found
        return Coverage([ids[i] for i in picked], centroids.copy())


def sample(pool: Sequence[str], size: int, rng: np.random.Generator) -> list[str]:
    """`size` distinct ids drawn from `pool` in draw order (all of them when it is smaller)."""
    unique = list(dict.fromkeys(pool))
    if size <= 0 or not unique:
        return []
    if len(unique) <= size:
        # Still permute through the generator so the random stream does not depend on luck.
        order = rng.permutation(len(unique))
        return [unique[i] for i in order]
    picked = rng.choice(len(unique), size=size, replace=False)
    return [unique[int(i)] for i in picked]


def refill_boundary(
    flips: Sequence[str],
    old_boundary: Sequence[str],
    size: int,
    rng: np.random.Generator,
    *,
    coverage: Iterable[str] = (),
) -> list[str]:
    """New boundary: a sample of `size` flip tasks, topped up with old boundary tasks.

    Old items keep their order and are only used when there are fewer than `size` flips; an
    old item that is now a coverage task is skipped (it is evaluated as coverage anyway, so
    keeping it would shrink the next evaluation set), as in the reference method.
    """
    chosen = sample(flips, size, rng)
    skip = set(coverage)
    for task_id in old_boundary:
        if len(chosen) >= size:
            break
        if task_id not in chosen and task_id not in skip:
            chosen.append(task_id)
    return chosen


def assemble(*parts: Iterable[str]) -> list[str]:
    """Union of the parts, duplicates removed, first occurrence kept."""
    out: dict[str, None] = {}
    for part in parts:
        for task_id in part:
            out.setdefault(task_id, None)
    return list(out)
