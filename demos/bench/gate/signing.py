"""What signing costs per check (4 keys), the deprecated shared secrets (HMAC) beside Ed25519 keys
(JWS), interleaved, on the same messages:

- `owner_answer`: the requester signs its heads request, the owner verifies it, the owner signs
  its answer, the requester verifies it;
- `store_heads_first`: a gate that does not trust the store (`Gate(verify_heads=...)`) checks
  the owner's signature of every head it read from the store (`SignedHeads`) and the signed
  claim that assigned the key its owner (`OwnerChains`), each key seen for the first time;
- `store_heads_remembered`: the same heads again; a head this gate already verified is taken
  as it is (a comparison with the one it remembers, no signature check);
- `owner_chain_first`: keys handed over twice (epoch 3), seen for the first time: the chain of
  three ownership claims read from the feed is verified, then the head; once remembered, such a
  key costs what `store_heads_remembered` does.

The signed heads are written to an in-memory store by their owner and read back, as the gate
reads them (the feed's owner changes too); only the verification is timed.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from planfence.adapters.owner_service import Keyring, PublicKeyring, SigningKey, verify
from planfence.adapters.owner_service.wire import new_nonce, now_ms, signed_answer, signed_request
from planfence.demos.bench.harness.stats import percentile
from planfence.plugins.gate.store_heads import SignedHeads, untrusted_store
from planfence.shared_memory import Change, GetOwnerChanges, KeyState, WriteBatch, open_async_store
from planfence.shared_memory.batches import TransferOwner
from planfence.shared_memory.signing import HeadSigner, HeadVerifier

KEYS = [f"lat/k{i:03d}" for i in range(4)]
AGENTS = ("executor", "planner")  # the requester, and the owner of every key
PATHS = ("hmac", "ed25519")
ROWS = ("owner_answer", "store_heads_first", "store_heads_remembered", "owner_chain_first")
Chains = list[tuple[KeyState, list[Change]]]


def _round_trip(sign_as: tuple[Any, Any], check: Any, heads: dict[str, str | None]) -> None:
    requester, owner = sign_as
    request = signed_request(
        requester, requester=AGENTS[0], owner=AGENTS[1], keys=KEYS, nonce=new_nonce(), at=now_ms()
    )
    if not verify(request, check):
        raise RuntimeError("benchmark request did not verify")
    epochs = dict.fromkeys(heads, 1)
    answer = signed_answer(
        owner,
        agent=AGENTS[1],
        nonce=request.nonce,
        heads=heads,
        epochs=epochs,
        not_owned=[],
        at=now_ms(),
    )
    if not verify(answer, check):
        raise RuntimeError("benchmark answer did not verify")


def _verify_all(signed: SignedHeads, states: list[KeyState]) -> None:
    for state in states:
        if signed.answer(state).error:
            raise RuntimeError(f"benchmark head of {state.key} did not verify")


def _untrusting(verifier: HeadVerifier) -> SignedHeads:
    signed = untrusted_store(verifier, {AGENTS[1]})  # the owner assigned its keys itself
    assert signed is not None
    return signed


def _prove_all(verifier: HeadVerifier, chains: Chains) -> None:
    """A fresh gate: each key's ownership chain from the feed, then its head."""
    signed = _untrusting(verifier)
    assert signed.owners is not None
    for state, changes in chains:
        if signed.owners.learn(state, changes) or signed.answer(state).error:
            raise RuntimeError(f"benchmark owners of {state.key} did not verify")


async def _signed_states(signers: Mapping[str, HeadSigner]) -> tuple[list[KeyState], Chains]:
    """The owner writes a version of each key, signed inside the write; the heads read back;
    then each key goes to the requester and back (signed), and its chain is read from the feed."""
    owner, other = signers[AGENTS[1]], signers[AGENTS[0]]
    store = await open_async_store("memory://")
    try:
        store.signer = owner
        for key in KEYS:
            await store.own(key, owner.agent)
            await store.put(key, {"key": key}, author=owner.agent)
        states = await store.states(KEYS)
        for key in KEYS:
            await store.write(WriteBatch(ops=(TransferOwner(key, other.agent, owner.agent),)))
            away = TransferOwner(key, owner.agent, other.agent)
            await store.write(WriteBatch(ops=(away,), signer=other))
            await store.put(key, {"key": key, "back": True}, author=owner.agent)
        moved = await store.states(KEYS)
        feed = await store.read([GetOwnerChanges(k, 0) for k in KEYS])
    finally:
        await store.aclose()
    return [states[k] for k in KEYS], [(moved[k], list(c)) for k, c in zip(KEYS, feed, strict=True)]


def _row(what: str, samples: Mapping[str, list[float]]) -> dict[str, Any]:
    hmac_us = percentile(samples["hmac"], 50) * 1e6
    ed_us = percentile(samples["ed25519"], 50) * 1e6
    return {
        "what": what,
        "keys": len(KEYS),
        "hmac_p50_us": round(hmac_us, 1),
        "ed25519_p50_us": round(ed_us, 1),
        "added_us": round(ed_us - hmac_us, 1) + 0.0,  # never -0.0
        "ratio_p50": round(ed_us / hmac_us, 2) if hmac_us > 0 else None,
    }


async def signing_rows(repeat: int) -> list[dict[str, Any]]:
    """One row per entry of `ROWS`, each measured `4 * repeat` times per path."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # measured on purpose
        shared = Keyring({a: f"{a}-secret-0123456789abcdef" for a in AGENTS})
    keys = {a: SigningKey.generate(a) for a in AGENTS}
    ring = PublicKeyring({"keys": [k.public_jwk() for k in keys.values()]})
    heads: dict[str, str | None] = {k: "ab" * 32 for k in KEYS}
    answer_as = {
        "hmac": ((shared.signer(AGENTS[0]), shared.signer(AGENTS[1])), shared),
        "ed25519": ((keys[AGENTS[0]], keys[AGENTS[1]]), ring),
    }
    verifiers: dict[str, HeadVerifier] = {"hmac": shared, "ed25519": ring}
    written = {
        "hmac": await _signed_states({a: shared.signer(a) for a in AGENTS}),
        "ed25519": await _signed_states(keys),
    }
    states = {p: written[p][0] for p in PATHS}
    chains = {p: written[p][1] for p in PATHS}
    remembered = {p: _untrusting(verifiers[p]) for p in PATHS}
    for p in PATHS:
        _verify_all(remembered[p], states[p])  # untimed: the first sight

    def answer(p: str) -> None:
        _round_trip(answer_as[p][0], answer_as[p][1], heads)

    def first(p: str) -> None:
        _verify_all(_untrusting(verifiers[p]), states[p])

    def chain(p: str) -> None:
        _prove_all(verifiers[p], chains[p])

    def again(p: str) -> None:
        _verify_all(remembered[p], states[p])

    timed: dict[str, Callable[[str], None]] = {
        "owner_answer": answer,
        "store_heads_first": first,
        "store_heads_remembered": again,
        "owner_chain_first": chain,
    }
    samples: dict[str, dict[str, list[float]]] = {w: {p: [] for p in PATHS} for w in ROWS}
    for i in range(repeat * 4):
        for what in ROWS:
            for p in sorted(PATHS, reverse=bool(i % 2)):
                t0 = time.perf_counter()
                timed[what](p)
                samples[what][p].append(time.perf_counter() - t0)
    return [_row(what, samples[what]) for what in ROWS]
