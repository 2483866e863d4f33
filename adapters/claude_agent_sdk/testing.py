"""A scripted Claude Code CLI for tests: a `Transport` that plays the CLI's side of the SDK's
stream-JSON protocol in-process, with a Python function as the model. No network, no `claude`.

    cli = ScriptedCLI(model, options)
    async for message in query(prompt="Book the flight.", options=options, transport=cli):
        ...

It answers the SDK's `initialize` (honouring each hook matcher's `on_failure`), connects the
SDK MCP servers in `options.mcp_servers` (`mcp_message` control requests: `initialize`,
`tools/list`), and for every prompt it runs the turn loop as the CLI does: the
`UserPromptSubmit` hooks (their additional context joins what the model is shown), then the
model; for each tool use it asks the matching `PreToolUse` hooks (`hook_callback`), and unless
one denies, calls the tool (`tools/call`, with the tool use's id in `_meta`) and runs the
`PostToolUse` (or `PostToolUseFailure`) hooks; a denied call's result is the deny reason, as
an error. `options.system_prompt` (a string) is the first thing the model is shown.

The model is `model(turn)` (sync or async) with a `Turn`; it answers with text (the final
answer), a tool use `(name, input)`, or a list of tool uses made in one answer. Tool names are
the CLI's: `mcp__<server>__<tool>` for an SDK MCP tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

from planfence.shared_memory.extras import extra_imports

with extra_imports("claude-agent-sdk", "planfence.adapters.claude_agent_sdk.testing"):
    from claude_agent_sdk import ClaudeAgentOptions, Transport

ToolUse = tuple[str, Mapping[str, Any]]
Reply = Union[str, ToolUse, Sequence[ToolUse]]  # noqa: UP007 (a runtime alias on 3.10)
HOOK_TIMEOUT = 60.0  # seconds, the CLI's default for a hook matcher without one
CLOSE_TIMEOUT = 5.0


@dataclass(frozen=True)
class Turn:
    """What the model has before it on one turn.

    `shown`: the system prompt, the prompts and the hooks' additional context, in order;
    `results`: the tool results of the conversation so far (a denied call's is its reason);
    `tools`: the tools it may call (the SDK MCP servers' tools, by their CLI names).
    """

    shown: tuple[str, ...]
    results: tuple[str, ...]
    tools: tuple[str, ...]

    @property
    def last_result(self) -> str | None:
        """The result of the latest tool call, if the model made one."""
        return self.results[-1] if self.results else None


class ScriptedCLI(Transport):
    """The Claude Code CLI's side of the SDK protocol, with `model` in place of Claude.

    Args:
        model: answers each turn (see the module docstring).
        options: the options the SDK was given (what the CLI would get as flags: the system
            prompt and the SDK MCP servers' names).
        max_turns: model turns per prompt before the run ends with `error_max_turns`.
    """

    def __init__(
        self,
        model: Callable[[Turn], Reply | Awaitable[Reply]],
        options: ClaudeAgentOptions | None = None,
        *,
        max_turns: int = 20,
    ) -> None:
        self.model, self.options, self.max_turns = model, options or ClaudeAgentOptions(), max_turns
        self.session_id = str(uuid.uuid4())
        self.shown: list[str] = []
        self.results: list[str] = []
        self.tools: dict[str, tuple[str, str]] = {}  # CLI name -> (server, tool)
        self._hooks: dict[str, list[dict[str, Any]]] = {}
        self._out: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._prompts: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._answers: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._initialized = asyncio.Event()
        self._driver: asyncio.Task[None] | None = None
        self._ids = 0
        self._ready = False
        self._failure: Exception | None = None

    # ---- Transport

    async def connect(self) -> None:
        if self._driver is None:
            self._driver = asyncio.get_running_loop().create_task(self._drive())
            self._ready = True

    async def write(self, data: str) -> None:
        for line in data.splitlines():
            if line.strip():
                self._received(json.loads(line))

    async def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        while (message := await self._out.get()) is not None:
            yield message
        if self._failure is not None:  # the model or a tool of the script raised
            raise self._failure

    async def end_input(self) -> None:
        self._prompts.put_nowait(None)

    def is_ready(self) -> bool:
        return self._ready

    async def close(self) -> None:
        self._ready = False
        driver, self._driver = self._driver, None
        if driver is not None and not driver.done():
            driver.cancel()
            with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError):
                await asyncio.wait_for(driver, CLOSE_TIMEOUT)
        self._out.put_nowait(None)

    # ---- the SDK's messages

    def _received(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "control_response":
            response = message.get("response", {})
            answer = self._answers.pop(str(response.get("request_id")), None)
            if answer is not None and not answer.done():
                answer.set_result(response)
        elif kind == "control_request":
            self._control(message["request_id"], message.get("request", {}))
        elif kind == "user":
            self._prompts.put_nowait(message)

    def _control(self, request_id: str, request: dict[str, Any]) -> None:
        """A request of the SDK's: `initialize` registers its hooks; others are acknowledged."""
        answer: dict[str, Any] = {}
        if request.get("subtype") == "initialize":
            self._hooks = {k: list(v) for k, v in (request.get("hooks") or {}).items()}
            answer = {"commands": [], "hook_on_failure_supported": True, "hooks_applied": True}
            self._initialized.set()
        self._send(
            {
                "type": "control_response",
                "response": {"subtype": "success", "request_id": request_id, "response": answer},
            }
        )

    def _send(self, message: dict[str, Any]) -> None:
        self._out.put_nowait(message)

    async def _ask(self, request: dict[str, Any], timeout: float = HOOK_TIMEOUT) -> dict[str, Any]:
        """A control request to the SDK; its response (`subtype` "success" or "error")."""
        self._ids += 1
        request_id = f"cli_{self._ids}"
        answer = asyncio.get_running_loop().create_future()
        self._answers[request_id] = answer
        self._send({"type": "control_request", "request_id": request_id, "request": request})
        try:
            return await asyncio.wait_for(answer, timeout)
        except asyncio.TimeoutError:
            return {"subtype": "error", "error": f"{request.get('subtype')} timed out"}
        finally:
            self._answers.pop(request_id, None)

    # ---- the CLI's loop

    async def _drive(self) -> None:
        try:
            await self._conversation()
        except Exception as exc:  # as a CLI that crashed: its output ends, the SDK raises
            self._failure = exc
        self._out.put_nowait(None)  # the CLI exits when its input ends

    async def _conversation(self) -> None:
        await self._initialized.wait()
        await self._connect_servers()
        system = self.options.system_prompt
        if isinstance(system, str) and system:
            self.shown.append(system)
        self._send(
            {
                "type": "system",
                "subtype": "init",
                "session_id": self.session_id,
                "tools": list(self.tools),
                "model": "scripted",
            }
        )
        while (message := await self._prompts.get()) is not None:
            await self._prompt(_text(message.get("message", {}).get("content", "")))

    async def _connect_servers(self) -> None:
        servers = self.options.mcp_servers
        names = (
            [n for n, c in servers.items() if c.get("type") == "sdk"]
            if isinstance(servers, dict)
            else []
        )
        for server in names:
            hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
            hello["clientInfo"] = {"name": "scripted-cli", "version": "0"}
            await self._mcp(server, "initialize", hello)
            await self._mcp(server, "notifications/initialized", None)
            listed = await self._mcp(server, "tools/list", {})
            for spec in listed.get("result", {}).get("tools", []):
                self.tools[f"mcp__{server}__{spec['name']}"] = (server, spec["name"])

    async def _mcp(self, server: str, method: str, params: Any) -> dict[str, Any]:
        self._ids += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if not method.startswith("notifications/"):
            message["id"] = self._ids
        request = {"subtype": "mcp_message", "server_name": server, "message": message}
        answer = await self._ask(request)
        response = answer.get("response") or {}
        found: dict[str, Any] = response.get("mcp_response") or {}
        if answer.get("subtype") == "error":
            found = {"error": {"message": str(answer.get("error"))}}
        return found

    async def _prompt(self, prompt: str) -> None:
        self.shown.append(prompt)
        for output in await self._run_hooks("UserPromptSubmit", {"prompt": prompt}):
            context = _specific(output).get("additionalContext")
            if isinstance(context, str) and context:
                self.shown.append(context)
        for turn in range(1, self.max_turns + 1):
            reply = self.model(Turn(tuple(self.shown), tuple(self.results), tuple(self.tools)))
            if inspect.isawaitable(reply):
                reply = await reply
            if isinstance(reply, str):
                self._assistant([{"type": "text", "text": reply}])
                self._result("success", turn, reply)
                return
            uses = [reply] if isinstance(reply, tuple) else list(reply)
            blocks = [
                {"type": "tool_use", "id": self._use_id(), "name": name, "input": dict(args)}
                for name, args in uses
            ]
            self._assistant(blocks)
            answers = [await self._use(b["id"], b["name"], b["input"]) for b in blocks]
            self._send(
                {
                    "type": "user",
                    "message": {"role": "user", "content": answers},
                    "parent_tool_use_id": None,
                    "session_id": self.session_id,
                }
            )
        self._result("error_max_turns", self.max_turns, None)

    def _use_id(self) -> str:
        self._ids += 1
        return f"toolu_{self._ids:04d}"

    async def _use(self, use_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """One tool use, as the CLI runs it: PreToolUse hooks, the tool, PostToolUse hooks."""
        fields = {"tool_name": name, "tool_input": args, "tool_use_id": use_id}
        denied: str | None = None
        for output in await self._run_hooks("PreToolUse", fields, name, use_id):
            specific = _specific(output)
            if specific.get("permissionDecision") == "deny" or output.get("decision") == "block":
                reason = specific.get("permissionDecisionReason") or output.get("reason")
                denied = denied or str(reason or f"Hook PreToolUse:{name} denied this tool")
            if isinstance(specific.get("updatedInput"), dict):
                args = dict(specific["updatedInput"])
        if denied is not None:
            return self._answer(use_id, denied, True)
        text, failed = await self._call(name, args, use_id)
        if failed:
            more = {"tool_name": name, "tool_input": args, "tool_use_id": use_id, "error": text}
            await self._run_hooks("PostToolUseFailure", more, name, use_id)
        else:
            more = {**fields, "tool_input": args, "tool_response": text}
            await self._run_hooks("PostToolUse", more, name, use_id)
        return self._answer(use_id, text, failed)

    def _answer(self, use_id: str, text: str, failed: bool) -> dict[str, Any]:
        self.results.append(text)
        return {"type": "tool_result", "tool_use_id": use_id, "content": text, "is_error": failed}

    async def _call(self, name: str, args: dict[str, Any], use_id: str) -> tuple[str, bool]:
        if name not in self.tools:
            return f"Error: No such tool available: {name}", True
        server, tool = self.tools[name]
        params = {"name": tool, "arguments": args, "_meta": {"claudecode/toolUseId": use_id}}
        response = await self._mcp(server, "tools/call", params)
        if "error" in response:
            return f"Error: {response['error'].get('message', 'MCP error')}", True
        result = response.get("result") or {}
        parts = [c.get("text", "") for c in result.get("content", []) if c.get("type") == "text"]
        return "\n".join(parts), bool(result.get("isError"))

    async def _run_hooks(
        self, event: str, fields: dict[str, Any], tool: str | None = None, use_id: str | None = None
    ) -> list[dict[str, Any]]:
        """Every callback of the event's matching matchers, in parallel, as the CLI runs them.
        A callback that fails counts as a `block` under a matcher with `onFailure: "block"`."""
        base = {
            "session_id": self.session_id,
            "transcript_path": "",
            "cwd": str(self.options.cwd or os.getcwd()),
            "hook_event_name": event,
        }
        calls = []
        for matcher in self._hooks.get(event, []):
            if tool is not None and not _matches(matcher.get("matcher"), tool):
                continue
            for callback_id in matcher.get("hookCallbackIds", []):
                request = {
                    "subtype": "hook_callback",
                    "callback_id": callback_id,
                    "input": {**base, **fields},
                    "tool_use_id": use_id,
                }
                timeout = float(matcher.get("timeout") or HOOK_TIMEOUT)
                calls.append((self._ask(request, timeout), matcher.get("onFailure")))
        answers = await asyncio.gather(*(c for c, _ in calls))
        outputs = []
        for answer, (_, on_failure) in zip(answers, calls, strict=True):
            if answer.get("subtype") == "success":
                outputs.append(answer.get("response") or {})
            elif on_failure not in (None, "continue"):
                error = answer.get("error", "hook failed")
                outputs.append({"decision": "block", "reason": f"Hook {event} failed: {error}"})
        return outputs

    def _assistant(self, content: list[dict[str, Any]]) -> None:
        self._send(
            {
                "type": "assistant",
                "message": {"role": "assistant", "model": "scripted", "content": content},
                "parent_tool_use_id": None,
                "session_id": self.session_id,
            }
        )

    def _result(self, subtype: str, turns: int, text: str | None) -> None:
        self._send(
            {
                "type": "result",
                "subtype": subtype,
                "duration_ms": 0,
                "duration_api_ms": 0,
                "is_error": subtype != "success",
                "num_turns": turns,
                "session_id": self.session_id,
                "result": text,
            }
        )


def _specific(output: Mapping[str, Any]) -> Mapping[str, Any]:
    found = output.get("hookSpecificOutput")
    return found if isinstance(found, Mapping) else {}


def _matches(matcher: str | None, tool: str) -> bool:
    """A hook matcher as the CLI reads it: empty or `*` matches every tool, names joined by `|`
    match exactly, anything else is a regular expression."""
    if not matcher or matcher == "*":
        return True
    if re.fullmatch(r"[\w|]+", matcher):
        return tool in matcher.split("|")
    return re.search(matcher, tool) is not None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if isinstance(b, dict))


__all__ = ["ScriptedCLI", "Turn"]
