"""The decision log: the store's journal read in the gate's words.

A gate files each `Decision` as a journal entry (see `audit`): its source is the entry's kind,
its plan the entry's subject, and its verdict, reason, tool and agent are labels.
`find_decisions` asks the journal by those names and hands back `Decision`s;
`find_decisions_sync` does the same over a sync `Store`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypedDict

from planfence.shared_memory import AsyncStore, Store

from .audit import AUDIT_SOURCE, VERDICT_LABEL, Decision


class _JournalArgs(TypedDict):
    kind: str | None
    subject: str | None
    labels: Mapping[str, str | Iterable[str] | None]
    limit: int
    before_id: int | None


def _journal_args(
    source: str | None,
    tool: str | None,
    verdict: str | None,
    agent: str | None,
    plan: str | None,
    reasons: Iterable[str],
    limit: int,
    before_id: int | None,
) -> _JournalArgs:
    return {
        "kind": source,
        "subject": plan,
        "labels": {
            VERDICT_LABEL: verdict,
            "reason": tuple(reasons),
            "tool": tool,
            "agent": agent,
        },
        "limit": limit,
        "before_id": before_id,
    }


async def find_decisions(
    store: AsyncStore,
    *,
    source: str | None = AUDIT_SOURCE,
    tool: str | None = None,
    verdict: str | None = None,
    agent: str | None = None,
    plan: str | None = None,
    reasons: Iterable[str] = (),
    limit: int = 100,
    before_id: int | None = None,
) -> list[Decision]:
    """Decisions matching every given field, newest first.

    Args:
        source: who decided (`"gate"`, the default; `"proxy"`, `"janus"`...); None: anyone.
        reasons: any one of these reason codes (none given: any reason).
        before_id: only decisions older than the one with this id (the next page).
    """
    args = _journal_args(source, tool, verdict, agent, plan, reasons, limit, before_id)
    return [Decision.from_entry(e) for e in await store.journal(**args)]


def find_decisions_sync(
    store: Store,
    *,
    source: str | None = AUDIT_SOURCE,
    tool: str | None = None,
    verdict: str | None = None,
    agent: str | None = None,
    plan: str | None = None,
    reasons: Iterable[str] = (),
    limit: int = 100,
    before_id: int | None = None,
) -> list[Decision]:
    """`find_decisions` over a sync `Store`."""
    args = _journal_args(source, tool, verdict, agent, plan, reasons, limit, before_id)
    return [Decision.from_entry(e) for e in store.journal(**args)]


__all__ = ["find_decisions", "find_decisions_sync"]
