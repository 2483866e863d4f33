"""Evaluation tasks aimed at an edit: the seen tasks whose relevant memory lines it changed. Pure.

A task's relevant lines are the `per_task` lines of the current and candidate memory most
similar to its question (by the encoder). A task is aimed at the edit when one of them is a line
the edit removed or added. The changed lines take turns, each offering its most similar aimed
task not yet chosen, so a truncation that drops lines of many topics is checked on many topics.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from planfence.shared_memory.extras import extra_imports

with extra_imports("janus", "the Janus controller"):
    import numpy as np


def row_dots(rows: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """rows @ vector, each entry summed along its own row: an entry does not depend on how
    many rows there are, so a column extended later equals one computed whole."""
    out: np.ndarray = np.sum(np.asarray(rows, dtype=np.float64) * vector, axis=1)
    return out


def aim(
    ids: Sequence[str],
    sims: np.ndarray,
    lines: Sequence[str],
    changed: Collection[str],
    size: int,
    *,
    per_task: int = 2,
    exclude: Collection[str] = (),
) -> list[str]:
    """Up to `size` ids of tasks aimed at the `changed` lines, not in `exclude`.

    Args:
        ids: the seen tasks.
        sims: similarity of each task (row) to each line (column).
        lines: the distinct lines of current and candidate memory.
        changed: the lines the edit removed or added (a subset of `lines`).
    """
    if size <= 0 or not len(ids) or not len(lines):
        return []
    changed_at = np.array([j for j, line in enumerate(lines) if line in changed], dtype=np.int64)
    if not changed_at.size:
        return []
    k = min(per_task, len(lines))
    top = np.argpartition(-sims, k - 1, axis=1)[:, :k] if k < len(lines) else None
    rows, cols = (
        np.nonzero(np.isin(top, changed_at))
        if top is not None
        else np.nonzero(np.ones((len(ids), len(changed_at)), dtype=bool))
    )
    hit = top[rows, cols] if top is not None else changed_at[cols]
    skip = set(exclude)
    queues: list[list[int]] = []
    for j in changed_at:
        near = [int(i) for i in rows[hit == j] if ids[i] not in skip]
        near.sort(key=lambda i: (-float(sims[i, j]), i))
        if near:
            queues.append(near)
    chosen: dict[str, None] = {}
    at = [0] * len(queues)
    while len(chosen) < size:
        progressed = False
        for n, queue in enumerate(queues):
            while at[n] < len(queue) and ids[queue[at[n]]] in chosen:
                at[n] += 1
            if at[n] < len(queue) and len(chosen) < size:
                chosen[ids[queue[at[n]]]] = None
                at[n] += 1
                progressed = True
        if not progressed:
            break
    return list(chosen)
