"""planfence for agents that talk A2A (`a2a-sdk` 1.x): the plan travels with the message, and the
receiving agent checks it against the shared store before it acts.

    # receiver
    executor = PlanfenceAgentExecutor(MyAgentExecutor(), store, policy, agent="airline")
    # sender
    client = ClientFactory(config).create(card, [PlanfenceInterceptor(stamper, policy)])

Needs the `a2a` extra; names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.adapters._lazy import lazy_exports

if TYPE_CHECKING:
    from .fence import (
        PLAN,
        SKILL,
        PlanfenceAgentExecutor,
        PlanfenceInterceptor,
        SenderPlans,
        skill_call,
        skill_message,
    )

_EXPORTS = {
    "PlanfenceAgentExecutor": "fence",
    "PLAN": "fence",
    "PlanfenceInterceptor": "fence",
    "SKILL": "fence",
    "SenderPlans": "fence",
    "skill_call": "fence",
    "skill_message": "fence",
}

__all__ = [
    "PLAN",
    "SKILL",
    "PlanfenceAgentExecutor",
    "PlanfenceInterceptor",
    "SenderPlans",
    "skill_call",
    "skill_message",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
