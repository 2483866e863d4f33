"""ExpeL (experiential learning) as a memory updater: insight rules with counts.

The memory is `{"rules": [{"text": ..., "count": ...}, ...]}`, at most 20 rules. After a task a
critique call compares a failure with the reference (or looks at a batch of successes) and
emits at most 4 operations, one per rule:

    AGREE n: <rule>      count +1
    REMOVE n: <rule>     count -1 (-3 when the list is full)
    EDIT n: <new text>   replace the text, count +1
    ADD: <new rule>      new rule with count 2

Operations apply in the order REMOVE, AGREE, EDIT, ADD; rules at count <= 0 are dropped and
the rest sorted by count (stable).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import UpdaterOutputError
from ..llm import ChatClient, Message
from ..memory import Memory, render_memory
from ..tasks import Feedback, Task

OpKind = Literal["AGREE", "REMOVE", "EDIT", "ADD"]
_APPLY_ORDER: dict[str, int] = {"REMOVE": 0, "AGREE": 1, "EDIT": 2, "ADD": 3}
_OP_RE = re.compile(
    r"^\s*(?:[-*]\s*|\d+[.)]\s*)?\**(AGREE|REMOVE|EDIT|ADD)\b\**\s*(?i:rule\s*)?#?(\d+)?"
    r"\s*[:.\-]?\s*(.*?)\s*$"
)
_NONE_RE = re.compile(r"^\s*(?:NONE|NO OPERATIONS?)\.?\s*$", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class Operation:
    kind: OpKind
    rule: int | None  # 1-based rule number; None for ADD
    text: str = ""


def parse_operations(reply: str, n_rules: int, *, max_ops: int = 4) -> list[Operation]:
    """Operations in a critique reply; prose lines around them are ignored.

    Keywords must be upper case, as the prompt asks, so prose such as "Add more detail" is not
    mistaken for an operation.

    Raises:
        UpdaterOutputError: no operation (and no NONE), a rule number out of range, a missing
            text, two operations on one rule, or more than `max_ops` operations.
    """
    ops: list[Operation] = []
    for line in reply.splitlines():
        m = _OP_RE.match(line)
        if not m:
            continue
        kind = m.group(1)
        number = int(m.group(2)) if m.group(2) else None
        text = m.group(3).strip()
        if kind == "ADD":
            if not text:
                raise UpdaterOutputError("expel", "ADD without a rule text", reply)
            ops.append(Operation("ADD", None, text))
            continue
        if number is None:
            raise UpdaterOutputError("expel", f"{kind} without a rule number", reply)
        if not 1 <= number <= n_rules:
            raise UpdaterOutputError(
                "expel", f"{kind} {number} names no rule (there are {n_rules})", reply
            )
        if kind == "EDIT" and not text:
            raise UpdaterOutputError("expel", f"EDIT {number} without a new text", reply)
        if any(op.rule == number for op in ops):
            raise UpdaterOutputError("expel", f"two operations on rule {number}", reply)
        ops.append(Operation(kind, number, text))  # type: ignore[arg-type]
    if len(ops) > max_ops:
        raise UpdaterOutputError("expel", f"{len(ops)} operations, at most {max_ops}", reply)
    if not ops and not _NONE_RE.search(reply):
        raise UpdaterOutputError("expel", "no AGREE/REMOVE/EDIT/ADD operation and no NONE", reply)
    return ops


def apply_operations(
    rules: Sequence[dict[str, Any]], ops: Sequence[Operation], *, max_rules: int = 20
) -> list[dict[str, Any]]:
    """New rule list after `ops`; `rules` is not modified."""
    full = len(rules) >= max_rules
    texts = [str(r["text"]) for r in rules]
    counts = [int(r["count"]) for r in rules]
    for op in sorted(ops, key=lambda o: _APPLY_ORDER[o.kind]):
        if op.kind == "ADD":
            if op.text not in texts:
                texts.append(op.text)
                counts.append(2)
            continue
        assert op.rule is not None
        i = op.rule - 1
        if op.kind == "REMOVE":
            counts[i] -= 3 if full else 1
        elif op.kind == "AGREE":
            counts[i] += 1
        else:
            texts[i] = op.text
            counts[i] += 1
    kept = sorted(
        (i for i in range(len(texts)) if counts[i] > 0), key=lambda i: -counts[i]
    )  # sorted() is stable: equal counts keep their order
    return [{"text": texts[i], "count": counts[i]} for i in kept[:max_rules]]


CRITIQUE_SYSTEM = """You keep a short list of general insight rules that help an agent solve \
tasks. Compare the evidence with the current rules and propose at most {max_ops} operations, \
one per line, at most one per rule, in exactly these forms:

