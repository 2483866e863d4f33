"""Owner services: each owner agent says, over HTTP, which version of each of its keys is current.

Server (one per owner agent; reads heads from the shared store):

    planfence serve-owner --agent planner --store sqlite:///team.db --port 8701 --keyring keys.toml

Client (the gate's head source; one request per owner, in parallel):

    heads = HttpOwnerHeads({"planner": "http://127.0.0.1:8701"}, load_keyring(), agent="executor")
    gate = Gate(store, policy, heads=heads)

Authentication, with per-agent shared secrets from a keyring (`keyring.py`: a TOML or JSON file
mapping agent -> secret, or $PLANFENCE_KEYRING holding a path or inline JSON):

- The requester signs `{requester, owner, keys, nonce, at}` with its own secret (HMAC-SHA256
  over canonical JSON, `wire.py`); `nonce` is 128 fresh random bits, `at` its clock in ms.
- The owner service refuses (401/403) an unknown requester, a bad signature, a request addressed
  to another owner, a timestamp more than `--max-skew` seconds off, and a nonce it already saw.
- The owner answers `{agent, nonce, heads, not_owned, at}` signed with its own secret. The client
  accepts it only if `agent` is the owner it asked, the signature verifies with that owner's
  secret, the nonce is the one it sent, `at` is within the skew window, and every key it asked
  is in `heads` (a key in `not_owned`, or missing, is not answered).

Anything else (no address, connection refused, no complete answer within the timeout, a non-200
status, an unparsable body) yields `HeadAnswer(error="owner_unreachable" | "owner_unauthenticated")`
for that owner's keys, and the gate blocks. What is not protected: confidentiality (use TLS or a
private network), and a holder of an agent's secret can speak as that agent (owners are trusted,
as in the PlanFence model).
"""

from .client import HttpOwnerHeads
from .keyring import KEYRING_ENV, Keyring, KeyringError, load_keyring
from .server import NonceCache, create_app
from .wire import ErrorBody, HeadsAnswer, HeadsRequest, signed_answer, signed_request, verify

__all__ = [
    "KEYRING_ENV",
    "ErrorBody",
    "HeadsAnswer",
    "HeadsRequest",
    "HttpOwnerHeads",
    "Keyring",
    "KeyringError",
    "NonceCache",
    "create_app",
    "load_keyring",
    "signed_answer",
    "signed_request",
    "verify",
]
