"""Heads read from the store's owner table: as the gate's default (`heads_in`, from the check's
own snapshot), through the `HeadSource` protocol (`StoreHeads`), and checked against the owners'
signatures when the store is not trusted (`SignedHeads`).

A store run by someone else (a shared PostgreSQL of another team, a relay) could hand out any
head. With `SignedHeads`, a head counts only if its owner signed (key, head, sequence, epoch) and
the store names that owner and epoch now; and since an old signed head stays valid forever, the
gate also remembers the highest sequence and epoch it saw per key and refuses to go back. With
`OwnerChains`, the owner the store names must be proven too, by its chain of signed ownership
claims (`owner_chain`); a key whose chain needs the feed makes the check ask for it
(`ProveOwners`) before the heads are answered.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from planfence.shared_memory import AsyncStore, ConfigError, GetOwnerChanges, KeyState
from planfence.shared_memory.signing import HeadVerifier, head_signed_by

from .call import ToolCall
from .decision import (
    HEAD_ROLLBACK,
    OWNER_EPOCH_STALE,
    OWNER_UNAUTHENTICATED,
    AskOwners,
    HeadAnswer,
    PlanView,
    Verdict,
    decide,
    owners_of,
)
from .heads import HeadSource
from .owner_chain import OwnerChains


class SignedHeads:
    """Verifies every head a gate reads from a store it does not trust (one per gate: what it
    remembers is what this gate has seen). Thread-safe: SQLite decides on its own thread.

    Args:
        verifier: the owners' public keys (a `PublicKeyring`).
        owners: proves the owner each head is checked against (None: the store's word, for
            heads pushed by their owners themselves).
    """

    def __init__(self, verifier: HeadVerifier, owners: OwnerChains | None = None) -> None:
        self.verifier = verifier
        self.owners = owners
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
        if self.owners is not None:
            unproven = self.owners.check(state)
            if unproven is not None:
                detail = f"ownership not proven: {unproven.detail}"
                return HeadAnswer(error=unproven.reason or OWNER_UNAUTHENTICATED, detail=detail)
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

    def unproven(self, states: Mapping[str, KeyState]) -> dict[str, int]:
        """The keys whose owner only the feed can prove, with the epoch to read it after."""
        if self.owners is None:
            return {}
        with self._lock:
            fresh = [s for s in states.values() if self._highest.get(s.key) != s]
        out: dict[str, int] = {}
        for state in fresh:
            why = self.owners.check(state)
            if why is not None and why.reason is None:
                out[state.key] = why.after
        return out


def untrusted_store(
    verifier: HeadVerifier | None, assigners: Collection[str] | None
) -> SignedHeads | None:
    """What checks the heads and owners of a store the gate does not trust (None: trusted)."""
    if (verifier is None) != (assigners is None):
        raise ConfigError(
            "verify_heads and owner_assigners go together: the owners' keys prove heads and "
            "claims only from agents trusted to assign owners"
        )
    if verifier is None or assigners is None:
        return None
    return SignedHeads(verifier, OwnerChains(verifier, assigners))


@dataclass(frozen=True)
class ProveOwners:
    """Read the feed's owner changes of `after`'s keys (each after the epoch given), then answer
    `ask` from `view`: the store's owners are not proven by what this gate remembers."""

    ask: AskOwners
    view: PlanView
    after: Mapping[str, int]


def heads_or_proof(
    view: PlanView, ask: AskOwners, signed: SignedHeads | None
) -> dict[str, HeadAnswer] | ProveOwners:
    """`heads_in`, unless some owner needs the feed first (`ProveOwners`). Only refused heads
    are looked at again, so a check on keys already verified costs what `heads_in` does."""
    answers = heads_in(view, ask, signed)
    if signed is not None and signed.owners is not None:
        refused = {k: view.states[k] for k, a in answers.items() if a.error}
        after = signed.unproven(refused) if refused else None
        if after:
            return ProveOwners(ask, view, after)
    return answers


