"""Digests of the values a call was made with, so the audit can say where they came from.

The gate trusts a tool's declared scope D(a). When an argument's value was read from a record
whose key is not in D(a), a change to that record cannot stop the call. To find such flows
without storing the arguments themselves, the audit keeps a short keyed digest of each scalar
value (by its path in the arguments), and the scope lint digests the values of the records in a
plan's lineage the same way: equal digests mean equal values.

Every scalar argument is digested (so a key segment such as an order number can be matched to
the argument that filled it), but only meaningful record values count as a flow: booleans, null,
numbers between -10 and 10 and strings under 3 characters match everything and prove nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

MAX_LEAVES = 64
MAX_DEPTH = 6
_SALT = b"planfence-value/1\n"


def _normal(value: Any) -> str:
    """Values compare as text: the argument "7" and the number 7 are the same value."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


def meaningful(value: Any) -> bool:
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, int | float):
        return abs(value) >= 10
    return isinstance(value, str) and len(value.strip()) >= 3


def scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def leaves(
    value: Any, keep: Callable[[Any], bool] = meaningful, path: str = "", depth: int = 0
) -> Iterator[tuple[str, Any]]:
    """(path, scalar) pairs of a JSON value that `keep` accepts, depth-first, paths like
    `items.0.sku`."""
    if depth > MAX_DEPTH:
        return
    if isinstance(value, Mapping):
        for k in sorted(value, key=str):
            yield from leaves(value[k], keep, f"{path}.{k}" if path else str(k), depth + 1)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from leaves(item, keep, f"{path}.{i}" if path else str(i), depth + 1)
    elif keep(value):
        yield path, value


def digest(value: Any) -> str:
    """A short digest of a scalar's text form (see `_normal`)."""
    return hashlib.sha256(_SALT + _normal(value).encode("utf-8")).hexdigest()[:20]


def value_digests(args: Mapping[str, Any]) -> dict[str, str]:
    """Argument path -> digest of its value, for the first `MAX_LEAVES` scalars."""
    out: dict[str, str] = {}
    if not args:
        return out
    for path, value in leaves(dict(args), scalar):
        if len(out) >= MAX_LEAVES:
            break
        out[path] = digest(value)
    return out
