"""`planfence audit`: list recorded decisions (gate verdicts, Janus deploy/keep), newest first.

Newest means by decision time, not by the order the log received them: an allow the deferred
audit wrote in a batch just after it was decided comes before the refusals decided after it. The
list stops at `--limit` decisions and says how many more match.
"""

from __future__ import annotations

import argparse
import heapq
import sys
from collections.abc import Iterator
from typing import Any

from planfence.plugins.gate import Decision, find_decisions_sync
from planfence.shared_memory import Store

from .common import add_common, emit, guarded, open_cli_store, positive_int

GATE_VERDICTS = ("allow", "replan", "block")
JANUS_VERDICTS = ("deploy", "keep")
DEFAULT_LIMIT = 50
PAGE = 1000


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "audit",
        help="list recorded decisions (newest first)",
        description="List recorded decisions, newest first by decision time. At most --limit "
        "are shown; the output says how many more match (text: a note on stderr; --json: "
        '{"decisions": [...], "total": N, "more": M}).',
    )
    p.add_argument("--tool", default=None, help="only decisions about this tool")
    p.add_argument(
        "--verdict",
        choices=GATE_VERDICTS + JANUS_VERDICTS,
        default=None,
        help="only this verdict (gate: allow, replan, block; Janus: deploy, keep)",
    )
    p.add_argument(
        "--plan",
        default=None,
        metavar="PLAN_ID",
        help="only decisions about this plan (a full id or a unique prefix of 8+ hex digits)",
    )
    p.add_argument("--agent", default=None, help="only decisions for calls by this agent")
    p.add_argument(
        "--source",
        default=None,
        help="decision source: gate, janus or all (default: gate, or janus for a Janus --verdict)",
    )
    p.add_argument(
        "--limit",
        type=positive_int,
        default=DEFAULT_LIMIT,
        metavar="N",
        help="show the N most recent matching decisions; how many more match is said after them",
    )
    add_common(p)
    p.set_defaults(handler=guarded(_audit))


def _matching(store: Store, **filters: Any) -> Iterator[Decision]:
    """Every matching decision, a page at a time (the log's own order, newest written first)."""
    before: int | None = None
    while page := find_decisions_sync(store, **filters, limit=PAGE, before_id=before):
        yield from page
        before = page[-1].id
        if len(page) < PAGE or before is None:
            return


def newest(decisions: Iterator[Decision], limit: int) -> tuple[list[Decision], int]:
    """The `limit` most recent decisions by decision time (then by log id), newest first, and
    how many there were in all."""
    total = 0

    def counted() -> Iterator[Decision]:
        nonlocal total
        for d in decisions:
            total += 1
            yield d

    shown = heapq.nlargest(limit, counted(), key=lambda d: (d.at, d.id or 0))
    return shown, total


def _audit(args: argparse.Namespace) -> int:
    source = args.source or ("janus" if args.verdict in JANUS_VERDICTS else "gate")
    if source == "all":
        source = None
    with open_cli_store(args) as store:
        rows, total = newest(
            _matching(
                store,
                source=source,
                tool=args.tool,
                verdict=args.verdict,
                # A full id is taken as given: refused calls can name plans the store never held.
                plan=store.resolve_id(args.plan) if args.plan is not None else None,
                agent=args.agent,
            ),
            args.limit,
        )
    more = total - len(rows)
    data = {"decisions": [d.to_dict() for d in rows], "total": total, "more": more}
    lines = []
    for d in rows:
        stale = d.payload.get("stale") or []
        extra = f" stale={','.join(s['key'] for s in stale)}" if stale else ""
        lines.append(
            f"{d.id}\t{d.at}\t{d.agent or '-'}\t{d.tool or '-'}\t{d.verdict}\t{d.reason}\t"
            f"plan={(d.plan or '-')[:12]}{extra}"
        )
    emit(args, data, "\n".join(lines) or "(no decisions)")
    if more and not args.json:  # on stderr: the rows on stdout stay one decision a line
        print(
            f"planfence: {more} more matching decision{'s' * (more != 1)} not shown "
            f"(--limit {total} shows them all)",
            file=sys.stderr,
        )
    return 0
