"""Keyrings: who may ask an owner for heads, and whose answers can be trusted.

The recommended keyring holds Ed25519 public keys (a JWK Set, see `keys`): each agent signs with
its own private key, and whoever holds the keyring can verify but not forge. `load_keyring` reads
either kind.

The older kind, deprecated, maps agent ids to shared secrets, in TOML or JSON:

    # keyring.toml
    planner  = "a long random secret, 16 characters or more"
    executor = "another one"

An agent signs with its own secret; whoever verifies its messages needs the same entry, and so
could also forge them. Keep such a file readable only by the processes that run those agents.
"""

from __future__ import annotations

import hmac
import json
import sys
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planfence.shared_memory import ConfigError, InvalidKeyError
from planfence.shared_memory.records import validate_agent

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

if TYPE_CHECKING:
    from .wire import HmacSigner

KEYRING_ENV = "PLANFENCE_KEYRING"
"""A keyring file path, or the keyring itself as inline JSON (text starting with `{`)."""

MIN_SECRET_LENGTH = 16
HMAC_DEPRECATED = (
    "HMAC keyrings are deprecated: whoever can verify an agent's answers can also forge them. "
    "Give each agent an Ed25519 key (planfence keys generate --agent NAME --out DIR) and share "
    "only the public keyring; shared secrets keep working for this release."
)


class KeyringError(ConfigError):
    """A keyring that cannot be loaded or used."""


class Keyring(Mapping[str, bytes]):
    """Agent id -> shared secret (deprecated; see `PublicKeyring`). Immutable; secrets never
    appear in `repr`."""

    def __init__(self, secrets: Mapping[str, str | bytes], *, source: str = "<code>") -> None:
        warnings.warn(HMAC_DEPRECATED, DeprecationWarning, stacklevel=2)
        self.source = source
        checked: dict[str, bytes] = {}
        for agent, secret in secrets.items():
            try:
                validate_agent(agent)
            except InvalidKeyError as exc:
                raise KeyringError(f"{source}: {exc}") from None
            if isinstance(secret, str):
                secret = secret.encode("utf-8")
            if not isinstance(secret, bytes):
                raise KeyringError(f"{source}: the secret of {agent!r} must be a string")
            if len(secret) < MIN_SECRET_LENGTH:
                raise KeyringError(
                    f"{source}: the secret of {agent!r} is shorter than {MIN_SECRET_LENGTH} bytes"
                )
            checked[agent] = secret
        self._secrets = checked

    def __getitem__(self, agent: str) -> bytes:
        return self._secrets[agent]

    def __iter__(self) -> Iterator[str]:
        return iter(self._secrets)

    def __len__(self) -> int:
        return len(self._secrets)

    def __repr__(self) -> str:
        return f"Keyring({sorted(self._secrets)!r}, source={self.source!r})"

    def signer(self, agent: str) -> HmacSigner:
        from .wire import HmacSigner

        return HmacSigner(agent, self._secrets[agent])

    def can_verify(self, agent: str) -> bool:
        return agent in self._secrets

    def verify(self, agent: str, typ: str, fields: Mapping[str, Any], sig: str) -> bool:
        from .wire import signature

        secret = self._secrets.get(agent)
        if secret is None:
            return False
        return hmac.compare_digest(signature(secret, typ.encode() + b"\n", dict(fields)), sig)

    @classmethod
    def parse(cls, text: str, *, source: str = "<keyring>") -> Keyring:
        """Read a keyring from TOML or JSON text (JSON when it starts with `{`)."""
        data: object
        if text.lstrip().startswith("{"):
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise KeyringError(
                    f"{source}: invalid JSON at line {exc.lineno}: {exc.msg}"
                ) from None
        else:
            try:
                data = tomllib.loads(text)
            except tomllib.TOMLDecodeError as exc:
                raise KeyringError(f"{source}: invalid TOML: {exc}") from None
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise KeyringError(f'{source}: a keyring maps agent ids to secrets: agent = "secret"')
        return cls(data, source=source)

    @classmethod
    def load(cls, path: str | Path) -> Keyring:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise KeyringError(f"cannot read keyring {p}: {exc.strerror}") from None
        return cls.parse(text, source=str(p))
