"""Semantic Kernel harness: a `Kernel` with the world's tools as a plugin and `PlanfenceFilter`
installed, and a custom chat completion service whose every request asks the script, run with
`FunctionChoiceBehavior.Auto()` on a chat history the filter showed the records in."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar

from planfence.plugins.gate.checkers import CheckerFactory
from planfence.shared_memory.extras import extra_imports

from ..conformance.harness import Run, controlled
from ..conformance.world import AGENT, KEY, TASK, Script, World

with extra_imports("semantic-kernel", "the Semantic Kernel conformance harness"):
    from semantic_kernel import Kernel
    from semantic_kernel.connectors.ai import FunctionChoiceBehavior, PromptExecutionSettings
    from semantic_kernel.connectors.ai.chat_completion_client_base import (
        ChatCompletionClientBase,
    )
    from semantic_kernel.contents import (
        AuthorRole,
        ChatHistory,
        ChatMessageContent,
        FunctionCallContent,
        FunctionResultContent,
    )
    from semantic_kernel.functions import kernel_function

    from planfence.adapters.semantic_kernel import PlanfenceFilter

PLUGIN = "trip"


class ScriptedChat(ChatCompletionClientBase):  # type: ignore[misc]
    """A chat completion service that asks the script on every request: a function call, or
    the final answer."""

    SUPPORTS_FUNCTION_CALLING: ClassVar[bool] = True
    script: Any = None
    told: Any = None  # the harness's list (not copied, as a validated list would be)

    async def _inner_get_chat_message_contents(
        self, chat_history: ChatHistory, settings: PromptExecutionSettings
    ) -> list[ChatMessageContent]:
        messages = chat_history.messages
        shown = [m.content for m in messages if m.role in (AuthorRole.SYSTEM, AuthorRole.USER)]
        last = messages[-1] if messages else None
        results = [i for i in (last.items if last is not None else []) if _is_result(i)]
        result = str(results[-1].result) if results else None
        if result is not None:
            self.told.append(result)
        step = await self.script.next(shown, result)
        if step is None:
            return [ChatMessageContent(role=AuthorRole.ASSISTANT, content=Script.FINAL)]
        call = FunctionCallContent(
            id=f"call-{self.script.calls}",
            name=f"{PLUGIN}-{step.tool}",
            arguments=json.dumps(step.args),
        )
        return [ChatMessageContent(role=AuthorRole.ASSISTANT, items=[call])]


def _is_result(item: Any) -> bool:
    return isinstance(item, FunctionResultContent)


def _function(name: str, fn: Callable[[str], Awaitable[str]]) -> Any:
    async def tool(destination: str) -> str:
        return await fn(destination)

    return kernel_function(tool, name=name, description=fn.__doc__)


class SemanticKernelHarness:
    name: ClassVar[str] = "semantic_kernel"
    extra: ClassVar[str] = "semantic-kernel"
    modules: ClassVar[Sequence[str]] = ("semantic_kernel",)
    tool_span: ClassVar[str | None] = "execute_tool"
    # The kernel's tool span encloses the function only; the filter runs before it opens.
    tool_span_wraps_gate: ClassVar[bool] = False

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
        fence = PlanfenceFilter(world.store, world.policy, keys=[KEY] if plans else [], agent=AGENT)
        controlled(fence.gate, checker)
        kernel = fence.install(Kernel())
        kernel.add_functions(PLUGIN, [_function(n, fn) for n, fn in world.tools().items()])
        told: list[str] = []
        service = ScriptedChat(ai_model_id="scripted", script=script, told=told)
        behavior = FunctionChoiceBehavior.Auto(maximum_auto_invoke_attempts=script.max_calls + 2)
        settings = PromptExecutionSettings(function_choice_behavior=behavior)
        try:
            for n in range(runs):
                if n:
                    script.new_run()
                history = ChatHistory()
                if plans:
                    await fence.show(history)
                history.add_user_message(TASK)
                await service.get_chat_message_content(history, settings, kernel=kernel)
        finally:
            if close:
                await fence.aclose()
        return Run(told)
