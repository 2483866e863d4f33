"""Signed heads: what an owner signs when it moves a head, and the two roles around it.

A head advance can carry the owner's signature over the claim (key, record id, sequence, epoch):
the sequence is the key's head-move count after the move (`KeyState.version`), the epoch its
owner count (`KeyState.epoch`). The store computes the claim inside the write transaction, so the
signature matches exactly what is committed, and keeps it beside the head (`KeyState.head_sig`,
`Change.sig`). The store never verifies it: a reader that does not trust the store does (the
gate's untrusted-store mode), with the owners' public keys.

The roles are protocols, so this layer needs no cryptography: an Ed25519 `SigningKey` and a
`PublicKeyring` (planfence.adapters.owner_service) fit them as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol, runtime_checkable

HEAD_TYPE: Final = "planfence-head/1"
"""The JWS `typ` of a signed head, so a signed head never passes for another signed message."""


@runtime_checkable
class HeadSigner(Protocol):
    """Signs as one agent (e.g. an Ed25519 `SigningKey`)."""

    agent: str

    def sign(self, typ: str, fields: Mapping[str, Any]) -> str: ...


@runtime_checkable
class HeadVerifier(Protocol):
    """Checks agents' signatures (e.g. a `PublicKeyring`)."""

    def verify(self, agent: str, typ: str, fields: Mapping[str, Any], sig: str) -> bool: ...


def head_claim(key: str, record: str | None, seq: int, epoch: int) -> dict[str, Any]:
    """The fields an owner signs when `key`'s head becomes `record` (sequence `seq`, at `epoch`)."""
    return {"key": key, "record": record, "seq": seq, "epoch": epoch}


def sign_head(signer: HeadSigner, key: str, record: str | None, seq: int, epoch: int) -> str:
    return signer.sign(HEAD_TYPE, head_claim(key, record, seq, epoch))


def head_signed_by(
    verifier: HeadVerifier,
    agent: str,
    key: str,
    record: str | None,
    seq: int,
    epoch: int,
    sig: str | None,
) -> bool:
    """Whether `sig` is `agent`'s signature of that head claim (False when there is none)."""
    if not sig:
        return False
    return verifier.verify(agent, HEAD_TYPE, head_claim(key, record, seq, epoch), sig)
