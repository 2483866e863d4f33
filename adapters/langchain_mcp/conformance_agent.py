"""The agent of the `langchain_mcp.proxy` harness, in a process of its own (the environment with
`langchain-mcp-adapters`, whose MCP SDK is 1.x): `create_agent` with no planfence middleware,
its tools loaded from the proxy with `load_mcp_tools` over one streamable-HTTP session.

    python -m planfence.adapters.langchain_mcp.conformance_agent URL RUNS READS

Its model is the harness's script, asked over stdin/stdout (one JSON object a line): the agent
writes `{"ask": {"shown": [...], "last": ...}}` and reads `{"call": {"tool", "args"} | null}`,
writes `{"new_run": true}` before each run after the first, and `{"told": [...]}` at the end.
With READS = 1, before every decision the model first calls `planfence_read` for the record and
plans from what it returned, as a model in a desktop client does.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools

from ..conformance.world import KEY, TASK, Script

READ = "planfence_read"


def _ask(message: dict[str, Any]) -> Any:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()
    return json.loads(sys.stdin.readline())


class RelayModel(BaseChatModel):
    """A chat model whose every answer comes from the harness's script."""

    reads: bool
    last: str | None = None  # the latest result of a tool of the upstream's

    @property
    def _llm_type(self) -> str:
        return "planfence-relay"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> RelayModel:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        raise NotImplementedError("the agent runs asynchronously")

    async def _agenerate(
        self, messages: list[BaseMessage], *args: Any, **kwargs: Any
    ) -> ChatResult:
        latest = messages[-1]
        read = isinstance(latest, ToolMessage) and latest.name == READ
        if not read:
            self.last = latest.text if isinstance(latest, ToolMessage) else None
            if self.reads:  # read the record first, then decide
                return _reply([{"name": READ, "args": {"key": KEY}, "id": f"read-{len(messages)}"}])
        shown = [m.text for m in messages if not isinstance(m, AIMessage | ToolMessage)]
        if read:
            shown.append(latest.text)
        step = _ask({"ask": {"shown": shown, "last": self.last}})["call"]
        if step is None:
            return ChatResult(generations=[ChatGeneration(message=AIMessage(Script.FINAL))])
        return _reply([{"name": step["tool"], "args": step["args"], "id": f"call-{len(messages)}"}])


def _reply(calls: list[dict[str, Any]]) -> ChatResult:
    message = AIMessage(content="", tool_calls=calls)
    return ChatResult(generations=[ChatGeneration(message=message)])


async def main(url: str, runs: int, reads: bool) -> None:
    client = MultiServerMCPClient({"trips": {"transport": "streamable_http", "url": url}})
    told: list[str] = []
    # One session for the whole conversation: the proxy stamps plans from what a session read.
    async with client.session("trips") as session:
        tools = await load_mcp_tools(session)
        agent = create_agent(RelayModel(reads=reads), tools)
        for n in range(runs):
            if n:
                _ask({"new_run": True})
            state = await agent.ainvoke({"messages": [{"role": "user", "content": TASK}]})
            told += [
                m.text for m in state["messages"] if isinstance(m, ToolMessage) and m.name != READ
            ]
    sys.stdout.write(json.dumps({"told": told}) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"))
