"""`planfence plan create`: store a plan record from the command line (scripts, other languages)."""

from __future__ import annotations

import argparse

from planfence.plugins.gate import create_plan_sync
from planfence.shared_memory import open_store

from .common import add_common, emit, guarded, parse_json_arg, store_url


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    plan = sub.add_parser("plan", help="create plans (derived records)")
    psub = plan.add_subparsers(dest="plan_cmd", required=True, metavar="COMMAND")
    p = psub.add_parser("create", help="store a plan derived from the given record ids")
    p.add_argument("--as", dest="agent", required=True, metavar="AGENT")
    p.add_argument(
        "--parents", nargs="+", required=True, metavar="ID", help="record ids the planner read"
    )
    p.add_argument("--value", default=None, metavar="JSON", help="the plan's content")
    p.add_argument(
        "--supersedes",
        default=None,
        metavar="PLAN_ID",
        help="the plan this one replaces (a replan)",
    )
    add_common(p)
    p.set_defaults(handler=guarded(_create))


def _create(args: argparse.Namespace) -> int:
    value = parse_json_arg(args.value) if args.value is not None else None
    with open_store(store_url(args)) as store:
        rec = create_plan_sync(
            store,
            author=args.agent,
            parents=args.parents,
            value=value,
            supersedes=args.supersedes,
        )
    emit(args, rec.to_dict(), rec.id)
    return 0
