"""`SyncGate`: the gate for synchronous code, over a sync `Store`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from planfence.shared_memory import Store

from .decision import Verdict
from .executor import Outcome, Replanned
from .gate import Gate
from .middleware import GateMiddleware, run_guarded_sync
from .policy import Policy


class SyncGate:
    """Synchronous twin of `Gate`, over a sync `Store` (runs on the store's loop thread); takes
    `Gate`'s arguments, `audit` included (default `"deferred"`: `close()` writes the queue)."""

    def __init__(self, store: Store, policy: Policy, **kwargs: Any) -> None:
        self.store = store
        self.gate = Gate(store.aio, policy, **kwargs)
        self.seam = GateMiddleware(store, policy, checker=self.gate)

    def check(
        self,
        tool: str,
        args: Mapping[str, Any],
        plan_id: Any,
        *,
        agent: str | None = None,
        replan_spent: bool = False,
    ) -> Verdict:
        return self.store._run(
            self.gate.check(tool, args, plan_id, agent=agent, replan_spent=replan_spent)
        )

    def flush(self) -> None:
        """Write the allows a deferred audit has queued (see `Gate.flush`)."""
        self.store._run(self.gate.flush())

    def __enter__(self) -> SyncGate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Write a deferred audit's queue and close the head source (see `Gate.aclose`). After
        its store was closed there is nothing left to do: closing the store wrote the queue."""
        if not self.store.closed:
            self.store._run(self.gate.aclose())

    def run(
        self,
        tool: str,
        args: Mapping[str, Any],
        plan_id: str | None,
        call: Callable[[Mapping[str, Any]], Any],
        replan: Callable[[Verdict], Replanned | None] | None = None,
        *,
        agent: str | None = None,
    ) -> Outcome:
        """Same loop as `Gate.run`, with plain callables; the tool runs on the caller's thread,
        with the allow's fencing token and the lease its policy declares."""
        return run_guarded_sync(self.seam, tool, args, plan_id, call, replan, agent=agent)


__all__ = ["SyncGate"]
