"""planfence for DSPy: a `dspy.ReAct` that shows the public records as an input of its signature,
stamps plans from them and gates every tool call.

    react = PlanfenceReAct(store, policy, "task -> answer", tools=[book_flight],
                           keys=["trip/42/requirements"], agent="booker")
    react(task="Book the flight for trip 42.")

Needs the `dspy` extra; names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.adapters._lazy import lazy_exports

if TYPE_CHECKING:
    from .react import PlanfenceReAct

_EXPORTS = {"PlanfenceReAct": "react"}

__all__ = ["PlanfenceReAct"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
