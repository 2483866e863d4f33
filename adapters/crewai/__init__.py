"""planfence for CrewAI: its interception hooks show the agent the public records, stamp plans
from what it was shown and gate every tool call.

    fence = PlanfenceHooks(store, policy, keys=["trip/42/requirements"], agent="booker")
    with fence:  # for the CrewAI agents whose role is "booker"
        Crew(agents=[booker], tasks=[task]).kickoff()

Needs the `crewai` extra (a venv of its own: CrewAI pins mcp<2 and pydantic<2.13); names are
imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.adapters._lazy import lazy_exports

if TYPE_CHECKING:
    from .hooks import PlanfenceHooks

_EXPORTS = {"PlanfenceHooks": "hooks"}

__all__ = ["PlanfenceHooks"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
