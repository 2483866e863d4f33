"""Tasks and feedback: what the controller evaluates memories on."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import JanusStateError


@dataclass(frozen=True)
class Task:
    """One task of the stream: a question and, for evaluation, its reference answer."""

    id: str
    question: str
    answer: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        question: str,
        answer: str | None = None,
        *,
        id: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Task:
        """A task whose id defaults to a digest of its question and answer."""
        if id is None:
            digest = hashlib.sha256(f"{question}\x00{answer}".encode()).hexdigest()
            id = digest[:16]
        return cls(id=id, question=question, answer=answer, meta=dict(meta or {}))

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "question": self.question,
            "answer": self.answer,
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Task:
        try:
            return cls(
                id=str(data["id"]),
                question=str(data["question"]),
                answer=None if data.get("answer") is None else str(data["answer"]),
                meta=dict(data.get("meta") or {}),
            )
        except (KeyError, TypeError) as exc:
            raise JanusStateError(f"malformed task {data!r}: {exc}") from None


@dataclass(frozen=True)
class Feedback:
    """What the agent learnt from solving a task with the current memory."""

    output: str
    correct: bool
    failed_outputs: tuple[str, ...] = ()
