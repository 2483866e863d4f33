"""planfence for Haystack agents: a hook that shows the public records before every model call
and stamps plans from them, and tools that run behind the gate.

    fence = PlanfenceHook(store, policy, keys=["trip/42/requirements"], agent="booker")
    agent = Agent(chat_generator=llm, tools=fence.tools([book_flight]), hooks=fence.hooks())

Needs the `haystack` extra; names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.adapters._lazy import lazy_exports

if TYPE_CHECKING:
    from .hook import PlanfenceHook

_EXPORTS = {"PlanfenceHook": "hook"}

__all__ = ["PlanfenceHook"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