AGREE <n>: <rule n>          the evidence supports rule n
REMOVE <n>: <rule n>         rule n is wrong, misleading or redundant
EDIT <n>: <improved rule>    rule n needs rewording
ADD: <new rule>              a general rule the list lacks

Rules must be general (no single task's numbers or names). If nothing should change, answer \
NONE. Write nothing else."""


def _rules_of(memory: Memory) -> list[dict[str, Any]]:
    if memory is None or memory == "":
        return []
    if isinstance(memory, dict) and isinstance(memory.get("rules"), list):
        return list(memory["rules"])
    raise UpdaterOutputError("expel", "memory is not an insight list", str(memory)[:200])


class ExpeLUpdater:
    """Insight-rule memory updated from failures (vs the reference) and batches of successes."""

    name = "expel"

    def __init__(
        self,
        client: ChatClient,
        *,
        max_rules: int = 20,
        max_ops: int = 4,
        success_batch: int = 3,
    ) -> None:
        self.client = client
        self.max_rules = max_rules
        self.max_ops = max_ops
        self.success_batch = success_batch
        self.successes: list[dict[str, str]] = []

    def initial_memory(self) -> Memory:
        return {"rules": []}

    def messages(self, rules: list[dict[str, Any]], evidence: str) -> list[Message]:
        listing = render_memory({"rules": rules}) or "(no rules yet)"
        return [
            {"role": "system", "content": CRITIQUE_SYSTEM.format(max_ops=self.max_ops)},
            {"role": "user", "content": f"CURRENT RULES:\n{listing}\n\nEVIDENCE:\n{evidence}"},
        ]

    def evidence(self, task: Task, feedback: Feedback) -> tuple[str, list[dict[str, str]]] | None:
        """Evidence text for a critique now (None: wait for more successes), and the new buffer."""
        pair = {"input": task.question, "output": feedback.output}
        if feedback.correct:
            batch = [*self.successes, pair]
            if len(batch) < self.success_batch:
                return None
            shown = "\n\n".join(
                f"SUCCESS {n}\nTASK: {p['input']}\nANSWER: {p['output']}"
                for n, p in enumerate(batch, 1)
            )
            return f"A batch of successful attempts:\n\n{shown}", []
        tries = [*feedback.failed_outputs, feedback.output]
        failed = "\n\n".join(f"FAILED TRY {n}:\n{o}" for n, o in enumerate(tries, 1))
        text = f"TASK: {task.question}\n\n{failed}\n\nREFERENCE ANSWER: {task.answer}"
        if self.successes:
            s = self.successes[-1]
            text += f"\n\nA RECENT SUCCESS FOR CONTRAST\nTASK: {s['input']}\nANSWER: {s['output']}"
        return text, list(self.successes)

    async def propose(self, memory: Memory, task: Task, feedback: Feedback) -> Memory:
        rules = _rules_of(memory)
        found = self.evidence(task, feedback)
        if found is None:
            self.successes.append({"input": task.question, "output": feedback.output})
            return {"rules": [dict(r) for r in rules]}
        evidence, buffer = found
        reply = await self.client.chat(self.messages(rules, evidence))
        ops = parse_operations(reply, len(rules), max_ops=self.max_ops)
        new = apply_operations(rules, ops, max_rules=self.max_rules)
        self.successes = buffer
        return {"rules": new}

    def state_dict(self) -> dict[str, Any]:
        return {"successes": [dict(s) for s in self.successes]}

    def load_state_dict(self, data: dict[str, Any]) -> None:
        self.successes = [
            {"input": str(s["input"]), "output": str(s["output"])} for s in data["successes"]
        ]
