"""The Memory Momentum Trigger and its ablations: when to compare old and new memory. Pure."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import JanusConfig

Vector = np.ndarray


def cosine(a: Vector, b: Vector, eps: float = 1e-9) -> float:
    """Cosine similarity; 0.0 when either norm is (nearly) zero, as the reference code does."""
    na = float(np.linalg.norm(a))
    nb = float(np.linalg.norm(b))
    if na < eps or nb < eps:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def momentum_update(momentum: Vector | None, z: Vector, beta: float) -> Vector:
    """m_t = beta * m_{t-1} + (1 - beta) * z_t; the first update takes z_t as it is."""
    if momentum is None:
        return np.array(z, dtype=np.float64, copy=True)
    return beta * momentum + (1.0 - beta) * z


@dataclass(frozen=True)
class TriggerInfo:
    """Whether a post-warm-up step compares memories, and why."""

    fired: bool
    kind: str
    reason: str
    cosine: float | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "fired": self.fired,
            "kind": self.kind,
            "reason": self.reason,
            "cosine": self.cosine,
        }


def decide_trigger(
    config: JanusConfig,
    z: Vector,
    momentum: Vector | None,
    candidate_number: int,
    draw: float,
) -> TriggerInfo:
    """Decide one post-warm-up step.

    Args:
        z: phi(candidate) - phi(current memory).
        momentum: m_{t-1}, None before the first post-warm-up step.
        candidate_number: 1 for the first changed candidate after warm-up (periodic counts
            candidates, so "every N" means every N real updates).
        draw: a uniform [0, 1) number, drawn every step so every strategy consumes the same
            random stream; only "random" looks at it.
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
        fired = candidate_number % config.period == 0
        return TriggerInfo(fired, kind, f"every {config.period} steps", cos)
    if cos is None:
        return TriggerInfo(False, kind, "no momentum yet", None)
    fired = cos < config.tau
    relation = "<" if fired else ">="
    return TriggerInfo(fired, kind, f"cos(z, m) = {cos:.4f} {relation} tau = {config.tau}", cos)
