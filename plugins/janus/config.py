"""Controller settings. The defaults are planfence's (a budgeted, self-calibrating trigger,
evaluations aimed at the edit, a tie keeps the current memory); `JanusConfig.paper()` gives the
reference settings of the Janus authors."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, get_args

from .errors import JanusConfigError

TriggerKind = Literal["budget", "momentum", "always", "random", "periodic", "never"]
TRIGGER_KINDS: tuple[str, ...] = get_args(TriggerKind)
MomentumSource = Literal["deployed", "all"]
MOMENTUM_SOURCES: tuple[str, ...] = get_args(MomentumSource)
TieRule = Literal["keep", "deploy", "score"]
TIE_RULES: tuple[str, ...] = get_args(TieRule)

PAPER: dict[str, Any] = {"trigger": "momentum", "on_tie": "deploy", "aim_size": 0}
"""What `JanusConfig.paper()` changes: the authors' trigger, their tie rule, no aimed tasks."""


@dataclass(frozen=True)
class JanusConfig:
    """How Janus decides between the current memory and a candidate.

    Attributes:
        support_size: K, warm-up length and coverage + boundary size (20).
        coverage_size: K', k-means clusters giving the coverage set (12); the boundary set
            holds the other K - K' tasks.
        fresh_size: L, tasks sampled from those met since the last comparison (5).
        tau: the momentum trigger compares when cos(z_t, m_{t-1}) < tau (0.0).
        beta: momentum decay (0.9).
        trigger: "budget" (default): each candidate gets a harm probability from cheap
            signals, calibrated online from the controller's own comparisons, and the budget
            is spent on the highest. "momentum": the paper's trigger (compare when the change
            turns against the momentum). Ablations: "always", "random", "periodic", "never"
            (never compares: the plain updater).
        budget: for "budget", the share of post-warm-up steps that may be compared, over any
            `budget_window` consecutive steps (0.3).
        budget_window: the sliding window the budget is counted over (50 steps).
        floor: for "budget", a candidate whose harm probability is at least this is compared
            even when the budget is spent (0.8); 1.0 never overrides the budget.
        calibrate: learn the harm probability (which "budget" and `on_tie="score"` read)
            from the comparisons' outcomes (False keeps the prior weights).
        max_examples: comparisons kept as calibration examples (the latest; 256).
        on_tie: when old and new memory score the same: "keep" (default: the current memory
            stays, so nothing is deployed without evidence from the evaluation), "score"
            (keep the current memory when the candidate's calibrated harm probability is at
            least one half, deploy it otherwise: the cheap signals decide) or "deploy" (the
            authors' rule).
        aim_size: tasks aimed at the edit added to each evaluation: seen tasks whose most
            similar memory lines (by the encoder) include a line the edit added or removed
            (8; 0 turns it off).
        aim_lines: how many of a task's most similar memory lines count as its relevant ones.
        momentum_source: which changes feed the momentum. "deployed" (default): only the
            change actually made to the memory, so a rejected candidate decays the momentum
            (its z counts as zero). "all": every candidate's z, rejected ones included, as the
            authors' code does (kept for reproduction). A rejected rewrite moves the embedding
            far; under "all" its direction then dominates the momentum and a second similar
            rewrite soon after looks aligned and is deployed unchecked.
        random_rate: trigger probability per post-warm-up step for "random" (each step's
            draw comes from its own generator seeded by (seed, step)).
        period: for "periodic", compare on post-warm-up steps 0, period, 2 * period, ...
        use_coverage, use_boundary, use_fresh: evaluation-set ablations.
        seed: seeds every random choice (fresh sampling, k-means++, boundary sampling).
        kmeans_iters: Lloyd iterations at most per clustering.
        eps: norms below this count as zero (cosine 0).
        max_seen_tasks: keep at most this many seen tasks for coverage (oldest dropped first);
            None keeps all, as the paper does.
    """

    support_size: int = 20
    coverage_size: int = 12
    fresh_size: int = 5
    tau: float = 0.0
    beta: float = 0.9
    trigger: TriggerKind = "budget"
    budget: float = 0.3
    budget_window: int = 50
    floor: float = 0.8
    calibrate: bool = True
    max_examples: int = 256
    on_tie: TieRule = "keep"
    aim_size: int = 8
    aim_lines: int = 2
    momentum_source: MomentumSource = "deployed"
    random_rate: float = 0.2
    period: int = 5
    use_coverage: bool = True
    use_boundary: bool = True
    use_fresh: bool = True
    seed: int = 0
    kmeans_iters: int = 50
    eps: float = 1e-9
    max_seen_tasks: int | None = None

    @classmethod
    def paper(cls, **changes: Any) -> JanusConfig:
        """The Janus authors' method: momentum trigger, ties deploy, no aimed tasks."""
        return cls(**{**PAPER, **changes})

    def __post_init__(self) -> None:
        if self.support_size < 1:
            raise JanusConfigError(f"support_size must be >= 1, got {self.support_size}")
        if not 1 <= self.coverage_size <= self.support_size:
            raise JanusConfigError(
                f"coverage_size must be in 1..support_size ({self.support_size}), "
                f"got {self.coverage_size}"
            )
        if self.fresh_size < 0:
            raise JanusConfigError(f"fresh_size must be >= 0, got {self.fresh_size}")
        if not 0.0 <= self.beta < 1.0:
            raise JanusConfigError(f"beta must be in [0, 1), got {self.beta}")
        if not -1.0 <= self.tau <= 1.0:
            raise JanusConfigError(f"tau must be in [-1, 1], got {self.tau}")
        for name, value, known in (
            ("trigger", self.trigger, TRIGGER_KINDS),
            ("momentum_source", self.momentum_source, MOMENTUM_SOURCES),
            ("on_tie", self.on_tie, TIE_RULES),
        ):
            if value not in known:
                raise JanusConfigError(f"unknown {name} {value!r}: use one of {', '.join(known)}")
        if not 0.0 < self.budget <= 1.0:
            raise JanusConfigError(f"budget must be in (0, 1], got {self.budget}")
        if self.budget_window < 1:
            raise JanusConfigError(f"budget_window must be >= 1, got {self.budget_window}")
        if not 0.0 < self.floor <= 1.0:
            raise JanusConfigError(f"floor must be in (0, 1], got {self.floor}")
        if self.max_examples < 1:
            raise JanusConfigError(f"max_examples must be >= 1, got {self.max_examples}")
        if self.aim_size < 0:
            raise JanusConfigError(f"aim_size must be >= 0, got {self.aim_size}")
        if self.aim_lines < 1:
            raise JanusConfigError(f"aim_lines must be >= 1, got {self.aim_lines}")
        if not 0.0 <= self.random_rate <= 1.0:
            raise JanusConfigError(f"random_rate must be in [0, 1], got {self.random_rate}")
        if self.period < 1:
            raise JanusConfigError(f"period must be >= 1, got {self.period}")
        if self.kmeans_iters < 1:
            raise JanusConfigError(f"kmeans_iters must be >= 1, got {self.kmeans_iters}")
        if self.max_seen_tasks is not None and self.max_seen_tasks < self.support_size:
            raise JanusConfigError(
                f"max_seen_tasks must be >= support_size ({self.support_size}), "
                f"got {self.max_seen_tasks}"
            )

    @property
    def boundary_size(self) -> int:
        return self.support_size - self.coverage_size

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JanusConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise JanusConfigError(f"unknown Janus settings: {', '.join(unknown)}")
        return cls(**data)
