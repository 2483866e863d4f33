"""`planfence keys`: make an agent's Ed25519 key pair and keep the public keyring."""

from __future__ import annotations

import argparse
from pathlib import Path

from planfence.adapters.cli.common import UsageError, add_json_flag, emit, guarded

from .keys import GATE_ROLE, SigningKey, add_public_key, retire_key

KEYRING_FILE = "keyring.jwks"
GATES_FILE = "gates.jwks"
"""The gate keyring: only gates' public keys, what a tool verifies fencing tokens with."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("keys", help="make agents' signing keys and keep the public keyring")
    ksub = p.add_subparsers(dest="keys_command", metavar="COMMAND", required=True)

    g = ksub.add_parser(
        "generate",
        help="write a new Ed25519 key pair for an agent",
        description=(
            "Write AGENT's private key to DIR/AGENT.<id>.jwk (readable by you only) and add its "
            f"public key to DIR/{KEYRING_FILE}. Running it again for the same agent adds a second "
            "key (rotation): both verify until you retire the old one. With --gate, the key is "
            f"a gate's (it signs fencing tokens): it is marked so, and also added to "
            f"DIR/{GATES_FILE}, the keyring tools verify fencing tokens with."
        ),
    )
    g.add_argument("--agent", required=True, help="the agent the key signs as")
    g.add_argument(
        "--gate",
        action="store_true",
        help=f'the agent is a gate: mark its key "role": "gate" and add it to {GATES_FILE}',
    )
    g.add_argument("--out", required=True, metavar="DIR", help="folder for the key files")
    add_json_flag(g)
    g.set_defaults(handler=guarded(_generate))

    r = ksub.add_parser("retire", help="remove a key id from a public keyring")
    r.add_argument("kid", help="the key id, e.g. planner/3f9c0a1b2d4e5f60")
    r.add_argument("--keyring", required=True, metavar="FILE", help="the keyring (JWK Set)")
    add_json_flag(r)
    r.set_defaults(handler=guarded(_retire))


def _generate(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a folder")
    out.mkdir(parents=True, exist_ok=True)
    key = SigningKey.generate(args.agent, role=GATE_ROLE if args.gate else None)
    ring = add_public_key(out / KEYRING_FILE, key)  # refuses a gate key beside plain ones
    gates = add_public_key(out / GATES_FILE, key) if args.gate else None
    private = out / f"{args.agent}.{key.kid.split('/', 1)[1]}.jwk"
    key.save(private)
    data: dict[str, object] = {
        "agent": key.agent,
        "kid": key.kid,
        "role": key.role,
        "private_key": str(private),
        "keyring": str(out / KEYRING_FILE),
        "keyring_kids": sorted(ring),
    }
    text = (
        f"wrote {private} (private key of {key.agent}{', a gate' if args.gate else ''}, "
        f"mode 600)\nadded {key.kid} to {out / KEYRING_FILE} ({len(ring)} key(s))"
    )
    if gates is not None:
        data["gate_keyring"] = str(out / GATES_FILE)
        text += f"\nadded {key.kid} to {out / GATES_FILE} ({len(gates)} gate key(s))"
    emit(args, data, text)
    return 0


def _retire(args: argparse.Namespace) -> int:
    kept = retire_key(args.keyring, args.kid)
    emit(args, {"retired": args.kid, "keyring_kids": sorted(kept)}, f"retired {args.kid}")
    return 0
