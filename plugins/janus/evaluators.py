"""Evaluators: solve a task under a given memory and say whether the answer is correct."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .llm import ChatClient, Message
from .memory import Memory, Render, render_memory
from .tasks import Task


@dataclass(frozen=True)
class Attempt:
    """One answer to a task and whether it matched the reference."""

    output: str
    correct: bool


@runtime_checkable
class Evaluator(Protocol):
    """Correctness of each task when solved with `memory` (the controller's only need)."""

    async def evaluate(self, memory: Memory, tasks: Sequence[Task]) -> list[bool]: ...


@runtime_checkable
class Solver(Protocol):
    """An evaluator that also returns the answer text (used to produce feedback)."""

    async def solve(self, memory: Memory, task: Task) -> Attempt: ...


class FunctionEvaluator:
    """Wraps a plain `judge(memory, task) -> bool` (rule-based solvers, tests)."""

    def __init__(self, judge: Callable[[Memory, Task], bool]) -> None:
        self.judge = judge

    async def evaluate(self, memory: Memory, tasks: Sequence[Task]) -> list[bool]:
        return [bool(self.judge(memory, t)) for t in tasks]


_ANSWER_RE = re.compile(
    r"^\s*(?:final\s+)?answer\s*[:：]\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE
)
_NUMBER_RE = re.compile(r"^[-+]?\d+(?:[.,]\d+)?$")


def extract_answer(text: str) -> str:
    """The text after the last 'ANSWER:' line, else the last non-empty line."""
    found = _ANSWER_RE.findall(text)
    if found:
        return str(found[-1])
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def normalise(answer: str) -> str:
    answer = answer.strip().strip("`*").strip()
    answer = re.sub(r"\s+", " ", answer.lower())
    return answer.rstrip(".").strip()


def check_answer(output: str, reference: str | None) -> bool:
    """Case- and space-insensitive match; numbers compare by value."""
    if reference is None:
        return False
    got, want = normalise(extract_answer(output)), normalise(reference)
    if _NUMBER_RE.match(got) and _NUMBER_RE.match(want):
        return abs(float(got.replace(",", ".")) - float(want.replace(",", "."))) < 1e-9
    return got == want


SOLVER_SYSTEM = (
    "You solve one task at a time. A memory of notes from earlier tasks may help; use what "
    "applies and ignore the rest. Think briefly, then end with a line 'ANSWER: <answer>' "
    "giving only the final answer."
)


class LLMEvaluator:
    """Solves tasks with a chat model, the memory in the prompt; batched through the client."""

    def __init__(
        self,
        client: ChatClient,
        *,
        render: Render = render_memory,
        system: str = SOLVER_SYSTEM,
        checker: Callable[[str, str | None], bool] = check_answer,
    ) -> None:
        self.client = client
        self.render = render
        self.system = system
        self.checker = checker

    def messages(self, memory: Memory, task: Task) -> list[Message]:
        text = self.render(memory).strip() or "(empty)"
        return [
            {"role": "system", "content": self.system},
            {"role": "user", "content": f"MEMORY:\n{text}\n\nTASK:\n{task.question}"},
        ]

    async def solve(self, memory: Memory, task: Task) -> Attempt:
        output = await self.client.chat(self.messages(memory, task))
        return Attempt(output, self.checker(output, task.answer))

    async def evaluate(self, memory: Memory, tasks: Sequence[Task]) -> list[bool]:
        outputs = await self.client.chat_many([self.messages(memory, t) for t in tasks])
        return [self.checker(o, t.answer) for o, t in zip(outputs, tasks, strict=True)]
