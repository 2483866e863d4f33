"""`JanusMemory`: Janus in front of a Mem0 `Memory` (the team's memories stay where they are).

    memory = JanusMemory(Memory.from_config(config), scope={"user_id": "team"},
                         controller=controller, records=planfence_store)
    with memory.working_on(task):              # the task the memory update follows
        memory.add([{"role": "user", "content": "..."}], user_id="team", infer=False)

The gated memory is the scope's memories (every memory whose `user_id` / `agent_id` / `run_id`
are the scope's), oldest first, each `{"id": ..., "memory": text}`. A write to it (an `add`, an
`update` of its text, a `delete`) is a candidate: the memory with the write applied is judged by
the controller against the memory as it is, and reaches Mem0 only when it is deployed; a kept
write never reaches it, so every read (`search`, `get`, `get_all`, `history`, which pass through)
only ever sees deployed memories. Writes outside the scope, and metadata-only updates, pass
through untouched. The bookkeeping is the `JanusStore`'s: every candidate a record in
planfence's store, every decision in the log (`planfence audit --source janus`), and the
controller's state, from which a restarted wrapper continues.

An `add` in the scope must be `infer=False` (the messages stored as they are): with inference,
Mem0's LLM decides what to add, change and delete while it applies it, so there is no candidate
to judge before the write. Such an add is refused (`ConfigError`), never let through unjudged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from planfence.plugins.janus import JanusController, JanusStoreHook, Task
from planfence.plugins.janus.memory import Memory, render_memory
from planfence.plugins.janus.store_hook import Submission, current_task
from planfence.plugins.janus.store_hook import working_on as _working_on
from planfence.shared_memory import AsyncStore, ConfigError, Store, StoreBridge
from planfence.shared_memory.extras import extra_imports

with extra_imports("mem0", "planfence.adapters.mem0"):
    import mem0

ENTITIES = ("user_id", "agent_id", "run_id")
"""The fields of a Mem0 memory that say whose it is (a scope names one or more)."""
ALL = 100_000
"""Memories read at most while collecting the gated memory."""

Entries = list[dict[str, Any]]


def render_entries(memory: Memory) -> str:
    """A scope's memories as text: one line per memory."""
    if not isinstance(memory, list):
        return render_memory(memory)
    return "\n".join(f"- {e.get('memory', '')}" for e in memory if isinstance(e, dict))


def added_texts(messages: Any) -> list[str]:
    """The memories an `infer=False` add stores: each message's content (a string is one user
    message; system messages and malformed ones are skipped, as Mem0 skips them)."""
    if isinstance(messages, str):
        return [messages]
    if isinstance(messages, Mapping):
        messages = [messages]
    return [
        str(m["content"])
        for m in messages
        if isinstance(m, Mapping)
        and m.get("role") not in (None, "system")
        and m.get("content") is not None
    ]


