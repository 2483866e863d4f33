"""`SyncGate`: the gate for synchronous code, over a sync `Store`."""

from __future__ import annotations

from typing import Any

from planfence.shared_memory import Store

from .call import ToolCall
from .decision import Verdict
from .gate import Gate
from .middleware import GateMiddleware
from .policy import Policy


class SyncGate:
    """Synchronous twin of `Gate`, over a sync `Store` (runs on the store's loop thread); takes
    `Gate`'s arguments, `audit` included (default `"deferred"`: `close()` writes the queue).
    `seam` runs tools under its verdicts (`seam.run_sync(call, fn, replan)`)."""

    def __init__(self, store: Store, policy: Policy, **kwargs: Any) -> None:
        self.store = store
        self.gate = Gate(store.aio, policy, **kwargs)
        self.seam = GateMiddleware(store, policy, gate=self.gate)

    def check(self, call: ToolCall) -> Verdict:
        """`Gate.check` from sync code."""
        return self.store._run(self.gate.check(call))

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


__all__ = ["SyncGate"]
