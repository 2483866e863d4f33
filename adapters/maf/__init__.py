"""planfence for the Microsoft Agent Framework (`agent-framework-core` 1.x), AutoGen's successor.

    fence = PlanfenceFunctionMiddleware(store, policy, keys=["trip/42/requirements"])
    agent = Agent(client=client, tools=[...], context_providers=[fence], middleware=[fence])

Needs the `maf` extra; names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.adapters._lazy import lazy_exports

if TYPE_CHECKING:
    from .fence import PlanfenceFunctionMiddleware

_EXPORTS = {"PlanfenceFunctionMiddleware": "fence"}

__all__ = ["PlanfenceFunctionMiddleware"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
