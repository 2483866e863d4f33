"""`PlanfenceClaudeHooks`: PlanFence as Claude Agent SDK hooks.

Read side: the `UserPromptSubmit` hook reads the current public records and gives them to the
model as the prompt's additional context; the first tool call the model makes from them stamps
a plan whose parents are exactly those records. Each prompt starts a new plan chain, so a prompt
after a blocked one gets its own replan. The conversation keeps what was shown, so the records
are not called current: a refusal names the newer versions (with their values), and the replan
cites those.

Act side: the `PreToolUse` hook judges every tool call (its matcher matches every tool, and
`on_failure="block"` makes the CLI block a call whose hook fails). A refusal is a deny decision
whose reason is the refusal in words (a block adds its wire payload): the tool does not run and
the model reads the reason as the tool's error result. An allow is no decision: the session's
permission rules still apply. SDK MCP tools served by `server()` run inside the allow (its
fencing token is `planfence.fence.current()`, its lease held until they return); such a tool
called with no allow for its exact arguments (no hook installed, or arguments rewritten after
the check) does not run. `PostToolUse` and `PostToolUseFailure` release the lease of a call
whose tool did not pick up its allow.

An MCP tool's name is judged as the policy declares it: `mcp__<server>__<tool>` when declared
so, else `<tool>`. Every other tool (the CLI's own `Bash`, `Write`, ...) is judged by its name:
undeclared, it is blocked as `undeclared_tool`.

Nothing on the way to a verdict raises into the CLI: a store that cannot be reached while the
records are shown or the plan is stamped tells the model the records cannot be read, and the
gated calls are denied as `store_unavailable`; any other failure is a deny too.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from planfence.fence import bound
from planfence.plugins.gate import (
    DEFAULT_AUDIT,
    AuditMode,
    Gate,
    Judgement,
    Middleware,
    PlanStamper,
    Policy,
    Refused,
    ToolCall,
)
from planfence.plugins.gate.outage import PlanUnavailable, failure
from planfence.plugins.gate.reads import ReadSet, reads_of, refreshed
from planfence.shared_memory import AsyncStore, Store, StoreBridge
from planfence.shared_memory.extras import extra_imports
from planfence.shared_memory.records import canonical_json

from ..base import Adapter, read, shown_text, stamp

with extra_imports("claude-agent-sdk", "planfence.adapters.claude_agent_sdk"):
    from claude_agent_sdk import (
        HookContext,
        HookJSONOutput,
        HookMatcher,
        McpSdkServerConfig,
        SdkMcpTool,
        create_sdk_mcp_server,
    )

HEADER = (
    "Public records when this prompt was submitted (planfence shared memory); plan from these "
    "values, unless a refusal names a newer version:"
)
NOT_JUDGED = "not_judged"
"""The reason a served tool called without an allow for its exact arguments is refused with."""
MCP_PREFIX = "mcp__"
SESSIONS = 1024  # sessions whose read side is kept (the oldest is forgotten first)
PENDING = 256  # allows kept for tools that have not picked them up (the oldest released first)
PENDING_TTL = 60.0  # seconds an allow waits for its tool (the CLI's hook timeout); then let go


@dataclass
class _Session:
    """One session's read side for its current prompt: what was shown, and the plan from it."""

    stamper: PlanStamper
    reads: ReadSet = field(default_factory=dict)
    down: str | None = None
    plan: str | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass(frozen=True)
class _Pending:
    """An allow waiting for its tool: the call the hook judged, and its judgement."""

    tool_use_id: str | None
    tool: str
    args: str  # canonical JSON
    judged: Judgement
    at: float = field(default_factory=time.monotonic)


