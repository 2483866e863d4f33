"""planfence for LlamaIndex agents: a memory block that shows the public records in the system
message, and tools that run behind the gate.

    fence = PlanfenceMemoryBlock(store, policy, keys=["trip/42/requirements"], agent="booker")
    agent = FunctionAgent(tools=fence.tools([book_flight]), llm=llm)
    await agent.run("Book the flight.", memory=Memory.from_defaults(memory_blocks=[fence]))

Needs the `llamaindex` extra; names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.adapters._lazy import lazy_exports

if TYPE_CHECKING:
    from .memory_block import PlanfenceMemoryBlock

_EXPORTS = {"PlanfenceMemoryBlock": "memory_block"}

__all__ = ["PlanfenceMemoryBlock"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
