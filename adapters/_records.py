"""How framework adapters show public records to a model (the read sets themselves live in
`planfence.plugins.gate.reads`), and a refusal the model replans from."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from planfence.plugins.gate import REPLAN, Verdict, explain
from planfence.shared_memory import Record, canonical_json

DEFAULT_HEADER = "Current public records (planfence shared memory); plan from these values:"
UNREADABLE = (
    "planfence: the public records cannot be read now (the shared store cannot be reached: "
    "{error}). No action that depends on them can run until it is back (store_unavailable)."
)


def records_text(header: str, records: Iterable[Record]) -> str:
    """The text a model is shown: one line per record with its key, version and value."""
    lines = [header]
    lines += [f"- {r.key} (version {r.id[:12]}): {canonical_json(r.value)}" for r in records]
    return "\n".join(lines)


def unreadable_text(error: str) -> str:
    """What a model is shown instead of the records when the store cannot be reached."""
    return UNREADABLE.format(error=error)


def for_model(verdict: Verdict) -> Verdict:
    """A refusal whose message the model can replan from: a replan's says which records changed
    and what they are now (their current values); any other refusal keeps the gate's."""
    if verdict.verdict != REPLAN:
        return verdict
    return replace(verdict, message=explain(verdict))
