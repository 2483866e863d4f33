"""planfence for Agno: a tool hook that gates every tool call, and instructions that show the
public records the plans are stamped from.

    fence = PlanfenceToolHook(store, policy, keys=["trip/42/requirements"], agent="booker")
    agent = Agent(model=model, tools=[book_flight], tool_hooks=[fence],
                  instructions=fence.instructions("You book flights."))

Needs the `agno` extra; names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.adapters._lazy import lazy_exports

if TYPE_CHECKING:
    from .hook import PlanfenceToolHook

_EXPORTS = {"PlanfenceToolHook": "hook"}

__all__ = ["PlanfenceToolHook"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
