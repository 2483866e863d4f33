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


def aim(
    ids: Sequence[str],
    task_vectors: np.ndarray,
    lines: Sequence[str],
    line_vectors: np.ndarray,
    changed: Collection[str],
    size: int,
    *,
    per_task: int = 2,
    exclude: Collection[str] = (),
) -> list[str]:
    """Up to `size` ids of tasks aimed at the `changed` lines, not in `exclude`.

    Args:
        ids, task_vectors: the seen tasks and their embeddings (one row each).
        lines, line_vectors: the distinct lines of current and candidate memory, embedded.
        changed: the lines the edit removed or added (a subset of `lines`).
    """
    if size <= 0 or not len(ids) or not len(lines) or not changed:
        return []
    sims = np.asarray(task_vectors, dtype=np.float64) @ np.asarray(line_vectors).T
    k = min(per_task, len(lines))
    # Each task's k most similar lines; ties go to the earlier line (a stable sort).
    top = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    skip = set(exclude)
    queues: list[list[int]] = []
    for j, line in enumerate(lines):
        if line not in changed:
            continue
        near = [i for i in np.flatnonzero((top == j).any(axis=1)) if ids[i] not in skip]
        near.sort(key=lambda i: (-float(sims[i, j]), int(i)))
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
