"""The hybrid trigger-time evaluation set: coverage, boundary and fresh tasks. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .kmeans import kmeans, representatives


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
