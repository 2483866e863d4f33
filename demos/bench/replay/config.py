"""What a replay run is set up with: the team (owners, executor replicas, their secrets) and the
settings from the command line."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planfence.adapters.owner_service import Keyring

from ..netem import Trace
from .executors import EXECUTORS
from .schedule import LATE_SHARE

PATHS = ("loopback", "att")
DEFAULT_OWNERS = 4
DEFAULT_ACTIONS = 10
QUICK_ACTIONS = 4
DEFAULT_VALUE_BYTES = 1024


@dataclass(frozen=True)
class Team:
    owners: tuple[str, ...]
    replicas: tuple[str, ...]
    secrets: Mapping[str, str]

    @property
    def keyring(self) -> Keyring:
        return Keyring(self.secrets, source="<replay>")


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
