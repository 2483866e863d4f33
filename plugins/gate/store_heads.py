"""Heads read from the store's owner table: as the gate's default (`heads_in`, from the check's
own snapshot), through the `HeadSource` protocol (`StoreHeads`), and checked against the owners'
signatures when the store is not trusted (`SignedHeads`).

A store run by someone else (a shared PostgreSQL of another team, a relay) could hand out any
head. With `SignedHeads`, a head counts only if its owner signed (key, head, sequence, epoch) and
the store names that owner and epoch now; and since an old signed head stays valid forever, the
gate also remembers the highest sequence and epoch it saw per key and refuses to go back.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from planfence.shared_memory import AsyncStore, HeadVerifier, KeyState, head_signed_by

from .decision import (
    HEAD_ROLLBACK,
    OWNER_EPOCH_STALE,
    OWNER_UNAUTHENTICATED,
    AskOwners,
    HeadAnswer,
    PlanView,
)


class SignedHeads:
    """Verifies every head a gate reads from a store it does not trust (one per gate: what it
    remembers is what this gate has seen). Thread-safe: SQLite decides on its own thread.

    Args:
        verifier: the owners' public keys (a `PublicKeyring`).
    """

    def __init__(self, verifier: HeadVerifier) -> None:
        self.verifier = verifier
        self._lock = threading.Lock()
        self._highest: dict[str, KeyState] = {}  # per key, the latest verified state seen

    def answer(self, state: KeyState) -> HeadAnswer:
        """The head of `state` as an owner's answer, or why it cannot count."""
        with self._lock:
            seen = self._highest.get(state.key)
        if seen == state:  # verified before, byte for byte
            return HeadAnswer(state.head, epoch=state.epoch)
        if seen is not None:
            back = rollback(seen, state)
            if back:
                return HeadAnswer(error=HEAD_ROLLBACK, detail=back)
        if not head_signed_by(
            self.verifier,
            state.owner,
            state.key,
            state.head,
            state.version,
            state.epoch,
            state.head_sig,
        ):
            where = f"the store's head of {state.key}"
            if state.head_sig:
                at = f"sequence {state.version}, epoch {state.epoch}"
                detail = f"{where} ({at}) is not signed by its owner {state.owner!r}"
            else:
                detail = f"{where} carries no signature"
            return HeadAnswer(error=OWNER_UNAUTHENTICATED, detail=detail)
        with self._lock:
            # Another check may have verified a later head meanwhile: this one is then a
            # rollback too, and is refused like one.
            latest = self._highest.get(state.key)
            back = rollback(latest, state) if latest is not None else ""
            if not back:
                self._highest[state.key] = state
        if back:
            return HeadAnswer(error=HEAD_ROLLBACK, detail=back)
        return HeadAnswer(state.head, epoch=state.epoch)

    def highest(self, key: str) -> KeyState | None:
        """The latest verified state of `key` this gate has seen."""
        with self._lock:
            return self._highest.get(key)


def rollback(seen: KeyState, state: KeyState) -> str:
    """Why `state` goes back from `seen` (empty when it does not)."""
    if state.version < seen.version or state.epoch < seen.epoch:
        return (
            f"the store's head of {state.key} is sequence {state.version} (epoch {state.epoch}); "
            f"this gate already saw sequence {seen.version} (epoch {seen.epoch}): a rollback"
        )
    if state.version == seen.version and state.head != seen.head:
        return (
            f"the store shows another head for sequence {state.version} of {state.key} than "
            "the one this gate saw"
        )
    return ""


def heads_in(
    view: PlanView, ask: AskOwners, signed: SignedHeads | None = None
) -> dict[str, HeadAnswer]:
    """The store as the head source: the owners' table read with the plan, one snapshot (each
    head checked by `signed`, when the store is not trusted)."""
    states = view.states
    return {
        k: HeadAnswer(states[k].head) if signed is None else signed.answer(states[k])
        for keys in ask.owners.values()
        for k in keys
        if k in states
    }


class StoreHeads:
    """The store's owner table through the `HeadSource` protocol, for composition (e.g. the
    all-key baseline that widens every request)."""

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
                if state.owner != owner:  # it moved since the check read its owner
                    out[key] = HeadAnswer(
                        error=OWNER_EPOCH_STALE, detail=f"{key} is owned by {state.owner!r}"
                    )
                else:
                    out[key] = HeadAnswer(head=state.head, epoch=state.epoch)
        return out

    async def aclose(self) -> None:
        return None
