"""The strategies `planfence bench janus` runs, their controller settings, and how the
calibration's settling is measured."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from planfence.plugins.janus import JanusConfig
from planfence.plugins.janus.config import MomentumSource
from planfence.shared_memory.extras import extra_imports

with extra_imports("janus", "planfence bench janus"):
    import numpy as np

PAPER_STRATEGIES = (
    "plain",
    "janus",
    "always",
    "random",
    "periodic",
    "janus-no-coverage",
    "janus-no-boundary",
    "janus-no-fresh",
)
"""With `--janus paper`: the paper's study, Janus being the authors' method."""
STRATEGIES = (
    *PAPER_STRATEGIES,
    "janus-no-aim",
    "janus-tie-score",
    "janus-tie-deploy",
    "janus-uncalibrated",
    "janus-momentum",
    "janus-paper",
)
"""Janus with planfence's defaults (a tie keeps the current memory), its baselines and
ablations, the other two tie rules (`janus-tie-score`, `janus-tie-deploy`), and the paper's
method."""
REFERENCE = ("memory-free", "ceiling")
"""Calibration runs without a controller: no memory, and only harmless candidates deployed."""
STREAMS = ("calibrated", "runbook")
RUNBOOK_RHO = 1.0
"""The runbook stream's rho: every harmful edit there is abrupt."""
SETTLE_TOLERANCE = 0.02


def other_source(source: MomentumSource) -> MomentumSource:
    return "all" if source == "deployed" else "deployed"


def source_strategy(source: MomentumSource) -> str:
    """The extra strategy that runs Janus with the other momentum source."""
    return f"janus-momentum-{other_source(source)}"


def strategy_config(name: str, base: JanusConfig, rate: float) -> JanusConfig:
    """Controller settings of one strategy; `rate` is Janus's comparisons per step."""
    rate = min(1.0, max(rate, 1e-6))
    table: dict[str, dict[str, Any]] = {
        "plain": {"trigger": "never"},
        "janus": {},
        "always": {"trigger": "always"},
        "random": {"trigger": "random", "random_rate": rate},
        "periodic": {"trigger": "periodic", "period": max(1, round(1 / rate))},
        "janus-no-coverage": {"use_coverage": False},
        "janus-no-boundary": {"use_boundary": False},
        "janus-no-fresh": {"use_fresh": False},
        "janus-no-aim": {"aim_size": 0},
        "janus-tie-score": {"on_tie": "score"},
        "janus-tie-deploy": {"on_tie": "deploy"},
        "janus-uncalibrated": {"calibrate": False},
        "janus-momentum": {"trigger": "momentum"},
    }
    if name.startswith("janus-momentum-"):
        return replace(base, momentum_source=other_source(base.momentum_source))
    if name == "janus-paper":
        return JanusConfig.paper(seed=base.seed, momentum_source=base.momentum_source)
    return replace(base, **table[name])


def settle_point(
    history: Sequence[Sequence[float]], probes: Sequence[Sequence[float]], tolerance: float
) -> int:
    """How many comparisons until the model stays within `tolerance` of its final one: the
    harm probability it gives the probes (the run's candidates) differs from the final
    model's by at most `tolerance` on average, then and after (history[k]: the weights after
    k comparisons)."""
    if not probes or len(history) < 2:
        return 0
    x = np.hstack([np.ones((len(probes), 1)), np.asarray(probes, dtype=np.float64)])
    p = 1.0 / (1.0 + np.exp(-np.clip(x @ np.asarray(history, dtype=np.float64).T, -35, 35)))
    off = np.mean(np.abs(p - p[:, -1:]), axis=0)
    far = np.flatnonzero(off > tolerance)
    return 0 if far.size == 0 else int(far[-1]) + 1
