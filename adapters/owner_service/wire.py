"""The wire format between a gate and an owner service, and how both sides sign it.

    POST /heads   HeadsRequest  -> 200 HeadsAnswer | 4xx/5xx ErrorBody
    GET  /health  -> {"agent": AGENT}           (unauthenticated; says nothing about heads)

Signatures are HMAC-SHA256 over a purpose line and the canonical JSON (sorted keys, no spaces) of
every field except `sig`. The purpose line keeps a signed request from passing as an answer.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from planfence.shared_memory import canonical_json

MAX_KEYS = 4096
REQUEST_PURPOSE = b"planfence-heads-request/1\n"
ANSWER_PURPOSE = b"planfence-heads-answer/1\n"

_AGENT = r"^[A-Za-z0-9_][A-Za-z0-9_.\-:@]*$"
_NONCE = r"^[0-9a-f]{32}$"
_SIG = r"^[0-9a-f]{64}$"


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
    sig: str = Field(pattern=_SIG, description="HMAC-SHA256 with the requester's secret")


class HeadsAnswer(_Wire):
    """An owner's signed answer: a head (or null: no version yet) per key it owns."""

    agent: str = Field(pattern=_AGENT, max_length=200)
    nonce: str = Field(pattern=_NONCE)
    heads: dict[str, str | None]
    not_owned: list[str]
    at: int = Field(ge=0, description="milliseconds since the Unix epoch, owner's clock")
    sig: str = Field(pattern=_SIG, description="HMAC-SHA256 with the owner's secret")


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


def signed_request(
    secret: bytes, *, requester: str, owner: str, keys: list[str], nonce: str, at: int
) -> HeadsRequest:
    fields: dict[str, Any] = {
        "requester": requester,
        "owner": owner,
        "keys": keys,
        "nonce": nonce,
        "at": at,
    }
    return HeadsRequest(**fields, sig=signature(secret, REQUEST_PURPOSE, fields))


def signed_answer(
    secret: bytes,
    *,
    agent: str,
    nonce: str,
    heads: dict[str, str | None],
    not_owned: list[str],
    at: int,
) -> HeadsAnswer:
    fields: dict[str, Any] = {
        "agent": agent,
        "nonce": nonce,
        "heads": heads,
        "not_owned": not_owned,
        "at": at,
    }
    return HeadsAnswer(**fields, sig=signature(secret, ANSWER_PURPOSE, fields))


def verify(message: HeadsRequest | HeadsAnswer, secret: bytes) -> bool:
    purpose = REQUEST_PURPOSE if isinstance(message, HeadsRequest) else ANSWER_PURPOSE
    expected = signature(secret, purpose, message.signed_fields())
    return hmac.compare_digest(expected, message.sig)
