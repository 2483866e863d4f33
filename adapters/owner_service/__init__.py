"""Owner services: each owner agent says, over HTTP, which version of each of its keys is current.

Keys (one Ed25519 key pair per agent; the keyring holds only public keys):

    planfence keys generate --agent planner --out keys/     # keys/planner.<id>.jwk + keyring.jwks

Server (one per owner agent; reads heads from the shared store; needs the `http` extra):

    planfence serve-owner --agent planner --store sqlite:///team.db --port 8701 \
        --keyring keys/keyring.jwks --signing-key keys/planner.<id>.jwk

Client (the gate's head source; one request per owner, in parallel):

    heads = HttpOwnerHeads({"planner": "http://127.0.0.1:8701"}, load_keyring("keys/keyring.jwks"),
                           agent="executor", signing_key=SigningKey.load("keys/executor.<id>.jwk"))
    gate = Gate(store, policy, heads=heads)

Authentication (`wire.py`, `keys.py`):

- The requester signs `{requester, owner, keys, nonce, at}` with its own key (a detached compact
  JWS, EdDSA, typed as a heads request); `nonce` is 128 fresh random bits, `at` its clock in ms.
- The owner service refuses (401/403) an unknown requester, a bad signature, a request addressed
  to another owner, a timestamp more than `--max-skew` seconds off, and a nonce it already saw.
- The owner answers `{agent, nonce, heads, not_owned, at}` signed with its own key, typed as an
  answer. The client accepts it only if `agent` is the owner it asked, the signature verifies
  with one of that owner's public keys, the nonce is the one it sent, `at` is within the skew
  window, and every key it asked is in `heads` (a key in `not_owned`, or missing, is not
  answered).

Anything else (no address, connection refused, no complete answer within the timeout, a non-200
status, an unparsable body) yields `HeadAnswer(error="owner_unreachable" | "owner_unauthenticated")`
for that owner's keys, and the gate blocks. What is not protected: confidentiality (use TLS or a
private network). Whoever holds the keyring can verify but not forge. Shared-secret keyrings
(agent = "secret", HMAC-SHA256) still work for this release, with a DeprecationWarning: with
them, every verifier can also forge.
"""

from __future__ import annotations

from .client import HttpOwnerHeads
from .keyring import Keyring, KeyringError
from .keys import PublicKeyring, SigningKey, load_keyring
from .wire import verify

__all__ = [
    "HttpOwnerHeads",
    "Keyring",
    "KeyringError",
    "PublicKeyring",
    "SigningKey",
    "load_keyring",
    "verify",
]
