"""Janus on the write path of the shared memory: a managed key whose head only moves on deploy.

Every candidate becomes a record of the key (kind "janus-candidate", parent: the head it was
judged against) whatever the verdict, so nothing an updater proposed is lost. The decision
(with scores, tasks used and trigger details), the head move on deploy and the controller's new
state (a version of the state key) are written in one atomic batch: after a crash the store
holds either all of a step or none of it, and a restarted hook resumes from the state key.

    hook = await JanusStoreHook(store, "team/cheatsheet", controller, owner="janus").open()
    result = await hook.submit(candidate, task, author="curator")
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from planfence.shared_memory import (
    AsyncStore,
    Entry,
    HeadConflictError,
    NotOwnerError,
    Record,
    WriteBatch,
)
from planfence.shared_memory.batches import AdvanceHead

from .controller import JanusController
from .decision import JanusVerdict
from .errors import JanusConflictError
from .kinds import DECISION_SOURCE, KIND_CANDIDATE, KIND_STATE, VERDICT_LABEL
from .memory import Memory
from .state import JanusState
from .tasks import Task

_TASK: ContextVar[Task | None] = ContextVar("planfence_janus_task", default=None)


@contextmanager
def working_on(task: Task) -> Iterator[Task]:
    """Memory writes inside the block follow `task` (in this context and the tasks it starts):
    the wrappers that put Janus in front of a framework's memory (`JanusStore`, `JanusMemory`)
    judge their candidates after it."""
    token = _TASK.set(task)
    try:
        yield task
    finally:
        _TASK.reset(token)


def current_task() -> Task | None:
    """The task set by the innermost `working_on` block around this code, if any."""
    return _TASK.get()


@dataclass(frozen=True)
class Submission:
    """A judged candidate: its record, the verdict and the key's head afterwards."""

    record: Record
    verdict: JanusVerdict
    head: str | None
    decision: Entry


class JanusStoreHook:
    """Filters writes to one key of the shared memory through a Janus controller."""

    def __init__(
        self,
        store: AsyncStore,
        key: str,
        controller: JanusController,
        *,
        owner: str,
        state_key: str | None = None,
        initial: Memory = "",
    ) -> None:
        self.store = store
        self.key = key
        self.controller = controller
        self.owner = owner
        self.state_key = state_key or f"{key}/janus-state"
        self.initial = initial
        self.opened = False

    async def open(self) -> JanusStoreHook:
        """Claim both keys (first use) and resume the controller from the saved state.

        Raises:
            NotOwnerError: another agent owns the memory key or the state key.
            JanusStateError: the saved state was written with other settings.
        """
        states = await self.store.states([self.key, self.state_key])
        for k in (self.key, self.state_key):
            if k not in states:
                await self.store.own(k, self.owner)
            elif states[k].owner != self.owner:
                raise NotOwnerError(k, self.owner, states[k].owner)
        state_head = states[self.state_key].head if self.state_key in states else None
        if state_head is not None:
            saved = (await self.store.get(state_head)).value
            self.controller.state = JanusState.from_json(saved, config=self.controller.config)
        self.opened = True
        return self

    async def current(self) -> tuple[str | None, Memory]:
        """The deployed memory: (head record id, value); `initial` before any deploy."""
        head = await self.store.head(self.key)
        if head is None:
            return None, self.initial
        return head, (await self.store.get(head)).value

    async def submit(
        self,
        candidate: Memory,
        task: Task,
        *,
        author: str | None = None,
        current: Memory | None = None,
    ) -> Submission:
        """Judge `candidate` against the deployed memory after `task` and record the outcome
        (the hook opens itself first, when it was not opened).

        `current`: the deployed memory as the caller holds it, when the memory lives elsewhere
        (a LangGraph store); by default it is the key's head.

        Raises:
            JanusConflictError: the memory or state head moved meanwhile; nothing was written
                and the controller is as before, so the caller may submit again.
        """
        if not self.opened:
            await self.open()
        author = author or self.owner
        heads = await self.store.heads([self.key, self.state_key])
        head, state_head = heads.get(self.key), heads.get(self.state_key)
        if current is None:
            current = self.initial if head is None else (await self.store.get(head)).value
        before = self.controller.state
        verdict = await self.controller.consider(current, candidate, task, key=self.key)
        limits = self.store.limits
        record = Record.create(
            self.key,
            candidate,
            author=author,
            parents=[head] if head else [],
            kind=KIND_CANDIDATE,
            limits=limits,
        )
        state = Record.create(
            self.state_key,
            self.controller.save_state(),
            author=self.owner,
            parents=[state_head] if state_head else [],
            kind=KIND_STATE,
            limits=limits,
        )
        decision = Entry(
            kind=DECISION_SOURCE,
            labels={VERDICT_LABEL: verdict.verdict, "reason": verdict.reason, "agent": author},
            detail={
                **verdict.to_payload(),
                "key": self.key,
                "candidate": record.id,
                "previous": head,
                "task": task.id,
            },
        )
        ops = [AdvanceHead(self.state_key, state.id, state_head, self.owner)]
        if verdict.deploy:
            ops.insert(0, AdvanceHead(self.key, record.id, head, self.owner))
        try:
            await self.store.write(
                WriteBatch(records=(record, state), ops=tuple(ops), entries=(decision,))
            )
        except HeadConflictError as exc:
            self.controller.state = before
            raise JanusConflictError(exc.key, exc.expected, exc.current) from exc
        except BaseException:
            # Nothing was written: the controller must not run ahead of the stored state.
            self.controller.state = before
            raise
        return Submission(record, verdict, record.id if verdict.deploy else head, decision)

    async def decisions(self, limit: int = 100) -> list[Entry]:
        """Janus decisions for this key, newest first."""
        found = await self.store.journal(kind=DECISION_SOURCE, limit=limit)
        return [d for d in found if d.detail.get("key") == self.key]
