"""Claude Agent SDK harness: `query()` with the fence's hooks and SDK MCP server, over a
`ScriptedCLI` whose model asks the script what to do on every turn. Each run is a query of its
own (a new CLI session, as `query()` starts one), with the same options and fence."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from planfence.plugins.gate.checkers import CheckerFactory
from planfence.shared_memory.extras import extra_imports

from ..conformance.harness import Run, controlled
from ..conformance.world import AGENT, KEY, TASK, Script, World

with extra_imports("claude-agent-sdk", "the Claude Agent SDK conformance harness"):
    from claude_agent_sdk import ClaudeAgentOptions, SdkMcpTool, query, tool

    from planfence.adapters.claude_agent_sdk import PlanfenceClaudeHooks
    from planfence.adapters.claude_agent_sdk.testing import Reply, ScriptedCLI, Turn

SERVER = "trip"


def _tool(name: str, fn: Any) -> SdkMcpTool[Any]:
    async def handler(args: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": await fn(args["destination"])}]}

    return tool(name, fn.__doc__ or name, {"destination": str})(handler)


def model(script: Script, told: list[str]) -> Any:
    async def answer(turn: Turn) -> Reply:
        if turn.last_result is not None:
            told.append(turn.last_result)
        step = await script.next(turn.shown, turn.last_result)
        if step is None:
            return Script.FINAL
        return (f"mcp__{SERVER}__{step.tool}", step.args)

    return answer


class ClaudeAgentSDKHarness:
    name: ClassVar[str] = "claude_agent_sdk"
    extra: ClassVar[str] = "claude-agent-sdk"
    modules: ClassVar[Sequence[str]] = ("claude_agent_sdk",)
    tool_span: ClassVar[str | None] = None  # the SDK opens no span of its own around a tool

    async def run(
        self,
        world: World,
        script: Script,
        *,
        checker: CheckerFactory | None,
        plans: bool,
        runs: int = 1,
        close: bool = True,
    ) -> Run:
        fence = PlanfenceClaudeHooks(
            world.store, world.policy, keys=[KEY] if plans else [], agent=AGENT
        )
        controlled(fence.gate, checker)
        tools = [_tool(name, fn) for name, fn in world.tools().items()]
        options = ClaudeAgentOptions(
            mcp_servers={SERVER: fence.server(SERVER, tools)}, hooks=fence.hooks
        )
        told: list[str] = []
        try:
            for n in range(runs):
                if n:
                    script.new_run()
                cli = ScriptedCLI(model(script, told), options)
                async for _ in query(prompt=TASK, options=options, transport=cli):
                    pass
        finally:
            if close:
                await fence.aclose()
        return Run(told)
