"""Everything the controller remembers between steps, and its JSON form for resuming."""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planfence.shared_memory.extras import extra_imports

from .config import PAPER, JanusConfig
from .errors import JanusStateError
from .signals import SIGNALS
from .tasks import Task

with extra_imports("janus", "the Janus controller"):
    import numpy as np

STATE_VERSION = 2
"""Version 2 adds the budgeted trigger's window and calibration; a version 1 state (written
before they existed, with the authors' tie rule and no aimed tasks) still loads."""


def _vector(data: Any, what: str) -> np.ndarray | None:
    if data is None:
        return None
    try:
        return np.array(data, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise JanusStateError(f"malformed {what} in saved state: {exc}") from None


@dataclass
class Counters:
    steps: int = 0
    candidates: int = 0  # post-warm-up candidates that differ from the current memory
    comparisons: int = 0
    deployed: int = 0
    rejected: int = 0
    evaluations: int = 0

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class JanusState:
    """Momentum, evaluation sets, centroids, seen tasks, random stream and counters; for the
    budgeted trigger also its window, recent change norms and calibration.

    Task embeddings are not part of the state: the encoder recomputes them on resume, which
    keeps a saved state small enough to live as a record in the shared memory.
    """

    config: JanusConfig
    rng: np.random.Generator
    step: int = 0
    momentum: np.ndarray | None = None
    centroids: np.ndarray | None = None
    coverage: list[str] = field(default_factory=list)
    boundary: list[str] = field(default_factory=list)
    seen: dict[str, Task] = field(default_factory=dict)
    since_trigger: list[str] = field(default_factory=list)
    last_trigger_step: int | None = None
    counters: Counters = field(default_factory=Counters)
    window: list[tuple[float | None, bool]] = field(default_factory=list)
    """Budgeted trigger: the latest post-warm-up steps (score or None, compared)."""
    norms: list[float] = field(default_factory=list)
    """Budgeted trigger: norms of the latest changes (the size signal's reference)."""
    examples: list[list[float]] = field(default_factory=list)
    """Calibration examples: a compared candidate's signals, then 1 (harmful) or 0."""
    weights: list[float] | None = None
    """Calibrated weights (None: the prior)."""

    @classmethod
    def initial(cls, config: JanusConfig) -> JanusState:
        return cls(config=config, rng=np.random.default_rng(config.seed))

    @property
    def warmed_up(self) -> bool:
        return self.step >= self.config.support_size

    def copy(self) -> JanusState:
        """An independent copy (the controller works on one and commits it on success)."""
        return copy.deepcopy(self)

    def remember(self, task: Task) -> None:
        """Record a task as seen (a re-seen id keeps its place); trim to `max_seen_tasks`."""
        self.seen.setdefault(task.id, task)
        limit = self.config.max_seen_tasks
        if limit is not None:
            protected = set(self.coverage) | set(self.boundary) | set(self.since_trigger)
            protected.add(task.id)
            for task_id in list(self.seen):
                if len(self.seen) <= limit:
                    break
                if task_id not in protected:
                    del self.seen[task_id]

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "config": self.config.to_dict(),
            "rng": self.rng.bit_generator.state,
            "step": self.step,
            "momentum": None if self.momentum is None else self.momentum.tolist(),
            "centroids": None if self.centroids is None else self.centroids.tolist(),
            "coverage": list(self.coverage),
            "boundary": list(self.boundary),
            "seen": [t.to_dict() for t in self.seen.values()],
            "since_trigger": list(self.since_trigger),
            "last_trigger_step": self.last_trigger_step,
            "counters": self.counters.to_dict(),
            "window": [[score, compared] for score, compared in self.window],
            "norms": list(self.norms),
            "examples": [list(e) for e in self.examples],
            "weights": None if self.weights is None else list(self.weights),
        }

    @classmethod
    def from_json(cls, data: Any, *, config: JanusConfig | None = None) -> JanusState:
        """Rebuild a saved state; `config`, when given, must equal the saved one."""
        if not isinstance(data, dict) or data.get("version") not in (1, STATE_VERSION):
            raise JanusStateError(
                f"not a Janus state of version {STATE_VERSION}: {str(data)[:120]!r}"
            )
        try:
            settings = dict(data["config"])
            if data["version"] == 1:  # written before these settings existed: it ran so
                settings = {k: v for k, v in PAPER.items() if k != "trigger"} | settings
            saved = JanusConfig.from_dict(settings)
            if config is not None and config != saved:
                raise JanusStateError(
                    "saved Janus state was written with other settings: "
                    f"{saved.to_dict()} != {config.to_dict()}"
                )
            rng = np.random.default_rng()
            rng.bit_generator.state = data["rng"]
            seen = [Task.from_dict(t) for t in data["seen"]]
            state = cls(
                config=saved,
                rng=rng,
                step=int(data["step"]),
                momentum=_vector(data["momentum"], "momentum"),
                centroids=_vector(data["centroids"], "centroids"),
                coverage=[str(i) for i in data["coverage"]],
                boundary=[str(i) for i in data["boundary"]],
                seen={t.id: t for t in seen},
                since_trigger=[str(i) for i in data["since_trigger"]],
                last_trigger_step=data["last_trigger_step"],
                counters=Counters(**data["counters"]),
                window=[
                    (None if w[0] is None else float(w[0]), bool(w[1]))
                    for w in data.get("window", [])
                ],
                norms=[float(n) for n in data.get("norms", [])],
                examples=[[float(v) for v in e] for e in data.get("examples", [])],
                weights=(
                    None if data.get("weights") is None else [float(v) for v in data["weights"]]
                ),
            )
        except JanusStateError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise JanusStateError(f"malformed Janus state: {exc!r}") from None
        missing = [
            i
            for i in (*state.coverage, *state.boundary, *state.since_trigger)
            if i not in state.seen
        ]
        if missing:
            raise JanusStateError(f"saved state names unknown tasks: {missing[:3]}")
        width = len(SIGNALS) + 1
        if (state.weights is not None and len(state.weights) != width) or any(
            len(e) != width for e in state.examples
        ):
            raise JanusStateError(f"saved calibration does not hold {width} numbers per row")
        return state


def write_state_file(path: str | Path, data: dict[str, Any]) -> None:
    """Save a controller state as JSON, atomically (write aside, then rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    os.replace(tmp, target)


def read_state_file(path: str | Path) -> dict[str, Any]:
    """A state saved by `write_state_file`."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise JanusStateError(f"cannot read Janus state {path}: {exc}") from None
    if not isinstance(data, dict):
        raise JanusStateError(f"{path} does not hold a Janus state")
    return data
