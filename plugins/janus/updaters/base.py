"""The updater protocol: given the current memory, a task and its feedback, propose a memory."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..memory import Memory
from ..tasks import Feedback, Task


@runtime_checkable
class MemoryUpdater(Protocol):
    """Any memory-update method. Janus never changes how candidates are produced.

    `propose` must not mutate `memory`; on a reply it cannot use it raises
    `UpdaterOutputError` and leaves its own state as it was.
    """

    name: str

    def initial_memory(self) -> Memory: ...

    async def propose(self, memory: Memory, task: Task, feedback: Feedback) -> Memory: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, data: dict[str, Any]) -> None: ...
