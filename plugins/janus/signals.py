"""Cheap signals of an edit, computed without the evaluator: what the budgeted trigger scores.

An edit is read as its rendered lines (a cheatsheet's rules, a store's items): which lines it
removed and which it added, as multisets, so a rewritten line is one removed and one added.
Every signal is a number in a small range, 0 for an ordinary one-line append:

- lost: share of the current memory's lines the candidate drops (a truncation or a topic
  rewrite keeps little; an append keeps all);
- fresh: share of the candidate's lines that are new;
- against: -cos(z, m), the paper's signal (the change turns against the momentum);
- size: log of the change's norm over the median norm of recent changes, clipped to [-3, 3];
- echo: share of the task's numbers that the added lines repeat (a rule that memorises one
  task, the paper's over-specific harm).
Pure.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from planfence.shared_memory.extras import extra_imports

from .trigger import cosine

with extra_imports("janus", "the Janus controller"):
    import numpy as np

SIGNALS = ("lost", "fresh", "against", "size", "echo")
"""The signals in the order the calibration model reads them."""
SIZE_CLIP = 3.0
NORMS_KEPT = 20
"""How many recent change norms the size signal compares with."""
_NUMBER_RE = re.compile(r"\d+(?:[.,]\d+)?")


def lines_of(text: str) -> list[str]:
    """The non-empty lines of a rendered memory, stripped."""
    return [s for s in (line.strip() for line in text.splitlines()) if s]


@dataclass(frozen=True)
class Edit:
    """The lines an edit removed and added (multisets, in their order of appearance)."""

    old: tuple[str, ...]
    new: tuple[str, ...]
    removed: tuple[str, ...]
    added: tuple[str, ...]

    @classmethod
    def between(cls, old_text: str, new_text: str) -> Edit:
        old, new = lines_of(old_text), lines_of(new_text)
        return cls(tuple(old), tuple(new), _minus(old, new), _minus(new, old))

    @property
    def changed(self) -> tuple[str, ...]:
        """Removed and added lines, distinct, removed first."""
        return tuple(dict.fromkeys((*self.removed, *self.added)))


def _minus(a: Sequence[str], b: Sequence[str]) -> tuple[str, ...]:
    """The lines of `a` not matched by a line of `b` (as multisets)."""
    left = Counter(b)
    out = []
    for line in a:
        if left[line] > 0:
            left[line] -= 1
        else:
            out.append(line)
    return tuple(out)


def measure(
    edit: Edit | None,
    z: np.ndarray,
    momentum: np.ndarray | None,
    norms: Sequence[float],
    question: str,
    eps: float = 1e-9,
) -> tuple[float, ...]:
    """The signals of one candidate, in `SIGNALS` order.

    Args:
        edit: the lines changed (None: unknown, lost and fresh read 0).
        z: phi(candidate) - phi(current memory).
        momentum: m_{t-1}, None before the first post-warm-up change.
        norms: norms of recent changes (the size signal's reference).
        question: the task the candidate follows.
    """
    lost = fresh = echo = 0.0
    if edit is not None:
        lost = len(edit.removed) / len(edit.old) if edit.old else 0.0
        fresh = len(edit.added) / len(edit.new) if edit.new else 0.0
        numbers = set(_NUMBER_RE.findall(question))
        if numbers and edit.added:
            said = set(_NUMBER_RE.findall("\n".join(edit.added)))
            echo = len(numbers & said) / len(numbers)
    against = -cosine(z, momentum, eps) if momentum is not None else 0.0
    size = 0.0
    norm = math.sqrt(float(np.dot(z, z)))
    if norms and norm > eps:
        reference = float(np.median(norms))
        if reference > eps:
            size = max(-SIZE_CLIP, min(SIZE_CLIP, math.log(norm / reference)))
    return (lost, fresh, against, size, echo)
