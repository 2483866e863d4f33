"""planfence for PydanticAI: a capability that shows the public records, stamps plans from
them and gates every tool call.

    fence = PlanfenceCapability(store, policy, keys=["trip/42/requirements"], agent="booker")
    agent = Agent(model, tools=[book_flight], capabilities=[fence])

Needs the `pydantic-ai` extra; names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.adapters._lazy import lazy_exports

if TYPE_CHECKING:
    from .capability import PlanfenceCapability

_EXPORTS = {"PlanfenceCapability": "capability"}

__all__ = ["PlanfenceCapability"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
