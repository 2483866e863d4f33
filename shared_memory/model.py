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


@dataclass(frozen=True)
class KeyState:
    """A key's owner and head; `version` counts the head moves."""

    key: str
    owner: str
    head: str | None
    version: int = 0


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
        }


def plain(text: Any) -> Any:
    """A string subclass (an enum of codes) as a plain `str`, so every driver stores its value."""
    return str.__str__(text) if isinstance(text, str) and type(text) is not str else text
