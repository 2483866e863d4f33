"""A repeated check: the allow a gate gave before, when nothing it rested on has moved.

The rule is pure, and an allow rests on nothing but the call (the tool's declaration, the keys
D(a) its arguments name, the agent), the plan (an immutable record), the plan's frontier over
D(a) (immutable: records never change) and, for each key of D(a), the head and owner epoch the
store holds; the arguments themselves only stamp their digests on it. A gate that takes its
heads from the store (its default) remembers each allow it gave; a call of the same tool, plan,
agent and D(a) (whatever else its arguments say) is read again, as one read of the plan's row
and D(a)'s states, and when every head and epoch is the one the allow was given on, it is the
same allow, with this call's digests: no snapshot, no walk, no second rule. Anything else (a
head or an epoch moved, a key lost its owner, the plan is gone, the read failed) goes the full
way, and the allow is forgotten.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from planfence.shared_memory import GetKeys, GetRecords, KeyState

from .call import ToolCall
from .policy import ToolPolicy
from .verdicts import ALLOW, CURRENT, Verdict

Call = tuple[str, str, str | None, tuple[str, ...]]
"""A repeated call's key, derived from its `ToolCall`: (tool, plan, agent, D(a) as the tool's
templates fill it)."""


@dataclass(frozen=True, slots=True)
class Allowed:
    """An allow, the declaration of the tool it was given for, and the reads that repeat it (the
    plan's row and the states of D(a), in one batch)."""

    tool: ToolPolicy
    verdict: Verdict
    reads: tuple[GetRecords, GetKeys] = field(init=False)

    def __post_init__(self) -> None:
        assert self.verdict.plan is not None
        reads = (GetRecords((self.verdict.plan,)), GetKeys(self.verdict.scope))
        object.__setattr__(self, "reads", reads)

    def holds(self, states: Mapping[str, KeyState]) -> bool:
        """Every key of D(a) still has the head and owner epoch the allow was given on."""
        heads, epochs = self.verdict.heads, self.verdict.epochs
        for key in self.verdict.scope:
            state = states.get(key)
            if state is None or state.head != heads[key] or state.epoch != epochs[key]:
                return False
        return True


class Repeats:
    """The allows a gate gave, by call; at most `size` (the oldest is forgotten first)."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._allowed: dict[Call, Allowed] = {}

    @staticmethod
    def call(call: ToolCall, declared: ToolPolicy | None) -> Call | None:
        """The call's key, or None for a call no allow can repeat (no plan reference, a tool
        that is not gated, arguments that do not fill its templates)."""
        if declared is None or declared.ungated or type(call.plan) is not str:
            return None
        try:
            scope = declared.scope(call.args)
        except Exception:  # the full way says why
            return None
        return (call.tool, call.plan, call.agent, scope)

    def again(self, allowed: Allowed, call: ToolCall, latency_ms: float) -> Verdict:
        """The allow, for this call (its arguments' digests) and this latency."""
        return allowed.verdict.evolve(
            args_digest=call.args_digest, value_digests=call.value_digests, latency_ms=latency_ms
        )

    def get(self, call: Call, tool: ToolPolicy | None) -> Allowed | None:
        """The allow `call` was given under the tool's current declaration `tool`."""
        found = self._allowed.get(call)
        if found is None or found.tool is not tool:
            return None
        return found

    def remember(self, call: Call, tool: ToolPolicy | None, verdict: Verdict) -> None:
        """Keep `verdict` if it is an allow of current dependencies (not an ungated tool's)."""
        if tool is None or verdict.verdict != ALLOW or verdict.reason != CURRENT:
            return
        if len(self._allowed) >= self.size and call not in self._allowed:
            del self._allowed[next(iter(self._allowed))]
        self._allowed[call] = Allowed(tool, verdict.evolve(latency_ms=0.0, decision_id=None))

    def forget(self, call: Call) -> None:
        self._allowed.pop(call, None)

    def clear(self) -> None:
        self._allowed.clear()

    def __len__(self) -> int:
        return len(self._allowed)
