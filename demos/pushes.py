"""What the eager baseline pushes, and how a receiving replica checks it.

An eager update travels as its owner's signed head: the claim (key, record id, sequence, epoch)
and the signature the store kept when the owner's write committed it (`shared_memory.signing`),
with the record it points at. The receiving replica checks it exactly as a gate checks a head
read from a store it does not trust (`SignedHeads`): the owner's signature for that epoch, never
a lower sequence or epoch than one it already accepted. So the baseline pays the same signatures
as planfence, and a forged, tampered or replayed push is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planfence.plugins.gate.decision import OWNER_UNAUTHENTICATED
from planfence.plugins.gate.store_heads import SignedHeads
from planfence.shared_memory import JSON, KeyState, PlanfenceError, Record
from planfence.shared_memory.errors import InvalidValueError
from planfence.shared_memory.signing import HeadVerifier

RECORD_MISMATCH = "record_mismatch"


class PushRefused(PlanfenceError):
    """A replica did not accept an eager update (bad signature, rollback, wrong record...)."""

    def __init__(self, error: str, detail: str) -> None:
        super().__init__(f"{error}: {detail}")
        self.error = error
        self.detail = detail


@dataclass(frozen=True)
class PushedHead:
    """One eager update: the owner's signed head, the record it names, and the feed entry's
    sequence (what a replica acknowledges)."""

    state: KeyState
    record: Record
    feed_seq: int

    def to_dict(self) -> dict[str, JSON]:
        s = self.state
        head: dict[str, JSON] = {
            "key": s.key,
            "owner": s.owner,
            "record": s.head,
            "seq": s.version,
            "epoch": s.epoch,
            "sig": s.head_sig,
        }
        return {"head": head, "record": self.record.to_dict(), "feed_seq": self.feed_seq}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PushedHead:
        """Raises:
        InvalidValueError: a field is missing or of the wrong type (or the record does not
            hash to its id).
        """
        try:
            head, feed_seq = data["head"], data["feed_seq"]
            sig = head["sig"]
            state = KeyState(
                key=_typed(head["key"], str),
                owner=_typed(head["owner"], str),
                head=_typed(head["record"], str),
                version=_typed(head["seq"], int),
                epoch=_typed(head["epoch"], int),
                head_sig=None if sig is None else _typed(sig, str),
            )
            record = Record.from_dict(data["record"])
            return cls(state, record, _typed(feed_seq, int))
        except (KeyError, TypeError, AttributeError) as exc:
            raise InvalidValueError(f"malformed push: {exc!r}") from None


def _typed(value: Any, kind: type[Any]) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
    return value


class PushCheck:
    """A receiving replica's check of eager updates (one per replica: it remembers what it
    accepted). Signatures and rollbacks as `SignedHeads` checks them; besides, within one epoch
    the owner a replica first accepted stays the owner (the push names it, and owner changes are
    not signed)."""

    def __init__(self, verifier: HeadVerifier) -> None:
        self.heads = SignedHeads(verifier)

    def check(self, pushed: PushedHead) -> None:
        """Raises:
        PushRefused: `owner_unauthenticated`, `head_rollback` or `record_mismatch`.
        """
        state, record = pushed.state, pushed.record
        if record.id != state.head or record.key != state.key:
            raise PushRefused(
                RECORD_MISMATCH, f"the record pushed is not the head of {state.key} it names"
            )
        seen = self.heads.highest(state.key)
        if seen is not None and seen.epoch == state.epoch and seen.owner != state.owner:
            raise PushRefused(
                OWNER_UNAUTHENTICATED,
                f"{state.key} was {seen.owner!r}'s in epoch {seen.epoch}, "
                f"the push names {state.owner!r}",
            )
        answer = self.heads.answer(state)
        if answer.error:
            raise PushRefused(answer.error, answer.detail or answer.error)
