"""Owners a gate does not take on the store's word: each key's chain of signed ownership claims.

A store nobody trusts names the owner of every key, and a head counts when that owner signed it;
so a store that lies about the owner could hand a key to any agent of the keyring. Every owner
change carries a signed claim (key, new owner, new epoch, "from"; see `signing`): epoch 1 signed
by the agent that assigned the key, each later epoch by the owner of the epoch before (a
transfer) or by a trusted assigner (a reassignment: the fenced takeover of a key whose owner is
gone). A gate
accepts a key's (epoch, owner) only when it can follow those claims from an anchor it trusts:

- the anchor is an explicit set of agents trusted to assign owners (`Gate(owner_assigners=...)`),
  not trust on first use: a gate sees a key for the first time after every restart, in every new
  process, and a lying store would choose what each of them trusts;
- a claim signed by a trusted assigner is an anchor at whatever epoch it names: it proves its
  epoch's owner without the chain before it. This is also how an operator recovers from a bad
  reassignment (unsigned, or signed by an agent no gate trusts): an assigner reassigns the key
  again, and its signed claim supersedes the bad link;
- the gate remembers per key the latest (epoch, owner) it verified. A key whose epoch did not
  move costs a dict lookup; one that moved by one epoch, or whose latest claim is an assigner's,
  is proven by the claim the key itself carries; a bigger jump (or a key never seen beyond
  epoch 1) reads the key's owner changes since the remembered epoch from the feed, once;
- an epoch below the remembered one is a rollback (`head_rollback`); anything unprovable
  blocks (`owner_unauthenticated`).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Final

from planfence.shared_memory import Change, KeyState
from planfence.shared_memory.signing import HeadVerifier, owner_signed_by

from .verdicts import HEAD_ROLLBACK, OWNER_UNAUTHENTICATED

PROVEN: Final = None


@dataclass(frozen=True)
class Unproven:
    """Why a key's owner is not accepted: `reason` is a block reason, or None when the feed's
    owner changes after epoch `after` may still prove it."""

    reason: str | None
    detail: str
    after: int = 0


class OwnerChains:
    """Per key, the latest (epoch, owner) this gate verified. Thread-safe.

    Args:
        verifier: the agents' public keys (a `PublicKeyring`).
        assigners: the agents trusted to sign a key's first ownership claim.
    """

    def __init__(self, verifier: HeadVerifier, assigners: Collection[str]) -> None:
        self.verifier = verifier
        self.assigners = frozenset(assigners)
        self._lock = threading.Lock()
        self._known: dict[str, tuple[int, str]] = {}

    def known(self, key: str) -> tuple[int, str] | None:
        """The latest (epoch, owner) of `key` this gate verified."""
        with self._lock:
            return self._known.get(key)

    def check(self, state: KeyState) -> Unproven | None:
        """None when the store's (epoch, owner) of `state.key` is proven: remembered, or proven
        by the claim the key carries (remembered then); else why not."""
        known = self.known(state.key)
        key, epoch = state.key, state.epoch
        if known is not None and epoch < known[0]:
            return Unproven(
                HEAD_ROLLBACK,
                f"the store names epoch {epoch} of {key}; this gate already verified epoch "
                f"{known[0]}: a rollback",
            )
        if (known is None or epoch > known[0]) and self._assigned(
            key, state.owner, epoch, state.owner_from, state.owner_sig
        ):
            self._remember(key, epoch, state.owner)
            return PROVEN
        if known is None:
            if epoch != 1:
                return Unproven(None, f"no owner of {key} verified yet", 0)
            why = self._anchor(key, state.owner, state.owner_from, state.owner_sig)
        else:
            k_epoch, k_owner = known
            if epoch == k_epoch:
                if state.owner == k_owner:
                    return PROVEN
                return Unproven(
                    OWNER_UNAUTHENTICATED,
                    f"the store names {state.owner!r} as the owner of {key} in epoch {epoch}; "
                    f"this gate verified {k_owner!r}",
                )
            if epoch > k_epoch + 1:
                return Unproven(None, f"{key} moved past epoch {k_epoch}", k_epoch)
            why = self._link(key, state.owner, epoch, state.owner_from, state.owner_sig, k_owner)
        if why:
            return Unproven(OWNER_UNAUTHENTICATED, why)
        self._remember(key, epoch, state.owner)
        return PROVEN

    def learn(self, state: KeyState, changes: Iterable[Change]) -> str:
        """Follow the feed's owner changes of `state.key` (those after the remembered epoch, in
        order) up to `state.epoch`; remember the result when it ends at the state's (epoch,
        owner). Returns why it does not (empty when proven)."""
        key = state.key
        epoch, owner = self.known(key) or (0, "")
        if epoch >= state.epoch:
            return ""  # learned meanwhile by another check: `check` judges the state
        broken = ""  # why the chain is broken since its last anchor (empty: it is not)
        for ch in changes:
            if ch.epoch <= epoch:
                continue  # verified already
            if ch.epoch > state.epoch:
                break  # a transfer after the check's snapshot: not this check's concern
            if ch.key != key or ch.kind != "owner" or ch.epoch != epoch + 1:
                return f"the feed's owner changes of {key} skip or repeat epoch {epoch + 1}"
            if self._assigned(key, ch.owner, ch.epoch, ch.by, ch.sig):
                broken = ""  # an assigner's signed claim anchors the chain anew
            elif not broken:
                if ch.epoch == 1:
                    broken = self._anchor(key, ch.owner, ch.by, ch.sig)
                else:
                    broken = self._link(key, ch.owner, ch.epoch, ch.by, ch.sig, owner)
            epoch, owner = ch.epoch, ch.owner
        if broken:
            return broken
        if (epoch, owner) != (state.epoch, state.owner):
            return (
                f"the feed proves epoch {epoch} of {key} (owner {owner!r}), not the store's "
                f"epoch {state.epoch} (owner {state.owner!r})"
            )
        self._remember(key, epoch, owner)
        return ""

    def _assigned(self, key: str, owner: str, epoch: int, by: str | None, sig: str | None) -> bool:
        """The claim is a trusted assigner's, signed: it anchors its epoch's owner."""
        return (
            by is not None
            and by in self.assigners
            and owner_signed_by(self.verifier, key, owner, epoch, by, sig)
        )

    def _anchor(self, key: str, owner: str, by: str | None, sig: str | None) -> str:
        if by is None or by not in self.assigners:
            return (
                f"the first owner of {key} ({owner!r}) was assigned by {by!r}, whom this gate "
                "does not trust to assign owners"
            )
        if not owner_signed_by(self.verifier, key, owner, 1, by, sig):
            return f"the assignment of {key} to {owner!r} is not signed by {by!r}"
        return ""

    def _link(
        self, key: str, owner: str, epoch: int, by: str | None, sig: str | None, previous: str
    ) -> str:
        if by is None or (by != previous and by not in self.assigners):
            return (
                f"epoch {epoch} of {key} ({owner!r}) was handed over by {by!r}, neither the owner "
                f"of epoch {epoch - 1} ({previous!r}) nor an agent this gate trusts to assign "
                "owners"
            )
        if not owner_signed_by(self.verifier, key, owner, epoch, by, sig):
            what = "transfer" if by == previous else "reassignment"
            return f"the {what} of {key} to {owner!r} (epoch {epoch}) is not signed by {by!r}"
        return ""

    def _remember(self, key: str, epoch: int, owner: str) -> None:
        with self._lock:
            seen = self._known.get(key)
            if seen is None or seen[0] < epoch:
                self._known[key] = (epoch, owner)
