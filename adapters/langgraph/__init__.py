"""planfence for LangGraph 1.x and LangChain v1 agents.

    fence = PlanfenceAgentMiddleware(store, policy, keys=[...])
    agent = create_agent(model, tools, middleware=[fence])

For hand-written graphs: `PlanfenceToolNode` (a gated `ToolNode` that routes refusals to the
planner, and plan stamping for the planner node), `PlanfenceState` for the graph state, and
`PlanfenceStore`, LangGraph's store API over the shared memory with reads tracked per run
(`track_reads()` opens a scope of one's own). `JanusStore` wraps the LangGraph store a team
keeps its memories in (InMemoryStore, PostgresStore, ...) with a Janus controller on writes.

Needs the `langgraph` extra; names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.adapters._lazy import lazy_exports

if TYPE_CHECKING:
    from .graph import PlanfenceToolNode
    from .janus_store import JanusStore
    from .middleware import PlanfenceAgentMiddleware
    from .state import PlanfenceState
    from .store import ImmutableRecordError, PlanfenceStore, track_reads

_EXPORTS = {
    "PlanfenceToolNode": "graph",
    "ImmutableRecordError": "store",
    "JanusStore": "janus_store",
    "PlanfenceAgentMiddleware": "middleware",
    "PlanfenceState": "state",
    "PlanfenceStore": "store",
    "track_reads": "store",
}

__all__ = [
    "ImmutableRecordError",
    "JanusStore",
    "PlanfenceAgentMiddleware",
    "PlanfenceState",
    "PlanfenceStore",
    "PlanfenceToolNode",
    "track_reads",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
