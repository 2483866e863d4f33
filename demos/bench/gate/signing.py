"""What signing costs per check: the requester signs, the owner verifies, the owner signs its
answer, the requester verifies it. Ed25519 keys (JWS) vs the deprecated shared secrets (HMAC),
interleaved, on the same request and answer."""

from __future__ import annotations

import time
import warnings
from typing import Any

from planfence.adapters.owner_service import (
    Keyring,
    PublicKeyring,
    SigningKey,
    signed_answer,
    signed_request,
    verify,
)
from planfence.adapters.owner_service.wire import new_nonce, now_ms

from ..harness import percentile

KEYS = [f"lat/k{i:03d}" for i in range(4)]


def _round_trip(
    sign_as: tuple[Any, Any], check: Any, heads: dict[str, str | None], agents: tuple[str, str]
) -> None:
    requester, owner = sign_as
    request = signed_request(
        requester, requester=agents[0], owner=agents[1], keys=KEYS, nonce=new_nonce(), at=now_ms()
    )
    if not verify(request, check):
        raise RuntimeError("benchmark request did not verify")
    epochs = dict.fromkeys(heads, 1)
    answer = signed_answer(
        owner,
        agent=agents[1],
        nonce=request.nonce,
        heads=heads,
        epochs=epochs,
        not_owned=[],
        at=now_ms(),
    )
    if not verify(answer, check):
        raise RuntimeError("benchmark answer did not verify")


def signing_rows(repeat: int) -> list[dict[str, Any]]:
    agents = ("executor", "planner")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # measured on purpose
        shared = Keyring({a: f"{a}-secret-0123456789abcdef" for a in agents})
    keys = {a: SigningKey.generate(a) for a in agents}
    ring = PublicKeyring({"keys": [k.public_jwk() for k in keys.values()]})
    heads: dict[str, str | None] = {k: "ab" * 32 for k in KEYS}
    paths = {
        "hmac": ((shared[agents[0]], shared[agents[1]]), shared),
        "ed25519": ((keys[agents[0]], keys[agents[1]]), ring),
    }
    samples: dict[str, list[float]] = {name: [] for name in paths}
    for i in range(repeat * 4):
        for name in sorted(paths, reverse=bool(i % 2)):
            sign_as, check = paths[name]
            t0 = time.perf_counter()
            _round_trip(sign_as, check, heads, agents)
            samples[name].append(time.perf_counter() - t0)
    hmac_us = percentile(samples["hmac"], 50) * 1e6
    ed_us = percentile(samples["ed25519"], 50) * 1e6
    return [
        {
            "keys": len(KEYS),
            "hmac_p50_us": round(hmac_us, 1),
            "ed25519_p50_us": round(ed_us, 1),
            "added_us": round(ed_us - hmac_us, 1),
            "ratio_p50": round(ed_us / hmac_us, 2) if hmac_us > 0 else None,
        }
    ]
