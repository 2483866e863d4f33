"""The harm probability of a candidate: a logistic model over its signals, calibrated online.

Every comparison the controller runs can be a labelled example: every task whose outcome
changed got worse under the candidate (harmful, 1), or every one got better, or none changed
(not harmful as far as the evaluation saw, 0). Tasks moving both ways (a noisy evaluator's
signature) say too little and are not kept. After each labelled comparison the weights are
refitted to the kept examples (the latest `max_examples`) by Newton's method, as the most
probable weights under a Gaussian prior centred on `PRIOR`, so a team's own memory moves them
as far as its evidence goes and no further. Before any example the prior alone scores.

The prior is set by what each signal means, not fitted to any stream: an ordinary one-line
append is harmful about one time in twenty (bias -3); losing the memory's lines is the
strongest sign (a truncation that drops a third of the lines lands near one half), repeating
the task's numbers next (an over-specific rule); turning against the momentum and an unusually
large change add a little. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from planfence.shared_memory.extras import extra_imports

from .signals import SIGNALS

with extra_imports("janus", "the Janus controller"):
    import numpy as np

PRIOR: tuple[float, ...] = (-3.0, 8.0, 1.0, 1.0, 0.5, 3.0)
"""Bias, then one weight per signal in `SIGNALS` order (lost, fresh, against, size, echo)."""
PRIOR_PRECISION = 1.0
"""How firmly the fit holds to the prior: a weight moves by about one unit per unit of
evidence against it."""
NEWTON_STEPS = 25

assert len(PRIOR) == len(SIGNALS) + 1


def probability(weights: Sequence[float], signals: Sequence[float]) -> float:
    """P(harmful | signals) under `weights` (bias first)."""
    x = weights[0] + sum(w * s for w, s in zip(weights[1:], signals, strict=True))
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def fit(examples: Sequence[Sequence[float]], prior: Sequence[float] = PRIOR) -> list[float]:
    """The most probable weights given `examples` (signals..., label) and the Gaussian prior."""
    w0 = np.asarray(prior, dtype=np.float64)
    if not examples:
        return [float(v) for v in w0]
    data = np.asarray(examples, dtype=np.float64)
    x = np.hstack([np.ones((len(data), 1)), data[:, :-1]])
    y = data[:, -1]
    w = w0.copy()
    eye = PRIOR_PRECISION * np.eye(len(w0))
    for _ in range(NEWTON_STEPS):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -35.0, 35.0)))
        grad = x.T @ (p - y) + PRIOR_PRECISION * (w - w0)
        hess = (x * (p * (1.0 - p))[:, None]).T @ x + eye
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.max(np.abs(step))) < 1e-8:
            break
    return [float(v) for v in w]
