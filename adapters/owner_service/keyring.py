"""Per-agent shared secrets: who may ask an owner for heads, and whose answers can be trusted.

A keyring maps agent ids to secrets, in TOML or JSON:

    # keyring.toml
    planner  = "a long random secret, 16 characters or more"
    executor = "another one"

An agent signs with its own secret; whoever verifies its messages needs the same entry. Keep the
file readable only by the processes that run those agents.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from planfence.shared_memory import ConfigError, InvalidKeyError, validate_agent

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

KEYRING_ENV = "PLANFENCE_KEYRING"
"""A keyring file path, or the keyring itself as inline JSON (text starting with `{`)."""

MIN_SECRET_LENGTH = 16


class KeyringError(ConfigError):
    """A keyring that cannot be loaded or used."""


class Keyring(Mapping[str, bytes]):
    """Agent id -> secret bytes. Immutable; secrets never appear in `repr`."""

    def __init__(self, secrets: Mapping[str, str | bytes], *, source: str = "<code>") -> None:
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


def load_keyring(path: str | Path | None = None) -> Keyring:
    """The keyring at `path`, else from $PLANFENCE_KEYRING (a path or inline JSON).

    Raises:
        KeyringError: none configured, unreadable, or malformed.
    """
    if path is not None:
        return Keyring.load(path)
    env = os.environ.get(KEYRING_ENV, "")
    if not env:
        raise KeyringError(f"no keyring: pass --keyring FILE or set ${KEYRING_ENV}")
    if env.lstrip().startswith("{"):
        return Keyring.parse(env, source=f"${KEYRING_ENV}")
    return Keyring.load(env)
