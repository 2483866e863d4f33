"""Verdicts in words, for the model (or person) that has to act on a refusal."""

from __future__ import annotations

from planfence.shared_memory.records import canonical_json

from .decision import BLOCK, REPLAN, Verdict


def _short(record_id: str | None) -> str:
    return record_id[:12] if record_id else "none"


def explain(
    verdict: Verdict, *, ask: str = "Plan again from the current records (one replan is allowed)."
) -> str:
    """Which records changed and what they are now; `ask` is what a replan verdict asks for."""
    if verdict.verdict == REPLAN:
        head = (
            f"planfence refused {verdict.tool}: the plan was derived from outdated public "
            f"records. {ask}"
        )
    elif verdict.verdict == BLOCK:
        head = (
            f"planfence blocked {verdict.tool} ({verdict.reason}): {verdict.message}. "
            "This action will not run."
        )
    else:
        return f"planfence allowed {verdict.tool}"
    lines = [head]
    for s in verdict.stale:
        current = verdict.current_records.get(s.key)
        now = f" = {canonical_json(current.value)}" if current is not None else ""
        used = ", ".join(_short(u) for u in s.used) or "none"
        lines.append(f"- {s.key} changed: the plan used {used}, current {_short(s.current)}{now}")
    return "\n".join(lines)
