"""One step's judgements as one outcome, and the one-replan budget across steps.

A step of an agent may make several tool calls at once. `fold_step` folds what the gate said
about each (their `AllowPayload`s and `RefusalPayload`s, or those payloads' wire forms, as graph
state keeps them) into one `StepOutcome`: blocked beats replan beats done. A refusal after the
replans an action may spend blocks, whatever the checker said: the second refusal ends the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .verdicts import BLOCK, CURRENT, REPLAN
from .wire import AllowPayload, RefusalPayload, parse_payload

StepStatus = Literal["done", "replan", "blocked"]
DONE: Literal["done"] = "done"
REPLANNING: Literal["replan"] = "replan"
BLOCKED: Literal["blocked"] = "blocked"
REPLANS_PER_ACTION = 1


class StepOutcome(BaseModel):
    """What one step came to. `gated`: a gated call was allowed because its plan was current
    (only that ends an action, and its replan budget; ungated calls leave the budget where it
    was). `tool`, `reason` and `plan` are those of the judgement that decided the status;
    `stale` its changed keys and `current` the heads it showed for them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: StepStatus
    gated: bool
    tool: str
    reason: str
    plan: str | None = None
    stale: tuple[str, ...] = ()
    current: dict[str, str | None] = {}

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def fold_step(
    judged: Iterable[AllowPayload | RefusalPayload | Mapping[str, Any]], replans_spent: int = 0
) -> StepOutcome | None:
    """One step's judgements as one outcome (None when the step made no call)."""
    seen = [parse_payload(p) for p in judged]
    if not seen:
        return None
    gated = any(isinstance(p, AllowPayload) and p.reason == CURRENT for p in seen)
    refusals = [p for p in seen if isinstance(p, RefusalPayload)]
    hit: AllowPayload | RefusalPayload
    status: StepStatus
    if not refusals:
        hit, status = seen[0], DONE
    else:
        hit = next((p for p in refusals if p.verdict == BLOCK), refusals[0])
        spent = replans_spent >= REPLANS_PER_ACTION
        status = REPLANNING if hit.verdict == REPLAN and not spent else BLOCKED
    stale = hit.stale_keys if isinstance(hit, RefusalPayload) else ()
    current = hit.current if isinstance(hit, RefusalPayload) else {}
    return StepOutcome(
        status=status,
        gated=gated,
        tool=hit.tool,
        reason=hit.reason,
        plan=hit.plan,
        stale=stale,
        current=current,
    )


def action_done(outcome: object) -> bool:
    """The step before ran its calls and one of them was gated and allowed as current: the
    action is over, and the next plan starts with a fresh replan budget."""
    if isinstance(outcome, Mapping):
        return outcome.get("status") == DONE and bool(outcome.get("gated"))
    return isinstance(outcome, StepOutcome) and outcome.status == DONE and outcome.gated


__all__ = [
    "BLOCKED",
    "DONE",
    "REPLANNING",
    "REPLANS_PER_ACTION",
    "StepOutcome",
    "StepStatus",
    "action_done",
    "fold_step",
]
