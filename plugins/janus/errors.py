"""Errors raised by the Janus controller, under planfence's single root.

PlanfenceError
└── JanusError                      anything the Janus controller refuses or cannot do
    ├── JanusConfigError            a setting out of range or a strategy that does not exist
    ├── JanusStateError             a saved state that cannot be resumed
    ├── JanusConflictError          the memory head moved while a candidate was being judged
    ├── UpdaterOutputError          a model reply the updater cannot parse (memory unchanged)
    └── LLMError                    the chat endpoint failed
        ├── LLMUnavailableError     transport errors / 429 / 5xx after every retry
        ├── LLMResponseError        a reply that is not an OpenAI-style chat completion
        └── LLMBudgetExceededError  the configured call or token budget is spent
"""

from __future__ import annotations

from planfence.shared_memory.errors import PlanfenceError


class JanusError(PlanfenceError):
    """Root of every error the Janus controller raises."""


class JanusConfigError(JanusError, ValueError):
    """A controller setting that cannot be used."""


class JanusStateError(JanusError, ValueError):
    """A saved controller state that is malformed or was written with another configuration."""


class JanusConflictError(JanusError):
    """The head of the managed key moved while a candidate was judged; nothing was written."""

    def __init__(self, key: str, expected: str | None, current: str | None) -> None:
        self.key = key
        self.expected = expected
        self.current = current
        super().__init__(
            f"head of {key!r} moved from {expected or 'empty'} to {current or 'empty'} while "
            "Janus judged a candidate; nothing was written, submit again"
        )


class UpdaterOutputError(JanusError, ValueError):
    """A model reply an updater cannot turn into a memory; the memory is left unchanged."""

    def __init__(self, updater: str, problem: str, raw: str) -> None:
        self.updater = updater
        self.problem = problem
        self.raw = raw
        shown = raw if len(raw) <= 200 else raw[:200] + "..."
        super().__init__(f"{updater}: {problem} (model output: {shown!r})")


class LLMError(JanusError):
    """The chat endpoint could not give a usable answer."""


class LLMUnavailableError(LLMError, ConnectionError):
    """Transport errors, rate limits or server errors persisted through every retry."""


class LLMResponseError(LLMError, ValueError):
    """The endpoint answered something that is not a chat completion (or a 4xx refusal)."""


class LLMBudgetExceededError(LLMError):
    """The call or token budget configured for this client is spent."""
