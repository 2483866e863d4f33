"""planfence for AutoGen AgentChat (0.7): plans stamped with their exact public-record parents,
and a gate in front of every tool call.

    memory = SharedMemory(store, keys=["trip/42/requirements"])
    planner = PlanningAgent("planner", client, memory=[memory])
    tools = FencedWorkbench(StaticWorkbench([book_flight]), store=store, policy=policy)
    executor = FencedAgent("executor", client, workbench=tools)
    team = RoundRobinGroupChat([planner, executor], termination_condition=PlanfenceTermination())

Needs the `autogen` extra; names are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
    from .workbench import FencedWorkbench, FencedWorkbenchConfig

_EXPORTS = {
    "SharedMemory": "memory",
    "SharedMemoryConfig": "memory",
    "FencedWorkbench": "workbench",
    "FencedWorkbenchConfig": "workbench",
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
    "FencedWorkbench",
    "FencedWorkbenchConfig",
    "PlanfenceTermination",
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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # Each module raises MissingExtraError (with the pip hint) when the extra is missing.
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
