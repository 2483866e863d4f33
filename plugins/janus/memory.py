"""How a memory (any JSON value an updater produces) is shown to encoders and models."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from planfence.shared_memory.records import canonical_json

Memory = Any
"""A memory state: any JSON value (a cheatsheet string, a list of insight rules, ...)."""

Render = Callable[[Memory], str]


def render_memory(memory: Memory) -> str:
    """Text of a memory: strings as they are, insight lists as numbered rules, else JSON."""
    if memory is None:
        return ""
    if isinstance(memory, str):
        return memory
    if isinstance(memory, dict) and isinstance(memory.get("rules"), list):
        lines = []
        for n, rule in enumerate(memory["rules"], 1):
            text = rule.get("text", "") if isinstance(rule, dict) else str(rule)
            lines.append(f"{n}. {text}")
        return "\n".join(lines)
    return str(canonical_json(memory))
