"""Heads read from the store's owner table, through the `HeadSource` protocol.

The gate reads heads from the store directly by default (in the same snapshot as the plan); this
source exists for composition, e.g. the all-key baseline that widens every request.
"""

from __future__ import annotations

from collections.abc import Mapping

from planfence.shared_memory import AsyncStore

from .decision import OWNER_UNAUTHENTICATED, HeadAnswer


class StoreHeads:
    def __init__(self, store: AsyncStore) -> None:
        self.store = store
        self.keys_asked = 0

    async def heads(self, owners: Mapping[str, tuple[str, ...]]) -> Mapping[str, HeadAnswer]:
        wanted = [k for keys in owners.values() for k in keys]
        self.keys_asked += len(wanted)
        states = await self.store.states(wanted)
        out: dict[str, HeadAnswer] = {}
        for owner, keys in owners.items():
            for key in keys:
                state = states.get(key)
                if state is None:
                    continue
                if state.owner != owner:
                    out[key] = HeadAnswer(
                        error=OWNER_UNAUTHENTICATED, detail=f"{key} is owned by {state.owner!r}"
                    )
                else:
                    out[key] = HeadAnswer(head=state.head)
        return out

    async def aclose(self) -> None:
        return None
