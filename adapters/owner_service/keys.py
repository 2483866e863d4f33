"""Ed25519 keys: each agent signs with its own private key; verifiers hold only public keys.

Formats are standard, so other tools can read them:

- a private key is a JSON Web Key (RFC 8037: `{"kty": "OKP", "crv": "Ed25519", "x", "d", "kid"}`),
  in a file only its agent can read;
- a keyring is a JWK Set (`{"keys": [...]}`) of public keys. A key id names its agent and the key:
  `planner/3f9c0a1b2d4e5f60` (agent ids cannot contain `/`). An agent may have several keys at
  once, so a key can rotate without downtime: add the new one, move the signer, retire the old;
- a signature is a JWS in compact serialization with a detached payload (RFC 7515 §7.2.2 and
  Appendix F): `BASE64URL(header)..BASE64URL(signature)`, `alg` `EdDSA`, `typ` naming what is
  signed (a heads request or answer), over the canonical JSON of the message.

A verifier holding the keyring can check every agent's signatures but forge none.

A key may carry `"role": "gate"` (`planfence keys generate --gate`): its agent is a gate, whose
signature on a fencing token a tool trusts. A keyring names its gates this way; an agent's keys
are all gate keys or none (so an executor's key never passes for a gate's).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from planfence.shared_memory import InvalidKeyError
from planfence.shared_memory.records import canonical_json, validate_agent

from .keyring import KEYRING_ENV, Keyring, KeyringError
from .wire import Signer, Verifier

ALG = "EdDSA"
MAX_HEADER_BYTES = 1024
GATE_ROLE = "gate"
"""The `role` of a gate's key: its agent signs fencing tokens."""
ROLES = frozenset({GATE_ROLE})


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes:
    if not text or any(c not in _B64URL for c in text):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_B64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def key_id(agent: str, public: bytes) -> str:
    """`agent/` and the first 16 hex digits of the SHA-256 of the raw public key."""
    return f"{agent}/{hashlib.sha256(public).hexdigest()[:16]}"


def agent_of(kid: str) -> str:
    return kid.split("/", 1)[0]


def _signing_input(header: Mapping[str, Any], fields: Mapping[str, Any]) -> tuple[str, bytes]:
    head = b64url(json.dumps(header, sort_keys=True, separators=(",", ":")).encode())
    payload = b64url(canonical_json(dict(fields)).encode("utf-8"))
    return head, f"{head}.{payload}".encode("ascii")


