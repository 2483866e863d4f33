"""The base of every framework adapter: what planfence is made of inside any framework.

An adapter is the framework's own extension point (a plugin, a hook, a middleware, a guardrail)
that is also an `Adapter`. Its constructor keeps the framework's signature and calls
`attach_gate` once; from then on it has the store (`bridge`), the gate (`gate`, a
`GateMiddleware`) and plan chains (`new_stamper()`). Two sides, as in every adapter:

- **read**: before the model plans, show it the current records (`read`, `shown_text`), and when
  it answers with tool calls, stamp a plan whose parents are exactly what it was shown (`stamp`);
- **act**: before a tool runs, judge the `ToolCall` (`gate.guard(call)`); run the tool only on an
  allow, inside the block (its fencing token is `planfence.fence.current()`, its lease held), and
  show a refusal to the model in the framework's own form (`Refused.message`, `.payload`).

A worked example, a framework whose tools take a `before_tool(name, args)` hook:

    class PlanfenceHook(Adapter, framework.ToolHook):
        def __init__(self, store, policy, *, keys=(), agent="agent", gate=None,
                     middleware=(), audit=DEFAULT_AUDIT):
            self.attach_gate(store, policy, agent=agent, gate=gate,
                             middleware=middleware, audit=audit)
            self.keys, self.stamper = list(keys), self.new_stamper()

        async def system_prompt(self, text):            # read side
            self.shown = await read(self.stamper, self.keys)
            self.plan = await stamp(self.stamper, reads_or_down(self.shown))
            return text + "\n\n" + shown_text(DEFAULT_HEADER, self.shown)

        async def before_tool(self, name, args):          # act side
            judged = await self.gate.judge(ToolCall(name, args, self.plan))
            if isinstance(judged, Refused):
                return framework.Skip(judged.message)   # the model replans from this
            return None                                 # the tool runs

Register its conformance harness (see `planfence.adapters.conformance`) and run
`python -m planfence.adapters.conformance --adapter NAME`.

A store that cannot be reached while the adapter reads or stamps is never an exception in the
framework's loop: `read` and `stamp` answer `PlanUnavailable` instead, the model is told the
records cannot be read, and the gate refuses every gated call made under it as
`store_unavailable`, in the framework's own refusal form.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from planfence.plugins.gate import (
    DEFAULT_AUDIT,
    REPLAN,
    AuditMode,
    Gate,
    GateMiddleware,
    Middleware,
    PlanStamper,
    Policy,
    Verdict,
)
from planfence.plugins.gate.explain import explain
from planfence.plugins.gate.fence import TokenSigner
from planfence.plugins.gate.outage import PlanUnavailable, store_down
from planfence.plugins.gate.plans import Reads
from planfence.shared_memory import AsyncStore, Record, Store, StoreBridge
from planfence.shared_memory.records import canonical_json

DEFAULT_HEADER = "Current public records (planfence shared memory); plan from these values:"
UNREADABLE = (
    "planfence: the public records cannot be read now (the shared store cannot be reached: "
    "{error}). No action that depends on them can run until it is back (store_unavailable)."
)


class Adapter:
    """The planfence side of a framework adapter (a mixin beside the framework's own base).

    Call `attach_gate` from the adapter's constructor, whose signature stays the framework's.
    """

    bridge: StoreBridge
    gate: GateMiddleware
    agent: str | None

    def attach_gate(
        self,
        store: AsyncStore | Store | StoreBridge | str,
        policy: Policy | Mapping[str, Any] | str,
        *,
        agent: str | None = None,
        gate: Gate | None = None,
        middleware: Iterable[Middleware] = (),
        audit: AuditMode = DEFAULT_AUDIT,
        signing_key: TokenSigner | None = None,
    ) -> None:
        """Give the adapter its store and gate.

        Args:
            store: a sync `Store`, an `AsyncStore`, a store URL, or a `StoreBridge` to one.
            policy: the declared scopes (a `Policy`, its dict form, or TOML text).
            agent: who calls, when a call does not say (plans are stored under
                `plans/<agent>`, decisions audited as it).
            gate: a `Gate` configured beyond these settings (owner heads, `verify_heads`),
                over the same store and policy; default a gate built from these settings.
            middleware: `planfence.plugins.gate.Middleware` around the gate, outermost first.
            audit: how the gate records its decisions: `"deferred"` (the default: refusals
                before it answers, allows by group commit just after), `"durable"` (every
                decision before the tool runs) or `"off"` (the replan budget's refusals only).
                `aclose()` writes what a deferred audit queued.
            signing_key: signs each allow's fencing token (an Ed25519 `SigningKey`).

        Raises:
            ConfigError: the settings do not fit together (a `gate` over another store or
                policy, an `audit` the given gate does not record with); the adapter refuses
                to start rather than judge with less than it was asked for.
        """
        self.gate = GateMiddleware(
            store,
            policy,
            gate=gate,
            agent=agent,
            middleware=middleware,
            audit=audit,
            signing_key=signing_key,
        )
        self.bridge, self.agent = self.gate.bridge, agent

    def new_stamper(self, author: str | None = None) -> PlanStamper:
        """A plan chain of its own (one per run, invocation or framework agent), stored under
        `plans/<author>` (default the adapter's agent)."""
        return PlanStamper(self.bridge, author or self.agent or "agent")

    async def aclose(self) -> None:
        """Close the gate (a deferred audit writes the allows it has queued)."""
        await self.gate.aclose()


async def read(
    stamper: PlanStamper, keys: Sequence[str], prefixes: Sequence[str] = ()
) -> list[Record] | PlanUnavailable:
    """The current records to show, or `PlanUnavailable` when the store cannot be reached."""
    try:
        return await stamper.current(keys, prefixes)
    except Exception as exc:
        if not store_down(exc):
            raise
        return PlanUnavailable.of(exc)


async def stamp(
    stamper: PlanStamper, reads: Reads | PlanUnavailable, **fields: Any
) -> str | PlanUnavailable:
    """The id of a plan citing `reads` (`PlanStamper.stamp`'s fields), or `PlanUnavailable`
    when the store cannot be reached (or could not be when the records were read)."""
    if isinstance(reads, PlanUnavailable):
        return reads
    try:
        return (await stamper.stamp(reads, **fields)).id
    except Exception as exc:
        if not store_down(exc):
            raise
        return PlanUnavailable.of(exc)


def records_text(header: str, records: Iterable[Record]) -> str:
    """The text a model is shown: one line per record with its key, version and value."""
    lines = [header]
    lines += [f"- {r.key} (version {r.id[:12]}): {canonical_json(r.value)}" for r in records]
    return "\n".join(lines)


def unreadable_text(error: str) -> str:
    """What a model is shown instead of the records when the store cannot be reached."""
    return UNREADABLE.format(error=error)


def shown_text(header: str, shown: list[Record] | PlanUnavailable) -> str:
    """The records as the model reads them, or why they cannot be read."""
    if isinstance(shown, PlanUnavailable):
        return unreadable_text(shown.error)
    return records_text(header, shown)


def reads_or_down(shown: list[Record] | PlanUnavailable) -> list[str] | PlanUnavailable:
    """The record ids a plan from `shown` cites (or why there are none)."""
    return shown if isinstance(shown, PlanUnavailable) else [r.id for r in shown]


def for_model(verdict: Verdict) -> Verdict:
    """A refusal whose message the model can replan from: a replan's says which records changed
    and what they are now (their current values); any other refusal keeps the gate's."""
    if verdict.verdict != REPLAN:
        return verdict
    return replace(verdict, message=explain(verdict))


__all__ = [
    "DEFAULT_HEADER",
    "Adapter",
    "PlanUnavailable",
    "read",
    "reads_or_down",
    "shown_text",
    "stamp",
]
