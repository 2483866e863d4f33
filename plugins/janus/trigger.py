"""The Memory Momentum Trigger and its ablations: when to compare old and new memory. Pure.

The budgeted trigger (the default) is in `budget`; it reads the momentum cosine as one of its
signals."""

from __future__ import annotations

import math
from dataclasses import dataclass

from planfence.shared_memory.extras import extra_imports

from .config import JanusConfig

with extra_imports("janus", "the Janus controller"):
    import numpy as np

Vector = np.ndarray


def cosine(a: Vector, b: Vector, eps: float = 1e-9) -> float:
    """Cosine similarity; 0.0 when either norm is (nearly) zero, as the reference code does."""
    # sqrt(x . x) is how numpy's `norm` computes a vector's 2-norm (the same numbers, faster).
    na = math.sqrt(float(np.dot(a, a)))
    nb = math.sqrt(float(np.dot(b, b)))
    if na < eps or nb < eps:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def momentum_update(momentum: Vector | None, z: Vector, beta: float) -> Vector:
    """m_t = beta * m_{t-1} + (1 - beta) * z_t; the first update takes z_t as it is."""
    if momentum is None:
        return np.array(z, dtype=np.float64, copy=True)
    return beta * momentum + (1.0 - beta) * z


def step_draw(seed: int, step: int) -> float:
    """The uniform [0, 1) draw of one step, from a generator seeded by (seed, step) alone.

    A per-step seed, as in the reference code: a strategy's draw at step t never depends on
    how many random numbers other parts of the controller consumed before it.
    """
    return float(np.random.default_rng([seed & 0xFFFF_FFFF_FFFF_FFFF, step]).random())


@dataclass(frozen=True)
class TriggerInfo:
    """Whether a post-warm-up step compares memories, and why."""

    fired: bool
    kind: str
    reason: str
    cosine: float | None = None
    score: float | None = None
    """The budgeted trigger's harm probability."""
    signals: dict[str, float] | None = None
    """The budgeted trigger's signals, by name."""

    def to_dict(self) -> dict[str, object]:
        return {
            "fired": self.fired,
            "kind": self.kind,
            "reason": self.reason,
            "cosine": self.cosine,
            "score": self.score,
            "signals": None if self.signals is None else dict(self.signals),
        }


def decide_trigger(
    config: JanusConfig,
    z: Vector,
    momentum: Vector | None,
    index: int,
    draw: float,
) -> TriggerInfo:
    """Decide one post-warm-up step.

    Args:
        z: phi(candidate) - phi(current memory).
        momentum: m_{t-1}, None before the first post-warm-up step.
        index: 0 for the first post-warm-up step (unchanged candidates count too, as in the
            reference code); "periodic" fires at index 0, period, 2 * period, ...
        draw: a uniform [0, 1) number from the step's own generator; only "random" uses it.
    """
    kind = config.trigger
    cos = cosine(z, momentum, config.eps) if momentum is not None else None
    if kind == "never":
        return TriggerInfo(False, kind, "plain updater: never compares", cos)
    if kind == "always":
        return TriggerInfo(True, kind, "compares every step", cos)
    if kind == "random":
        fired = draw < config.random_rate
        return TriggerInfo(fired, kind, f"random draw {draw:.4f} vs rate {config.random_rate}", cos)
    if kind == "periodic":
        fired = index % config.period == 0
        return TriggerInfo(fired, kind, f"every {config.period} steps", cos)
    if cos is None:
        return TriggerInfo(False, kind, "no momentum yet", None)
    fired = cos < config.tau
    relation = "<" if fired else ">="
    return TriggerInfo(fired, kind, f"cos(z, m) = {cos:.4f} {relation} tau = {config.tau}", cos)
