"""What a replay run is set up with: the team (owners, executor replicas, their Ed25519 keys) and
the settings from the command line."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planfence.adapters.owner_service import PublicKeyring, SigningKey
from planfence.demos.bench.netem.trace import Trace

from .executors import EXECUTORS
from .schedule import LATE_SHARE

PATHS = ("loopback", "att")
DEFAULT_OWNERS = 4
DEFAULT_ACTIONS = 10
QUICK_ACTIONS = 4
DEFAULT_VALUE_BYTES = 1024


@dataclass(frozen=True)
class Team:
    """Every agent has its own Ed25519 key: owners sign their answers and their heads (inside
    each write), executors sign their head requests; everyone verifies with public keys."""

    owners: tuple[str, ...]
    replicas: tuple[str, ...]
    keys: Mapping[str, SigningKey]

    @classmethod
    def generate(cls, owners: tuple[str, ...], replicas: tuple[str, ...]) -> Team:
        return cls(owners, replicas, {a: SigningKey.generate(a) for a in (*owners, *replicas)})

    @property
    def keyring(self) -> PublicKeyring:
        """Every agent's public key (owner services and the executors' head sources)."""
        return self._ring(self.keys)

    @property
    def owner_keyring(self) -> PublicKeyring:
        """The owners' public keys: the only writers whose heads a replica takes."""
        return self._ring({a: self.keys[a] for a in self.owners})

    @property
    def owner_keys(self) -> dict[str, SigningKey]:
        return {a: self.keys[a] for a in self.owners}

    @staticmethod
    def _ring(keys: Mapping[str, SigningKey]) -> PublicKeyring:
        return PublicKeyring({"keys": [k.public_jwk() for k in keys.values()]}, source="<replay>")


@dataclass(frozen=True)
class Config:
    rates: tuple[float, ...]
    actions: int
    keys: int
    owners: int
    replicas: int
    value_bytes: int
    seed: int
    paths: tuple[str, ...]
    up: Trace | None
    down: Trace | None
    trace_kind: str | None
    delay_ms: float

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rates": list(self.rates),
            "actions": self.actions,
            "keys": self.keys,
            "owners": self.owners,
            "replicas": self.replicas,
            "value_bytes": self.value_bytes,
            "seed": self.seed,
            "paths": list(self.paths),
            "late_share": LATE_SHARE,
            "executors": list(EXECUTORS),
        }
        if self.up is not None and self.down is not None:
            out.update(
                trace_kind=self.trace_kind,
                trace_up=self.up.source,
                trace_down=self.down.source,
                trace_up_mean_mbps=round(self.up.mean_mbps, 3),
                trace_down_mean_mbps=round(self.down.mean_mbps, 3),
                delay_ms=self.delay_ms,
            )
        return out