class PlanfenceClaudeHooks(Adapter):
    """Shows the records, stamps plans from them, and gates every tool call, as SDK hooks.

    Give `hooks` to `ClaudeAgentOptions(hooks=...)` and serve the tools with `server()`.

    Args:
        store: the store: a `Store`, an `AsyncStore`, a URL or a `StoreBridge`.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        gate: a `Gate` configured beyond these settings (see `Adapter.attach_gate`).
        middleware: gate middleware, outermost first.
        audit: how the gate records its decisions (see `Adapter.attach_gate`).
        keys: keys whose current version is shown to the model with every prompt.
        prefixes: key prefixes shown the same way.
        agent: plans are stored under `plans/<agent>` and audited as it.
        header: the first line of the records the model is shown.
    """

    def __init__(
        self,
        store: AsyncStore | Store | StoreBridge | str,
        policy: Policy | Mapping[str, Any] | str,
        *,
        keys: Iterable[str] = (),
        prefixes: Iterable[str] = (),
        agent: str = "agent",
        gate: Gate | None = None,
        middleware: Iterable[Middleware] = (),
        audit: AuditMode = DEFAULT_AUDIT,
        header: str = HEADER,
    ) -> None:
        self.attach_gate(store, policy, agent=agent, gate=gate, middleware=middleware, audit=audit)
        self.keys, self.prefixes, self.header = list(keys), list(prefixes), header
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._pending: list[_Pending] = []

    @property
    def hooks(self) -> dict[Any, list[HookMatcher]]:
        """The hooks for `ClaudeAgentOptions(hooks=...)` (merge with your own per event: every
        `PreToolUse` hook runs, and a deny from any of them wins)."""
        return {
            "UserPromptSubmit": [HookMatcher(hooks=[self._on_prompt])],
            "PreToolUse": [HookMatcher(hooks=[self._on_pre_tool], on_failure="block")],
            "PostToolUse": [HookMatcher(hooks=[self._on_post_tool])],
            "PostToolUseFailure": [HookMatcher(hooks=[self._on_post_tool])],
        }

    def server(
        self, name: str, tools: Sequence[SdkMcpTool[Any]], version: str = "1.0.0"
    ) -> McpSdkServerConfig:
        """`create_sdk_mcp_server(name, version, tools)` whose tools run inside their allow."""
        return create_sdk_mcp_server(name, version, [self._served(name, t) for t in tools])

    def close(self) -> None:
        """`aclose` from sync code."""
        self.bridge.run(self.gate.aclose)

    # ---- read side: the records with every prompt, the plan from what was shown

    async def _on_prompt(
        self, input: Any, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        session = self._start(str(input.get("session_id", "")))
        if not (self.keys or self.prefixes):
            return {}
        try:
            records = await read(session.stamper, self.keys, self.prefixes)
        except Exception as exc:  # the records could not be read: no gated call runs
            records = PlanUnavailable.of(exc)
        if isinstance(records, PlanUnavailable):
            session.down = records.error
        else:
            session.reads = reads_of(records)
        return {
            "hookSpecificOutput": {
                "hookEventName": "UserPromptSubmit",
                "additionalContext": shown_text(self.header, records),
            }
        }

    def _start(self, session_id: str) -> _Session:
        """A new prompt: a plan chain of its own (its first plan supersedes nothing)."""
        session = _Session(self.new_stamper())
        self._sessions[session_id] = session
        self._sessions.move_to_end(session_id)
        while len(self._sessions) > SESSIONS:
            self._sessions.popitem(last=False)
        return session

    async def _plan(self, session: _Session | None, tool: str) -> str | PlanUnavailable | None:
        """The plan a call acts under: none without records shown, or for an ungated tool."""
        declared = self.gate.policy.get(tool)
        if session is None or (declared is not None and declared.ungated):
            return None
        if session.down is not None:
            return PlanUnavailable(session.down)
        if not session.reads:
            return None
        async with session.lock:  # parallel calls of one answer share one plan
            if session.plan is None:
                value = {"agent": self.agent, "tool": tool}
                stamped = await stamp(session.stamper, session.reads, value=value)
                if isinstance(stamped, PlanUnavailable):
                    return stamped
                session.plan = stamped
            return session.plan

    # ---- act side: judged before the tool, the tool inside the allow

    def _judged_name(self, tool_name: str) -> str:
        """The name a tool is judged as: an MCP tool (`mcp__<server>__<tool>`) by its own name
        unless the policy declares the full one."""
        if tool_name.startswith(MCP_PREFIX) and self.gate.policy.get(tool_name) is None:
            return tool_name[len(MCP_PREFIX) :].partition("__")[2] or tool_name
        return tool_name

    async def _on_pre_tool(
        self, input: Any, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        name = self._judged_name(str(input.get("tool_name", "")))
        args = input.get("tool_input")
        args = dict(args) if isinstance(args, Mapping) else {}
        session = self._sessions.get(str(input.get("session_id", "")))
        try:
            call = ToolCall(name, args, await self._plan(session, name))
            judged = await self.gate.judge(call)
        except Exception as exc:  # no verdict: the call must not run
            judged = Refused(failure(name, None, self.agent, exc))
        if isinstance(judged, Refused):
            if judged.replan and session is not None:  # the replan cites what the refusal showed
                session.reads, session.plan = refreshed(session.reads, judged.current), None
            return _deny(judged)
        self._hold(_Pending(tool_use_id, name, canonical_json(args), judged))
        return {}  # no decision: the session's permission rules still apply

    def _hold(self, pending: _Pending) -> None:
        self._pending.append(pending)
        while len(self._pending) > PENDING:
            self._let_go(self._pending.pop(0))

    def _let_go(self, pending: _Pending) -> None:
        """Release an allow no tool picked up (its lease ends by itself if this cannot)."""
        if pending.judged.allowed and getattr(pending.judged, "lease", None) is not None:
            task = asyncio.get_running_loop().create_task(self.gate.release(pending.judged))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _on_post_tool(
        self, input: Any, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        found = [p for p in self._pending if tool_use_id and p.tool_use_id == tool_use_id]
        for pending in found:
            self._pending.remove(pending)
            await self.gate.release(pending.judged)
        return {}

    def _take(self, names: tuple[str, str], args: Mapping[str, Any]) -> _Pending | None:
        """The oldest allow held for this tool with exactly these arguments, given in the last
        `PENDING_TTL` seconds (an older one was never used: its call was denied after the hook,
        or never sent; it is let go, so no later call can run on it)."""
        text = canonical_json(dict(args))
        expired = time.monotonic() - PENDING_TTL
        for pending in [p for p in self._pending if p.at < expired]:
            self._pending.remove(pending)
            self._let_go(pending)
        for pending in self._pending:
            if pending.tool in names and pending.args == text:
                self._pending.remove(pending)
                return pending
        return None

    def _served(self, server: str, tool: SdkMcpTool[Any]) -> SdkMcpTool[Any]:
        """`tool`, run only inside the allow the `PreToolUse` hook gave its call."""
        handler, names = tool.handler, (tool.name, f"{MCP_PREFIX}{server}__{tool.name}")

        async def fenced(args: Any) -> dict[str, Any]:
            pending = self._take(names, args)
            if pending is None:
                refused = await self._not_judged(names[0], args)
                return {"content": [{"type": "text", "text": _reason(refused)}], "is_error": True}
            try:
                with bound(getattr(pending.judged, "fence", None)):
                    return await handler(args)
            finally:
                await self.gate.release(pending.judged)

        return replace(tool, handler=fenced)

    async def _not_judged(self, tool: str, args: Any) -> Refused:
        message = (
            f"planfence: this call of {tool} was not judged before it reached the tool (no "
            "PreToolUse hook of this fence allowed these exact arguments), so it did not run. "
            "Give the fence's hooks to ClaudeAgentOptions(hooks=...)."
        )
        call = ToolCall(tool, dict(args) if isinstance(args, Mapping) else {})
        return await self.gate.refuse(call, NOT_JUDGED, message, by="claude-agent-sdk")


def _reason(judged: Refused) -> str:
    """The refusal as the model reads it: in words, and a block with its wire payload."""
    if judged.replan:
        return judged.message
    return judged.message + "\n" + json.dumps(judged.payload.wire())


def _deny(judged: Refused) -> HookJSONOutput:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": _reason(judged),
        }
    }


__all__ = ["PlanfenceClaudeHooks"]
