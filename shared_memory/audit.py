"""Bounds on what the audit journal stores.

Much of an entry comes from the caller: the subject (a plan reference), labels (a tool name, an
agent id), the arguments quoted in a refusal message. A refused call must still be recorded, but
not at any size: every string is cut at `StoreLimits.max_audit_field_bytes` (UTF-8) with a marker
saying how much was left out, and a detail still over `max_audit_payload_bytes` keeps its
smallest entries and names the ones it left out.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import InvalidValueError
from .records import JSON, StoreLimits, canonical_json

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


def _fits(value: JSON, max_chars: int, depth: int = 0) -> bool:
    """True when `bound_json` would return `value` unchanged: no string (object keys too) longer
    than `max_chars` characters and no nesting deeper than `MAX_DEPTH`. Checking is cheaper than
    rebuilding, and an audit detail almost always fits."""
    if type(value) is str:
        return len(value) <= max_chars
    if type(value) is dict:
        if depth >= MAX_DEPTH:
            return False
        for k, v in value.items():
            if type(k) is str and len(k) > max_chars:
                return False
            if not _fits(v, max_chars, depth + 1):
                return False
        return True
    if type(value) is list or type(value) is tuple:
        if depth >= MAX_DEPTH:
            return False
        return all(_fits(v, max_chars, depth + 1) for v in value)
    return not isinstance(value, str | dict | list | tuple)  # subclasses: take the long way


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
    out = bound_json(payload, limits.max_audit_field_bytes)
    assert isinstance(out, dict)
    try:
        text: str | None = canonical_json(out)
    except InvalidValueError:
        text = None  # not JSON: measured below, refused by the write with the real reason
    if text is not None:
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
        if size <= limits.max_audit_payload_bytes:
            return out, text
    elif _size(out) <= limits.max_audit_payload_bytes:
        return out, None
    # Keep the smallest entries (verdict details, messages) and name the large ones left out.
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
