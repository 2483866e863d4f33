"""Signed heads: what an owner signs when it moves a head, and the two roles around it.

A head advance can carry the owner's signature over the claim (key, record id, sequence, epoch):
the sequence is the key's head-move count after the move (`KeyState.version`), the epoch its
owner count (`KeyState.epoch`). The store computes the claim inside the write transaction, so the
signature matches exactly what is committed, and keeps it beside the head (`KeyState.head_sig`,
`Change.sig`). The store never verifies it: a reader that does not trust the store does (the
gate's untrusted-store mode), with the owners' public keys.

An owner change carries a signature too, over the ownership claim (key, new owner, new epoch,
"from"): a transfer is signed by the previous owner (its `by`, the claim's "from"), a first
assignment by the agent that assigns it. The store keeps it on the feed's owner change
(`Change.sig`) and on the key (`KeyState.owner_from`, `KeyState.owner_sig`), so a reader can
follow a key's owners back to an assigner it trusts instead of taking the store's word.

The roles are protocols, so this layer needs no cryptography: an Ed25519 `SigningKey` and a
`PublicKeyring` (planfence.adapters.owner_service) fit them as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol, runtime_checkable

HEAD_TYPE: Final = "planfence-head/1"
"""The JWS `typ` of a signed head, so a signed head never passes for another signed message."""
OWNER_TYPE: Final = "planfence-owner/1"
"""The JWS `typ` of a signed ownership claim."""


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


def owner_claim(key: str, owner: str, epoch: int, from_: str) -> dict[str, Any]:
    """The fields `from_` signs when `key` passes to `owner` at `epoch` (`from_` is the previous
    owner, or the assigning agent for the first epoch)."""
    return {"key": key, "owner": owner, "epoch": epoch, "from": from_}


def sign_owner(signer: HeadSigner, key: str, owner: str, epoch: int) -> str:
    """`signer`'s agent hands `key` to `owner` at `epoch`."""
    return signer.sign(OWNER_TYPE, owner_claim(key, owner, epoch, signer.agent))


def owner_signed_by(
    verifier: HeadVerifier, key: str, owner: str, epoch: int, from_: str, sig: str | None
) -> bool:
    """Whether `sig` is `from_`'s signature handing `key` to `owner` at `epoch`."""
    if not sig:
        return False
    return verifier.verify(from_, OWNER_TYPE, owner_claim(key, owner, epoch, from_), sig)
