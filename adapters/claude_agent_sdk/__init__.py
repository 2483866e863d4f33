"""planfence for the Claude Agent SDK: hooks that show the model the public records with every
prompt, stamp plans from what it was shown and gate every tool call.

    fence = PlanfenceClaudeHooks(store, policy, keys=["trip/42/requirements"], agent="booker")
    options = ClaudeAgentOptions(
        mcp_servers={"trip": fence.server("trip", [book_flight])},
        hooks=fence.hooks,
    )

Needs the `claude-agent-sdk` extra; names are imported on first use. A scripted Claude Code CLI
for tests, `ScriptedCLI`, is in `planfence.adapters.claude_agent_sdk.testing`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.adapters._lazy import lazy_exports

if TYPE_CHECKING:
    from .hooks import PlanfenceClaudeHooks

_EXPORTS = {"PlanfenceClaudeHooks": "hooks"}

__all__ = ["PlanfenceClaudeHooks"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