async def proven_heads(
    store: AsyncStore, request: ProveOwners, signed: SignedHeads
) -> dict[str, HeadAnswer]:
    """Read the owner changes `request` needs (one snapshot), follow them, answer its heads;
    a chain that does not prove the store's owner blocks its key."""
    assert signed.owners is not None  # else nothing is unproven
    failed = await _learned(store, request.view.states, request.after, signed.owners)
    answers = heads_in(request.view, request.ask, signed)
    return {**answers, **failed}


async def _learned(
    store: AsyncStore, states: Mapping[str, KeyState], after: Mapping[str, int], owners: OwnerChains
) -> dict[str, HeadAnswer]:
    """Read the feed's owner changes of `after`'s keys (one snapshot) and follow them; the keys
    whose chain does not prove the store's owner, each with the answer that blocks it."""
    keys = sorted(after)
    found = await store.read([GetOwnerChanges(k, after[k]) for k in keys])
    failed: dict[str, HeadAnswer] = {}
    for key, changes in zip(keys, found, strict=True):
        why = owners.learn(states[key], changes)
        if why:
            detail = f"ownership not proven: {why}"
            failed[key] = HeadAnswer(error=OWNER_UNAUTHENTICATED, detail=detail)
    return failed


async def source_heads_proven(
    store: AsyncStore, source: HeadSource, ask: AskOwners, signed: SignedHeads
) -> dict[str, HeadAnswer]:
    """A head source's answers, for a gate that does not trust the store: where heads come from
    does not change what must be proven. Each key's owner is proven by its chain of signed
    claims before that owner is asked (the key of an unproven owner is not asked, and blocks);
    and unless the source's answers are signed by the owners themselves (`signed_by_owners`,
    as `HttpOwnerHeads` verifies), each head must also be the one its owner signed in the
    store, as `SignedHeads` checks it."""
    view = ask.view
    wanted = [k for keys in ask.owners.values() for k in keys]
    if view is None:  # nothing to prove the owners from: none is asked
        detail = "ownership not proven: the check read no owners"
        return {k: HeadAnswer(error=OWNER_UNAUTHENTICATED, detail=detail) for k in wanted}
    states = {k: view.states[k] for k in wanted if k in view.states}
    failed: dict[str, HeadAnswer] = {}
    after: dict[str, int] = {}
    owners = signed.owners
    for key, state in states.items() if owners is not None else ():
        assert owners is not None
        why = owners.check(state)
        if why is None:
            continue
        if why.reason is None:
            after[key] = why.after
        else:
            detail = f"ownership not proven: {why.detail}"
            failed[key] = HeadAnswer(error=why.reason, detail=detail)
    if after:
        assert owners is not None
        failed.update(await _learned(store, states, after, owners))
    asked = {o: tuple(k for k in keys if k not in failed) for o, keys in ask.owners.items()}
    asked = {o: keys for o, keys in asked.items() if keys}
    answers = dict(await source.heads(asked)) if asked else {}
    if not getattr(source, "signed_by_owners", False):
        for key, answer in answers.items():
            if answer.error is None and key in states:
                own = signed.answer(states[key])
                if own.error is not None:
                    answers[key] = own
                elif own.head != answer.head:
                    detail = f"the head source's head of {key} is not the one its owner signed"
                    answers[key] = HeadAnswer(error=OWNER_UNAUTHENTICATED, detail=detail)
    return {**answers, **failed}


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


def judged_on_store_heads(
    call: ToolCall, scope: tuple[str, ...], max_records: int, view: PlanView
) -> tuple[PlanView, Verdict]:
    """`judge_flow` for a gate that takes the store's heads on trust: they are in the view, so
    judging needs no read (`Gate` runs it inside the snapshot's transaction)."""
    heads = heads_in(view, AskOwners(owners_of(scope, view.states)))
    return view, decide(call, scope, view, heads, budget_spent=False, max_records=max_records)


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
