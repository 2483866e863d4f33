"""planfence for AutoGen AgentChat (0.7): plans stamped with their exact public-record parents,
and a gate in front of every tool call.

    memory = SharedMemory(store, keys=["trip/42/requirements"])
    planner = PlanningAgent("planner", client, memory=[memory])
    tools = PlanfenceWorkbench(StaticWorkbench([book_flight]), store=store, policy=policy)
    executor = FencedAgent("executor", client, workbench=tools)
    team = RoundRobinGroupChat([planner, executor], termination_condition=PlanfenceTermination())

Needs the `autogen` extra; names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.adapters._lazy import lazy_exports

if TYPE_CHECKING:
    from .agents import FencedAgent, PlanningAgent
    from .memory import SharedMemory
    from .routing import (
        PlanfenceTermination,
        add_replan_route,
        proceeds,
        replan_selector,
        run_outcome,
    )
    from .workbench import PlanfenceWorkbench

_EXPORTS = {
    "SharedMemory": "memory",
    "PlanfenceWorkbench": "workbench",
    "PlanningAgent": "agents",
    "FencedAgent": "agents",
    "PlanfenceTermination": "routing",
    "add_replan_route": "routing",
    "proceeds": "routing",
    "replan_selector": "routing",
    "run_outcome": "routing",
}

__all__ = [
    "FencedAgent",
    "PlanfenceTermination",
    "PlanfenceWorkbench",
    "PlanningAgent",
    "SharedMemory",
    "add_replan_route",
    "proceeds",
    "replan_selector",
    "run_outcome",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
