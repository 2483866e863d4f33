"""The store's value types besides records: key states, change-feed entries, the CAS marker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from .records import JSON


class _Current:
    def __repr__(self) -> str:
        return "CURRENT"


CURRENT: Final = _Current()
"""`expected_head=CURRENT`: compare-and-set against the head read just before the write."""


FIRST_EPOCH: Final = 1
"""A key's owner epoch when it is first owned; every transfer adds one."""


@dataclass(frozen=True)
class KeyState:
    """A key's owner and head. `version` counts the head moves (the head's sequence number);
    `epoch` counts the owners (1 for the first, +1 per transfer); `head_sig` is the owner's
    signature over (key, head, version, epoch), when the writer signed (see `signing`);
    `owner_from` is who gave this epoch's owner the key (the previous owner, or the assigner for
    epoch 1) and `owner_sig` that agent's signature of the ownership claim, when it signed."""

    key: str
    owner: str
    head: str | None
    version: int = 0
    epoch: int = FIRST_EPOCH
    head_sig: str | None = None
    owner_from: str | None = None
    owner_sig: str | None = None


@dataclass(frozen=True)
class Change:
    """One entry of the change feed: a head moved or an owner changed."""

    seq: int
    key: str
    kind: Literal["head", "owner"]
    head: str | None
    previous: str | None
    owner: str
    by: str
    at: str
    epoch: int = FIRST_EPOCH
    """The key's owner epoch after this change (a transfer starts a new one)."""
    sig: str | None = None
    """When its writer signed: for a head move, the owner's signature of the head it moved to;
    for an owner change, the signature of the ownership claim by `by` (see `signing`)."""

    def to_dict(self) -> dict[str, JSON]:
        return {
            "seq": self.seq,
            "key": self.key,
            "kind": self.kind,
            "head": self.head,
            "previous": self.previous,
            "owner": self.owner,
            "by": self.by,
            "at": self.at,
            "epoch": self.epoch,
            "sig": self.sig,
        }


def plain(text: Any) -> Any:
    """A string subclass (an enum of codes) as a plain `str`, so every driver stores its value."""
    return str.__str__(text) if isinstance(text, str) and type(text) is not str else text
