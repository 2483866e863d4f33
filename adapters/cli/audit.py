"""`planfence audit`: list the gate's recorded decisions, newest first."""

from __future__ import annotations

import argparse

from planfence.shared_memory import open_store

from .common import add_common, emit, guarded, store_url


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("audit", help="list recorded gate decisions (newest first)")
    p.add_argument("--tool", default=None)
    p.add_argument("--verdict", choices=("allow", "replan", "block"), default=None)
    p.add_argument("--plan", default=None, metavar="PLAN_ID")
    p.add_argument("--agent", default=None)
    p.add_argument("--source", default="gate", help="decision source (gate, janus, ...)")
    p.add_argument("--limit", type=int, default=50)
    add_common(p)
    p.set_defaults(handler=guarded(_audit))


def _audit(args: argparse.Namespace) -> int:
    with open_store(store_url(args)) as store:
        rows = store.decisions(
            source=args.source or None,
            tool=args.tool,
            verdict=args.verdict,
            plan=args.plan,
            agent=args.agent,
            limit=args.limit,
        )
    data = [d.to_dict() for d in rows]
    lines = []
    for d in rows:
        stale = d.payload.get("stale") or []
        extra = f" stale={','.join(s['key'] for s in stale)}" if stale else ""
        lines.append(
            f"{d.id}\t{d.at}\t{d.tool or '-'}\t{d.verdict}\t{d.reason}\t"
            f"plan={(d.plan or '-')[:12]}{extra}"
        )
    emit(args, data, "\n".join(lines) or "(no decisions)")
    return 0
