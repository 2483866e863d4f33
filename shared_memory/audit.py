"""Bounds on what the audit journal stores.

Much of an entry comes from whoever the caller is serving: its subject, its labels, the strings
in its detail. An entry must still be recorded when they are huge, but not at any size: every
string is cut at `StoreLimits.max_audit_field_bytes` (UTF-8) with a marker
saying how much was left out, and a detail still over `max_audit_payload_bytes` keeps its
smallest entries and names the ones it left out.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import InvalidValueError
from .records import JSON, StoreLimits, canonical_json, canonical_json_of_str_keys

MAX_DEPTH = 32
OMITTED_KEY = "_truncated"


def truncate_text(text: str, max_bytes: int) -> str:
    """`text` cut to at most `max_bytes` UTF-8 bytes (on a character boundary), followed by
    `…[truncated N bytes]` when anything was cut."""
    if len(text) * 4 <= max_bytes:  # no character takes more than 4 bytes
        return text
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= max_bytes:
        return text
    kept = raw[:max_bytes].decode("utf-8", "ignore")  # drops a character cut in half
    dropped = len(raw) - len(kept.encode("utf-8", "surrogatepass"))
    return f"{kept}…[truncated {dropped} bytes]"


def _fits(value: JSON, max_chars: int) -> bool:
    """True when `bound_json` would return `value` unchanged and every object key is a string:
    no string (object keys too) longer than `max_chars` characters and no nesting deeper than
    `MAX_DEPTH`. Checking is cheaper than rebuilding, and an audit detail almost always fits;
    the walk is iterative and calls nothing per leaf, since it runs on every audited check."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is str:
            if len(item) > max_chars:
                return False
            continue
        if kind is dict:
            for k in item:
                if type(k) is not str or len(k) > max_chars:
                    return False
            children = item.values()
        elif kind is list or kind is tuple:
            children = item
        elif isinstance(item, str | dict | list | tuple):
            return False  # subclasses: take the long way
        else:
            continue
        if depth >= MAX_DEPTH:
            return False
        for child in children:
            if type(child) is str:
                if len(child) > max_chars:
                    return False
            else:
                stack.append((child, depth + 1))
    return True


def bound_json(value: JSON, max_bytes: int, depth: int = 0) -> JSON:
    """`value` with every string (object keys too) cut at `max_bytes`; nesting deeper than
    `MAX_DEPTH` is replaced by a marker."""
    if depth == 0 and _fits(value, max_bytes // 4):  # no character takes more than 4 bytes
        return value
    if isinstance(value, str):
        return truncate_text(value, max_bytes)
    if isinstance(value, dict | list | tuple) and depth >= MAX_DEPTH:
        return f"…[truncated: nested deeper than {MAX_DEPTH} levels]"
    if isinstance(value, dict):
        return {
            (truncate_text(k, max_bytes) if isinstance(k, str) else k): bound_json(
                v, max_bytes, depth + 1
            )
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [bound_json(v, max_bytes, depth + 1) for v in value]
    return value


def _size(value: Any) -> int:
    """The UTF-8 length of `value` as canonical JSON (key order does not change it), without
    canonical_json's key check: the write encodes the entry again, and refuses what is not JSON."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return len(text.encode("utf-8"))
    except (TypeError, ValueError, RecursionError):
        return len(repr(value))  # not JSON: the write refuses it later, with the real reason


def bound_payload(payload: dict[str, JSON], limits: StoreLimits) -> dict[str, JSON]:
    return bound_detail(payload, limits)[0]


def bound_detail(
    payload: dict[str, JSON], limits: StoreLimits
) -> tuple[dict[str, JSON], str | None]:
    """`bound_payload`, and the result's canonical JSON when it was computed on the way (the
    common case: a detail that fits), so a write need not encode it again."""
    n = limits.max_audit_field_bytes
    fits = _fits(payload, n // 4)  # no character takes more than 4 bytes
    out = payload if fits else bound_json(payload, n)
    assert isinstance(out, dict)
    try:
        # A detail that fits has string keys only (`_fits` checked): encode it without a second
        # walk.
        text: str | None = canonical_json_of_str_keys(out) if fits else canonical_json(out)
    except InvalidValueError:
        text = None  # not JSON: measured below, refused by the write with the real reason
    if text is not None:
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
        if size <= limits.max_audit_payload_bytes:
            return out, text
    elif _size(out) <= limits.max_audit_payload_bytes:
        return out, None
    # Keep the smallest entries (short fields, messages) and name the large ones left out.
    budget = limits.max_audit_payload_bytes - 256
    kept: dict[str, JSON] = {}
    left_out: list[str] = []
    for key, size in sorted(((k, _size({k: v})) for k, v in out.items()), key=lambda x: x[1]):
        if size <= budget:
            kept[key] = out[key]
            budget -= size
        else:
            left_out.append(key)
    kept[OMITTED_KEY] = truncate_text(
        f"over {limits.max_audit_payload_bytes} bytes, left out: {', '.join(left_out)}", 200
    )
    return kept, None