class SigningKey:
    """One agent's Ed25519 private key and its key id. Never shown in `repr`."""

    def __init__(
        self,
        agent: str,
        key: Ed25519PrivateKey,
        *,
        source: str = "<code>",
        role: str | None = None,
    ) -> None:
        try:
            validate_agent(agent)
        except InvalidKeyError as exc:
            raise KeyringError(f"{source}: {exc}") from None
        if role is not None and role not in ROLES:
            raise KeyringError(f"{source}: unknown key role {role!r} (only {GATE_ROLE!r})")
        self.agent = agent
        self.role = role
        self._key = key
        self.public = key.public_key().public_bytes_raw()
        self.kid = key_id(agent, self.public)
        self.source = source

    def __repr__(self) -> str:
        return f"SigningKey({self.kid!r})"

    @property
    def is_gate(self) -> bool:
        """A gate's key (`role` "gate"): what it signs includes fencing tokens tools trust."""
        return self.role == GATE_ROLE

    @classmethod
    def generate(cls, agent: str, *, role: str | None = None) -> SigningKey:
        return cls(agent, Ed25519PrivateKey.generate(), role=role)

    def sign(self, typ: str, fields: Mapping[str, Any]) -> str:
        """A detached compact JWS of `fields` (canonical JSON), typed `typ`."""
        head, message = _signing_input({"alg": ALG, "kid": self.kid, "typ": typ}, fields)
        return f"{head}..{b64url(self._key.sign(message))}"

    def public_jwk(self) -> dict[str, str]:
        jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64url(self.public), "kid": self.kid}
        if self.role is not None:
            jwk["role"] = self.role
        return jwk

    def private_jwk(self) -> dict[str, str]:
        return {**self.public_jwk(), "d": b64url(self._key.private_bytes_raw())}

    @classmethod
    def from_jwk(cls, jwk: Mapping[str, Any], *, source: str = "<jwk>") -> SigningKey:
        if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519" or "d" not in jwk:
            raise KeyringError(f"{source}: not an Ed25519 private key (kty OKP, crv Ed25519, d)")
        try:
            key = Ed25519PrivateKey.from_private_bytes(unb64url(str(jwk["d"])))
        except ValueError as exc:
            raise KeyringError(f"{source}: unreadable private key: {exc}") from None
        kid = str(jwk.get("kid", ""))
        role = jwk.get("role")
        if role is not None and not isinstance(role, str):
            raise KeyringError(f"{source}: a key's role is a string")
        signing = cls(agent_of(kid), key, source=source, role=role)
        if signing.kid != kid:
            raise KeyringError(f"{source}: kid {kid!r} does not match the key ({signing.kid})")
        return signing

    @classmethod
    def load(cls, path: str | Path) -> SigningKey:
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except OSError as exc:
            raise KeyringError(f"cannot read signing key {p}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise KeyringError(f"{p}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
        if not isinstance(data, dict):
            raise KeyringError(f"{p}: a signing key is one JSON Web Key object")
        return cls.from_jwk(data, source=str(p))

    def save(self, path: str | Path) -> None:
        """Write the private JWK, readable by its owner only (mode 0600, never widened)."""
        p = Path(path)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(self.private_jwk(), f, indent=2)
            f.write("\n")


class PublicKeyring(Mapping[str, Ed25519PublicKey]):
    """Key id -> public key, for every agent whose signatures this process checks."""

    def __init__(self, jwks: Mapping[str, Any], *, source: str = "<code>") -> None:
        self.source = source
        keys = jwks.get("keys")
        if not isinstance(keys, list):
            raise KeyringError(f'{source}: a public keyring is a JWK Set: {{"keys": [...]}}')
        found: dict[str, Ed25519PublicKey] = {}
        roles: dict[str, str | None] = {}
        for i, jwk in enumerate(keys):
            where = f"{source}: key {i + 1}"
            if not isinstance(jwk, dict) or jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
                raise KeyringError(f"{where}: only Ed25519 keys (kty OKP, crv Ed25519)")
            if "d" in jwk:
                raise KeyringError(f"{where}: holds a private key; a keyring holds public keys")
            try:
                raw = unb64url(str(jwk.get("x", "")))
                public = Ed25519PublicKey.from_public_bytes(raw)
            except ValueError as exc:
                raise KeyringError(f"{where}: unreadable public key: {exc}") from None
            kid = str(jwk.get("kid", ""))
            try:
                validate_agent(agent_of(kid))
            except InvalidKeyError:
                raise KeyringError(
                    f"{where}: kid {kid!r} does not start with an agent id"
                ) from None
            if key_id(agent_of(kid), raw) != kid:
                raise KeyringError(f"{where}: kid {kid!r} does not match its key")
            role = jwk.get("role")
            if role is not None and role not in ROLES:
                raise KeyringError(f"{where}: unknown key role {role!r} (only {GATE_ROLE!r})")
            agent = agent_of(kid)
            if any(agent_of(k) == agent and r != role for k, r in roles.items()):
                raise KeyringError(
                    f"{where}: {agent!r} has gate and non-gate keys; an agent's keys are all "
                    "gate keys or none"
                )
            found[kid] = public
            roles[kid] = role
        self._keys = found
        self._roles = roles

    def __getitem__(self, kid: str) -> Ed25519PublicKey:
        return self._keys[kid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"PublicKeyring({sorted(self._keys)!r}, source={self.source!r})"

    @property
    def agents(self) -> frozenset[str]:
        return frozenset(agent_of(k) for k in self._keys)

    @property
    def gates(self) -> frozenset[str]:
        """The agents whose keys this keyring marks as gate keys (`"role": "gate"`)."""
        return frozenset(agent_of(k) for k, r in self._roles.items() if r == GATE_ROLE)

    def can_verify(self, agent: str) -> bool:
        return agent in self.agents

    def verify(self, agent: str, typ: str, fields: Mapping[str, Any], sig: str) -> bool:
        """True when `sig` is a detached JWS of `fields`, typed `typ`, by one of `agent`'s keys."""
        head, dot, tail = sig.partition("..")
        if not dot or len(head) > MAX_HEADER_BYTES:
            return False
        try:
            header = json.loads(unb64url(head))
            signature = unb64url(tail)
        except (ValueError, binascii.Error):
            return False
        if not isinstance(header, dict) or set(header) != {"alg", "kid", "typ"}:
            return False  # no `b64`, `crit`, `jwk` or `x5u`: nothing that changes the rules
        kid = header.get("kid")
        if header.get("alg") != ALG or header.get("typ") != typ or not isinstance(kid, str):
            return False
        key = self._keys.get(kid)
        if key is None or agent_of(kid) != agent:
            return False
        canonical, message = _signing_input(header, fields)
        if canonical != head:
            return False  # only the canonical header that signing produces is accepted
        try:
            key.verify(signature, message)
        except InvalidSignature:
            return False
        return True

    @classmethod
    def parse(cls, text: str, *, source: str = "<keyring>") -> PublicKeyring:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise KeyringError(f"{source}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
        if not isinstance(data, dict):
            raise KeyringError(f'{source}: a public keyring is a JWK Set: {{"keys": [...]}}')
        return cls(data, source=source)

    def to_jwks(self) -> dict[str, Any]:
        keys: list[dict[str, str]] = []
        for kid, k in sorted(self._keys.items()):
            jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64url(k.public_bytes_raw()), "kid": kid}
            role = self._roles.get(kid)
            if role is not None:
                jwk["role"] = role
            keys.append(jwk)
        return {"keys": keys}


def add_public_key(keyring_path: str | Path, signing: SigningKey) -> PublicKeyring:
    """Add `signing`'s public key to the JWK Set at `keyring_path` (created when missing); the
    agent's other keys stay, so both verify until the old one is retired."""
    p = Path(keyring_path)
    jwks: dict[str, Any] = {"keys": []}
    if p.exists():
        jwks = PublicKeyring.parse(p.read_text(encoding="utf-8"), source=str(p)).to_jwks()
    if all(k["kid"] != signing.kid for k in jwks["keys"]):
        jwks["keys"].append(signing.public_jwk())
    ring = PublicKeyring(jwks, source=str(p))
    save_keyring(p, ring)
    return ring


def retire_key(keyring_path: str | Path, kid: str) -> PublicKeyring:
    """Remove `kid` from the JWK Set at `keyring_path`; its signatures stop verifying."""
    p = Path(keyring_path)
    try:
        ring = PublicKeyring.parse(p.read_text(encoding="utf-8"), source=str(p))
    except OSError as exc:
        raise KeyringError(f"cannot read keyring {p}: {exc.strerror}") from None
    if kid not in ring:
        raise KeyringError(f"{p}: no key {kid!r} (it holds {', '.join(sorted(ring))})")
    jwks = ring.to_jwks()
    jwks["keys"] = [k for k in jwks["keys"] if k["kid"] != kid]
    kept = PublicKeyring(jwks, source=str(p))
    save_keyring(p, kept)
    return kept


def save_keyring(path: Path, ring: PublicKeyring) -> None:
    """Replace the file at `path` with `ring` in one rename (readers never see half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(ring.to_jwks(), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def own_signer(
    keyring: Verifier, agent: str, signing_key: SigningKey | None, *, role: str
) -> Signer:
    """How `agent` signs: its Ed25519 key, or (deprecated) its secret in a shared keyring.

    Raises:
        KeyringError: the key belongs to another agent, or there is nothing to sign with.
    """
    if signing_key is not None:
        if signing_key.agent != agent:
            raise KeyringError(
                f"{signing_key.source}: key {signing_key.kid!r} is not the {role} {agent!r}'s"
            )
        return signing_key
    if isinstance(keyring, Keyring) and agent in keyring:
        return keyring.signer(agent)
    raise KeyringError(
        f"{keyring.source}: no secret for the {role} agent {agent!r}, and no signing key "
        "(give it an Ed25519 key: signing_key=, or --signing-key FILE)"
    )


def parse_keyring(text: str, *, source: str = "<keyring>") -> Keyring | PublicKeyring:
    """A public keyring (a JWK Set: JSON with a `keys` list) or a shared-secret keyring."""
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("keys"), list):
            return PublicKeyring(data, source=source)
    return Keyring.parse(text, source=source)


def load_keyring(path: str | Path | None = None) -> Keyring | PublicKeyring:
    """The keyring at `path`, else from $PLANFENCE_KEYRING (a path or inline JSON): Ed25519
    public keys (a JWK Set), or shared secrets (deprecated).

    Raises:
        KeyringError: none configured, unreadable, or malformed.
    """
    if path is None:
        env = os.environ.get(KEYRING_ENV, "")
        if not env:
            raise KeyringError(f"no keyring: pass --keyring FILE or set ${KEYRING_ENV}")
        if env.lstrip().startswith("{"):
            return parse_keyring(env, source=f"${KEYRING_ENV}")
        path = env
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise KeyringError(f"cannot read keyring {p}: {exc.strerror}") from None
    return parse_keyring(text, source=str(p))
