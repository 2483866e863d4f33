"""planfence for Strands Agents: a hook provider that shows the public records before every model
call, stamps plans from what was shown and gates every tool call.

    fence = PlanfenceHookProvider(store, policy, keys=["trip/42/requirements"], agent="booker")
    agent = Agent(model=model, tools=[book_flight], hooks=[fence])

Needs the `strands` extra (a venv of its own: strands-agents pins mcp<2.2); names are imported on
first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.adapters._lazy import lazy_exports

if TYPE_CHECKING:
    from .hooks import PlanfenceHookProvider

_EXPORTS = {"PlanfenceHookProvider": "hooks"}

__all__ = ["PlanfenceHookProvider"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
