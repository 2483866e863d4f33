"""The budgeted trigger: spend a share of the steps on the candidates most likely to harm. Pure.

The user states what they can afford (`budget`: a share of the post-warm-up steps, over any
`budget_window` consecutive steps). Online the future candidates are unknown, so the trigger
compares a candidate when its harm probability ranks within the share of changed candidates
the budget can pay for, judged against the scores of the changed candidates in the window,
and never when the window's budget is spent. A candidate scoring at least `floor` is compared
whatever the budget (its comparison still counts in the window). An unchanged candidate is
never compared: there is nothing to judge.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .config import JanusConfig
from .trigger import TriggerInfo

Slot = tuple[float | None, bool]
"""One post-warm-up step in the window: the candidate's score (None when unchanged) and
whether it was compared."""


def _quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile of `values` (linear interpolation between order statistics)."""
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def decide_budget(
    config: JanusConfig,
    score: float | None,
    window: Sequence[Slot],
    cosine: float | None = None,
    signals: dict[str, float] | None = None,
) -> TriggerInfo:
    """Decide one post-warm-up step from its score and the window of steps before it.

    Args:
        score: the candidate's harm probability; None for an unchanged candidate.
        window: the previous post-warm-up steps, oldest first (only the last
            `budget_window - 1` are read).
        cosine, signals: carried into the `TriggerInfo` for the decision log.
    """
    kind = "budget"

    def info(fired: bool, reason: str) -> TriggerInfo:
        return TriggerInfo(fired, kind, reason, cosine, score, signals)

    if score is None:
        return info(False, "unchanged candidate: nothing to compare")
    recent = list(window)[-(config.budget_window - 1) :] if config.budget_window > 1 else []
    spent = sum(compared for _, compared in recent)
    allowance = config.budget * config.budget_window
    if score >= config.floor:
        return info(True, f"harm probability {score:.3f} >= floor {config.floor}")
    if spent + 1 > allowance:
        return info(
            False,
            f"harm probability {score:.3f}; budget spent ({spent} of {allowance:g} comparisons "
            f"in the last {config.budget_window} steps)",
        )
    scores = [s for s, _ in recent if s is not None]
    changed = len(scores) + 1
    expected = changed / (len(recent) + 1) * config.budget_window
    share = allowance / expected
    if share >= 1.0 or not scores:
        return info(True, f"harm probability {score:.3f}; the budget covers every candidate")
    threshold = _quantile([*scores, score], 1.0 - share)
    fired = score >= threshold
    relation = ">=" if fired else "<"
    return info(
        fired,
        f"harm probability {score:.3f} {relation} {threshold:.3f}, the top {share:.0%} of "
        f"recent candidates the budget pays for",
    )
