"""planfence for Google ADK: a runner plugin that shows the public records, stamps plans from
them and gates every tool of every agent.

    runner = InMemoryRunner(agent, plugins=[PlanfencePlugin(store, policy, keys=[...])])

Needs the `adk` extra; names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.adapters._lazy import lazy_exports

if TYPE_CHECKING:
    from .plugin import PlanfencePlugin

_EXPORTS = {"PlanfencePlugin": "plugin"}

__all__ = ["PlanfencePlugin"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