class JanusMemory:
    """A Mem0 `Memory` whose writes to one scope's memories pass through a Janus controller.

    Args:
        memory: the wrapped `mem0.Memory`, which keeps the deployed memories.
        scope: whose memories are gated: `{"user_id": ...}`, `{"agent_id": ...}`, `{"run_id":
            ...}` or a combination.
        controller: the `JanusController` that judges each write.
        records: planfence's store (sync `Store` or `AsyncStore`) for candidates, decisions and
            the controller's state.
        owner: the agent that owns the memory's key in `records`.
        key: the memory's key in `records` (default `mem0/<field>/<id>/...` from the scope).
        author: whom candidates are attributed to (default: `owner`).

    Raises:
        ConfigError: the scope names no entity, or a field Mem0 does not scope by.
    """

    def __init__(
        self,
        memory: mem0.Memory,
        *,
        scope: Mapping[str, str],
        controller: JanusController,
        records: AsyncStore | Store,
        owner: str = "janus",
        key: str | None = None,
        author: str | None = None,
    ) -> None:
        if not scope or set(scope) - set(ENTITIES):
            raise ConfigError(f"a gated scope names some of {ENTITIES} only: {dict(scope)!r}")
        scope = {k: scope[k] for k in ENTITIES if k in scope}
        if any(not isinstance(v, str) or not v for v in scope.values()):
            raise ConfigError(f"the gated scope needs non-empty ids, got {scope!r}")
        self.memory = memory
        self.scope = scope
        self.controller = controller
        if controller.render is render_memory:
            controller.render = render_entries
        self.bridge = StoreBridge(records)
        self.author = author
        name = key or "mem0/" + "/".join(f"{k}/{v}" for k, v in scope.items())
        self.hook = JanusStoreHook(self.bridge.aio, name, controller, owner=owner, initial=[])
        self._lock = threading.Lock()
        self.last: Submission | None = None
        """The latest judged write (its record, verdict and decision)."""

    # ---- the task a write follows

    @staticmethod
    def working_on(task: Task) -> AbstractContextManager[Task]:
        """Writes inside the block follow `task` (in this context and tasks it starts)."""
        return _working_on(task)

    def gated(self, fields: Mapping[str, Any]) -> bool:
        """Whether a memory with these entity fields belongs to the gated scope."""
        return all(fields.get(k) == v for k, v in self.scope.items())

    # ---- writes

    def add(self, messages: Any, *, infer: bool = True, **kwargs: Any) -> Any:
        """Mem0's `add`; in the scope, judged first (`infer=False` only)."""
        if not self.gated(kwargs):
            return self.memory.add(messages, infer=infer, **kwargs)
        if infer:
            raise ConfigError(
                "JanusMemory judges adds to the gated scope with infer=False only (with "
                "inference, Mem0's LLM picks the changes while it applies them)"
            )
        texts = added_texts(messages)
        if not texts:
            return self.memory.add(messages, infer=False, **kwargs)

        def applied(memory: Entries) -> Entries:
            return [*memory, *({"id": None, "memory": t} for t in texts)]

        with self._lock:
            if not self._judge(applied, " ".join(texts)).verdict.deploy:
                return {"results": []}
            return self.memory.add(messages, infer=False, **kwargs)

    def update(self, memory_id: str, text: str | None = None, **kwargs: Any) -> Any:
        """Mem0's `update`; a new text for a memory in the scope is judged first."""
        if text is None and "data" in kwargs:
            text = kwargs.pop("data")
        found = self.memory.get(memory_id)
        if text is None or not isinstance(found, Mapping) or not self.gated(found):
            return self.memory.update(memory_id, text=text, **kwargs)

        def applied(memory: Entries) -> Entries:
            return [{**e, "memory": text} if e["id"] == memory_id else e for e in memory]

        with self._lock:
            if not self._judge(applied, text).verdict.deploy:
                return {"message": "Memory kept: Janus did not deploy the update."}
            return self.memory.update(memory_id, text=text, **kwargs)

    def delete(self, memory_id: str) -> Any:
        """Mem0's `delete`; of a memory in the scope, judged first."""
        found = self.memory.get(memory_id)
        if not isinstance(found, Mapping) or not self.gated(found):
            return self.memory.delete(memory_id)

        def applied(memory: Entries) -> Entries:
            return [e for e in memory if e["id"] != memory_id]

        with self._lock:
            if not self._judge(applied, f"delete {found.get('memory', '')}").verdict.deploy:
                return {"message": "Memory kept: Janus did not deploy the deletion."}
            return self.memory.delete(memory_id)

    def __getattr__(self, name: str) -> Any:
        """Reads (and everything else) go to the wrapped memory."""
        return getattr(self.memory, name)

    # ---- internals

    def entries(self) -> Entries:
        """The gated memory as the controller sees it: the scope's memories, oldest first."""
        found = self.memory.get_all(filters=dict(self.scope), top_k=ALL)
        rows = found.get("results", []) if isinstance(found, Mapping) else list(found)
        rows = sorted(rows, key=lambda r: (str(r.get("created_at") or ""), str(r.get("id"))))
        return [{"id": r["id"], "memory": r.get("memory", "")} for r in rows]

    def _judge(self, applied: Callable[[Entries], Entries], text: str) -> Submission:
        task = current_task() or Task.create(text)
        memory = self.entries()
        submission: Submission = self.bridge.run(self._submit, applied(memory), memory, task)
        return submission

    async def _submit(self, candidate: Entries, memory: Entries, task: Task) -> Submission:
        submission = await self.hook.submit(candidate, task, author=self.author, current=memory)
        self.last = submission
        return submission

    def decisions(self, limit: int = 100) -> list[Any]:
        """Janus decisions for this memory, newest first."""
        found: list[Any] = self.bridge.run(lambda: self.hook.decisions(limit))
        return found
