"""The wire format between a gate and an owner service, and how both sides sign it.

    POST /heads   HeadsRequest  -> 200 HeadsAnswer | 4xx/5xx ErrorBody
    GET  /health  -> {"agent": AGENT}           (unauthenticated; says nothing about heads)

`sig` signs the canonical JSON (sorted keys, no spaces) of every other field, with a type that
keeps a signed request from passing as an answer. It is a detached compact JWS made with the
signer's Ed25519 key (see `keys`), or, with a deprecated shared-secret keyring, HMAC-SHA256 over
the type line and the JSON.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from planfence.shared_memory.records import canonical_json

MAX_KEYS = 4096
DEFAULT_MAX_SKEW_S = 30.0
"""How far apart (seconds) a message's timestamp and the reader's clock may be, by default."""
REQUEST_TYPE = "planfence-heads-request/1"
ANSWER_TYPE = "planfence-heads-answer/2"  # /2: answers carry owner epochs
REQUEST_PURPOSE = REQUEST_TYPE.encode() + b"\n"
ANSWER_PURPOSE = ANSWER_TYPE.encode() + b"\n"

_AGENT = r"^[A-Za-z0-9_][A-Za-z0-9_.\-:@]*$"
_NONCE = r"^[0-9a-f]{32}$"
# HMAC-SHA256 in hex, or a detached compact JWS whose Ed25519 signature is 86 base64url digits.
_SIG = r"^(?:[0-9a-f]{64}|[A-Za-z0-9_\-]{1,1024}\.\.[A-Za-z0-9_\-]{86})$"


class Signer(Protocol):
    """Signs as one agent: an Ed25519 `SigningKey`, or `HmacSigner` (deprecated)."""

    agent: str

    def sign(self, typ: str, fields: Mapping[str, Any]) -> str: ...


class Verifier(Protocol):
    """Checks other agents' signatures: a `PublicKeyring`, or a shared-secret `Keyring`."""

    source: str

    def can_verify(self, agent: str) -> bool: ...

    def verify(self, agent: str, typ: str, fields: Mapping[str, Any], sig: str) -> bool: ...


class HmacSigner:
    """Signs with a shared secret (deprecated: whoever verifies can also forge)."""

    def __init__(self, agent: str, secret: bytes) -> None:
        self.agent = agent
        self._secret = secret

    def __repr__(self) -> str:
        return f"HmacSigner({self.agent!r})"

    def sign(self, typ: str, fields: Mapping[str, Any]) -> str:
        return signature(self._secret, typ.encode() + b"\n", dict(fields))


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    def signed_fields(self) -> dict[str, Any]:
        return self.model_dump(exclude={"sig"})


class HeadsRequest(_Wire):
    """A requester asks one owner for the heads of some of its keys."""

    requester: str = Field(pattern=_AGENT, max_length=200)
    owner: str = Field(pattern=_AGENT, max_length=200)
    keys: list[str] = Field(min_length=1, max_length=MAX_KEYS)
    nonce: str = Field(pattern=_NONCE)
    at: int = Field(ge=0, description="milliseconds since the Unix epoch, requester's clock")
    sig: str = Field(pattern=_SIG, description="the requester's signature")


class HeadsAnswer(_Wire):
    """An owner's signed answer: a head (or null: no version yet) per key it owns, and the owner
    epoch it owns each in (an answer from an earlier epoch is an ex-owner's word)."""

    agent: str = Field(pattern=_AGENT, max_length=200)
    nonce: str = Field(pattern=_NONCE)
    heads: dict[str, str | None]
    epochs: dict[str, int] = Field(description="the owner epoch of each key in `heads`")
    not_owned: list[str]
    at: int = Field(ge=0, description="milliseconds since the Unix epoch, owner's clock")
    sig: str = Field(pattern=_SIG, description="the owner's signature")


class ErrorBody(_Wire):
    """Why an owner refused a request (never signed: the refusal itself proves nothing)."""

    error: str
    detail: str = ""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_nonce() -> str:
    return secrets.token_hex(16)


def signature(secret: bytes, purpose: bytes, fields: dict[str, Any]) -> str:
    message = purpose + canonical_json(fields).encode("utf-8")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def _signer(key: bytes | Signer, agent: str | None) -> Signer:
    if isinstance(key, bytes):
        if agent is None:
            raise TypeError("signing with a shared secret needs the signing agent's id")
        return HmacSigner(agent, key)
    if agent is not None and agent != key.agent:
        raise ValueError(f"a key of {key.agent!r} cannot sign as {agent!r}")
    return key


def signed_request(
    key: bytes | Signer,
    *,
    owner: str,
    keys: list[str],
    nonce: str,
    at: int,
    requester: str | None = None,
) -> HeadsRequest:
    """A request signed by `key` (a `Signer`, or a shared secret with `requester`)."""
    signer = _signer(key, requester)
    fields: dict[str, Any] = {
        "requester": signer.agent,
        "owner": owner,
        "keys": keys,
        "nonce": nonce,
        "at": at,
    }
    return HeadsRequest(**fields, sig=signer.sign(REQUEST_TYPE, fields))


def signed_answer(
    key: bytes | Signer,
    *,
    nonce: str,
    heads: dict[str, str | None],
    not_owned: list[str],
    at: int,
    agent: str | None = None,
    epochs: dict[str, int] | None = None,
) -> HeadsAnswer:
    """An answer signed by `key` (a `Signer`, or a shared secret with `agent`); `epochs` gives
    the owner epoch of each key in `heads` (a key without one is not answered)."""
    signer = _signer(key, agent)
    fields: dict[str, Any] = {
        "agent": signer.agent,
        "nonce": nonce,
        "heads": heads,
        "epochs": dict(epochs or {}),
        "not_owned": not_owned,
        "at": at,
    }
    return HeadsAnswer(**fields, sig=signer.sign(ANSWER_TYPE, fields))


def verify(message: HeadsRequest | HeadsAnswer, key: bytes | Verifier) -> bool:
    """Whether `message` is signed by the agent it names (its requester, or the answering
    owner): with a shared secret, or with a keyring holding that agent's keys."""
    is_request = isinstance(message, HeadsRequest)
    typ = REQUEST_TYPE if is_request else ANSWER_TYPE
    fields = message.signed_fields()
    if isinstance(key, bytes):
        expected = signature(key, typ.encode() + b"\n", fields)
        return hmac.compare_digest(expected, message.sig)
    agent = message.requester if isinstance(message, HeadsRequest) else message.agent
    return key.verify(agent, typ, fields, message.sig)
