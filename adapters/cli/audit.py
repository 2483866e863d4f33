"""`planfence audit`: list recorded decisions (gate verdicts, Janus deploy/keep), newest first."""

from __future__ import annotations

import argparse

from planfence.plugins.gate import find_decisions_sync

from .common import add_common, emit, guarded, open_cli_store, positive_int

GATE_VERDICTS = ("allow", "replan", "block")
JANUS_VERDICTS = ("deploy", "keep")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("audit", help="list recorded decisions (newest first)")
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
        "--limit", type=positive_int, default=50, metavar="N", help="show at most N decisions"
    )
    add_common(p)
    p.set_defaults(handler=guarded(_audit))


def _audit(args: argparse.Namespace) -> int:
    source = args.source or ("janus" if args.verdict in JANUS_VERDICTS else "gate")
    if source == "all":
        source = None
    with open_cli_store(args) as store:
        rows = find_decisions_sync(
            store,
            source=source,
            tool=args.tool,
            verdict=args.verdict,
            # A full id is taken as given: refused calls can name plans the store never held.
            plan=store.resolve_id(args.plan) if args.plan is not None else None,
            agent=args.agent,
            limit=args.limit,
        )
    data = [d.to_dict() for d in rows]
    lines = []
    for d in rows:
        stale = d.payload.get("stale") or []
        extra = f" stale={','.join(s['key'] for s in stale)}" if stale else ""
        lines.append(
            f"{d.id}\t{d.at}\t{d.agent or '-'}\t{d.tool or '-'}\t{d.verdict}\t{d.reason}\t"
            f"plan={(d.plan or '-')[:12]}{extra}"
        )
    emit(args, data, "\n".join(lines) or "(no decisions)")
    return 0
