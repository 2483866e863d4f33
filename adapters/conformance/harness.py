"""What an adapter provides to be checked by the suite: a `Harness`.

A harness builds its framework's agent for one run: a scripted model that asks `script.next`
what to do on each turn (passing it the text the framework shows the model), the world's two
tools wrapped as the framework's tools, and the adapter on both sides (records shown to the
model become the plan's parents; the gate runs before each tool). It returns what the model was
told by its tools. Everything else (effects, audit log, spans) the cases observe themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, runtime_checkable

from planfence.plugins.gate import GateMiddleware
from planfence.plugins.gate.checkers import CheckerFactory
from planfence.plugins.gate.middleware import judge_with

from .world import Script, World


@dataclass
class Run:
    """What one run of the agent showed its model: every tool result, in order (a refusal is
    the refusal's text)."""

    told: list[str] = field(default_factory=list)


@runtime_checkable
class Harness(Protocol):
    """One adapter's agent, built for the suite.

    `name` is the adapter's row in the table, `extra` the pip extra it needs and `modules` the
    modules that must import for it to run. `tool_span`: the name (or name prefix) of the span the
    framework itself opens around a tool call, or None when it opens none; the gate's span must
    then be its child (case h). `tool_span_wraps_gate` (optional, default True): False for a
    framework whose tool span encloses only the function, opened after its interception place
    ran; the gate's span must then be that span's sibling, just before it.
    """

    name: ClassVar[str]
    extra: ClassVar[str]
    modules: ClassVar[Sequence[str]]
    tool_span: ClassVar[str | None]

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
        """Run the agent on the task `world.TASK`.

        Args:
            world: the store (give the adapter `world.store`), policy and tools.
            script: the scripted model's decisions; call `await script.next(shown, last)` on
                every model turn and make the call it returns (None: answer with text). A call
                may be malformed (`MALFORMED` instead of `destination`): the framework
                rejects it as it rejects any call whose arguments do not fit the tool.
            checker: None for the adapter as users build it; otherwise a control's checker
                factory (cases d and f), which the harness gives the adapter's gate middleware
                after building it, with `controlled(adapter.gate, checker)`.
            plans: False for an agent with no read side: it is shown no records and its calls
                carry no plan (case e).
            runs: how many times to run the agent on the task, one run after the other, with
                the same framework agent, model and adapter objects, as a user runs one agent
                on several requests (case j); call `script.new_run()` before each run after
                the first. `told` holds what all of them told the model.
            close: False: leave the adapter open when the runs end (case m closes the store
                under it); a framework's own resources may still be released, as long as that
                does not close the adapter.
        """
        ...


def controlled(gate: GateMiddleware, checker: CheckerFactory | None) -> GateMiddleware:
    """An adapter's gate middleware judging with a control's checker (`checker` not None), the
    way experiments plug a baseline in (`judge_with`): adapters take no checker themselves."""
    return gate if checker is None else judge_with(gate, checker)
