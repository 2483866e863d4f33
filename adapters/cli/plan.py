"""`planfence plan create`: store a plan record from the command line (scripts, other languages)."""

from __future__ import annotations

import argparse

from planfence.plugins.gate.plans import create_plan_sync
from planfence.shared_memory.records import validate_agent

from .common import add_common, emit, guarded, open_cli_store, parse_json_arg, split_ids


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    plan = sub.add_parser("plan", help="create plans (derived records)")
    psub = plan.add_subparsers(dest="plan_cmd", required=True, metavar="COMMAND")
    p = psub.add_parser("create", help="store a plan derived from the given record ids")
    p.add_argument("--as", dest="agent", required=True, metavar="AGENT", help="the planning agent")
    p.add_argument(
        "--parents",
        nargs="+",
        action="extend",
        required=True,
        metavar="ID",
        help="record ids the planner read (full ids or unique prefixes of 8+ hex digits)",
    )
    p.add_argument("--value", default=None, metavar="JSON", help="the plan's content, as JSON")
    p.add_argument(
        "--supersedes",
        default=None,
        metavar="PLAN_ID",
        help="the plan this one replaces (a replan; full id or unique prefix)",
    )
    add_common(p)
    p.set_defaults(handler=guarded(_create))


def _create(args: argparse.Namespace) -> int:
    validate_agent(args.agent)  # named as the agent, not as the plan key it would make
    value = parse_json_arg(args.value) if args.value is not None else None
    with open_cli_store(args, writes=True) as store:
        parents = [store.resolve_id(p) for p in split_ids(args.parents)]
        supersedes = store.resolve_id(args.supersedes) if args.supersedes else None
        rec = create_plan_sync(
            store, author=args.agent, parents=parents, value=value, supersedes=supersedes
        )
    emit(args, rec.to_dict(), rec.id)
    return 0
