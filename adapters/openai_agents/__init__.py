"""planfence for the OpenAI Agents SDK: the records in the agent's instructions, the gate as a
`tool_input_guardrail` on every fenced `function_tool`.

    fence = PlanfenceGuardrail(store, policy, keys=["trip/42/requirements"], agent="booker")
    agent = Agent(name="booker", instructions=fence.instructions(), tools=[fence.tool(book)])

Needs the `openai-agents` extra; names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.adapters._lazy import lazy_exports

if TYPE_CHECKING:
    from .fence import PlanfenceGuardrail

_EXPORTS = {"PlanfenceGuardrail": "fence"}

__all__ = ["PlanfenceGuardrail"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
