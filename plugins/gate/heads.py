"""Where the gate gets `H(x)`: a protocol, and the store-backed default.

A head source answers for the owners of the keys in D(a) only. Other sources (the HTTP owner
services in `planfence.adapters.owner_service`) implement the same protocol.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from .decision import HeadAnswer


@runtime_checkable
class HeadSource(Protocol):
    """Ask owners for the current heads of their keys.

    `owners` maps each owner agent to the keys it must answer for. The answer maps each key to a
    `HeadAnswer`; a missing key, or an answer with `error`, blocks the action.

    A source whose every answer it has verified to be signed by the owner asked says so with a
    true `signed_by_owners` attribute; a gate that does not trust the store (`verify_heads`)
    checks the heads of any other source against the owners' signed heads in the store.
    """

    async def heads(self, owners: Mapping[str, tuple[str, ...]]) -> Mapping[str, HeadAnswer]: ...

    async def aclose(self) -> None: ...
