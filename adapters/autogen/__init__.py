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
    from .agents import FencedAgent, PlanningAgent, plan_of, refused_plan
    from .memory import SharedMemory, SharedMemoryConfig
    from .routing import (
        PlanfenceTermination,
        RunOutcome,
        add_replan_route,
        is_blocked,
        is_replan,
        proceeds,
        replan_selector,
        run_outcome,
    )
    from .workbench import PlanfenceWorkbench, PlanfenceWorkbenchConfig

_EXPORTS = {
    "SharedMemory": "memory",
    "SharedMemoryConfig": "memory",
    "PlanfenceWorkbench": "workbench",
    "PlanfenceWorkbenchConfig": "workbench",
    "PlanningAgent": "agents",
    "FencedAgent": "agents",
    "plan_of": "agents",
    "refused_plan": "agents",
    "PlanfenceTermination": "routing",
    "RunOutcome": "routing",
    "add_replan_route": "routing",
    "is_blocked": "routing",
    "is_replan": "routing",
    "proceeds": "routing",
    "replan_selector": "routing",
    "run_outcome": "routing",
}

__all__ = [
    "FencedAgent",
    "PlanfenceTermination",
    "PlanfenceWorkbench",
    "PlanfenceWorkbenchConfig",
    "PlanningAgent",
    "RunOutcome",
    "SharedMemory",
    "SharedMemoryConfig",
    "add_replan_route",
    "is_blocked",
    "is_replan",
    "plan_of",
    "proceeds",
    "refused_plan",
    "replan_selector",
    "run_outcome",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
