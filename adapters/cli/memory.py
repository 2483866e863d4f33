"""`planfence memory ...`: inspect and seed a shared-memory store."""

from __future__ import annotations

import argparse
from typing import Any

from planfence.shared_memory import Record, Store, open_store

from .common import add_common, emit, guarded, parse_json_arg, store_url


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mem = sub.add_parser("memory", help="inspect and seed the shared-memory store")
    msub = mem.add_subparsers(dest="memory_cmd", required=True, metavar="COMMAND")

    p = msub.add_parser("own", help="assign the owner of a new key")
    p.add_argument("key")
    p.add_argument("--owner", required=True, metavar="AGENT")
    add_common(p)
    p.set_defaults(handler=guarded(_own))

    p = msub.add_parser("transfer", help="hand a key to another owner (current owner only)")
    p.add_argument("key")
    p.add_argument("--to", required=True, metavar="AGENT")
    p.add_argument("--as", dest="agent", required=True, metavar="AGENT")
    add_common(p)
    p.set_defaults(handler=guarded(_transfer))

    p = msub.add_parser("put", help="store a new version of a key and advance its head")
    p.add_argument("key")
    p.add_argument("--value", required=True, metavar="JSON")
    p.add_argument("--as", dest="agent", required=True, metavar="AGENT")
    p.add_argument("--parents", nargs="*", default=[], metavar="ID")
    p.add_argument(
        "--expect", default=None, metavar="ID|none", help="head you last saw (default: current)"
    )
    add_common(p)
    p.set_defaults(handler=guarded(_put))

    p = msub.add_parser("head", help="the current head of a key")
    p.add_argument("key")
    add_common(p)
    p.set_defaults(handler=guarded(_head))

    p = msub.add_parser("get", help="one record by id")
    p.add_argument("id")
    add_common(p)
    p.set_defaults(handler=guarded(_get))

    p = msub.add_parser("keys", help="every key with its owner and head")
    p.add_argument("--prefix", default="")
    add_common(p)
    p.set_defaults(handler=guarded(_keys))

    p = msub.add_parser("lineage", help="a record's parents, as a tree")
    p.add_argument("id")
    p.add_argument("--max-records", type=int, default=10_000)
    add_common(p)
    p.set_defaults(handler=guarded(_lineage))

    p = msub.add_parser("changes", help="the change feed after a sequence number")
    p.add_argument("--since", type=int, default=0)
    add_common(p)
    p.set_defaults(handler=guarded(_changes))


def _open(args: argparse.Namespace) -> Store:
    return open_store(store_url(args))


def _own(args: argparse.Namespace) -> int:
    with _open(args) as store:
        ch = store.own(args.key, args.owner)
    emit(args, ch.to_dict(), f"{args.key}: owner {args.owner}")
    return 0


def _transfer(args: argparse.Namespace) -> int:
    with _open(args) as store:
        ch = store.transfer(args.key, args.to, by=args.agent)
    emit(args, ch.to_dict(), f"{args.key}: owner {args.to} (was {args.agent})")
    return 0


def _put(args: argparse.Namespace) -> int:
    value = parse_json_arg(args.value)
    kwargs: dict[str, Any] = {}
    if args.expect is not None:
        kwargs["expected_head"] = None if args.expect.lower() == "none" else args.expect
    with _open(args) as store:
        rec = store.put(args.key, value, author=args.agent, parents=args.parents, **kwargs)
    emit(args, rec.to_dict(), rec.id)
    return 0


def _head(args: argparse.Namespace) -> int:
    with _open(args) as store:
        state = store.states([args.key]).get(args.key)
        if state is None:
            store.head(args.key)  # raises UnknownKeyError with the standard message
            return 1
    emit(
        args,
        {"key": state.key, "owner": state.owner, "head": state.head, "version": state.version},
        state.head or "(no version yet)",
    )
    return 0


def _describe(rec: Record) -> str:
    lines = [
        f"id:         {rec.id}",
        f"key:        {rec.key}",
        f"kind:       {rec.kind}",
        f"author:     {rec.author}",
        f"created_at: {rec.created_at}",
        f"value:      {rec.value_json}",
    ]
    lines += [f"parent:     {p}" for p in rec.parents]
    if rec.supersedes:
        lines.append(f"supersedes: {rec.supersedes}")
    return "\n".join(lines)


def _get(args: argparse.Namespace) -> int:
    with _open(args) as store:
        rec = store.get(args.id)
    emit(args, rec.to_dict(), _describe(rec))
    return 0


def _keys(args: argparse.Namespace) -> int:
    with _open(args) as store:
        states = store.keys(args.prefix)
    rows = [{"key": s.key, "owner": s.owner, "head": s.head, "version": s.version} for s in states]
    text = "\n".join(f"{s.key}\t{s.owner}\tv{s.version}\t{s.head or '-'}" for s in states)
    emit(args, rows, text or "(no keys)")
    return 0


def _lineage(args: argparse.Namespace) -> int:
    with _open(args) as store:
        store.get(args.id)  # unknown root: a clear error, not an empty tree
        fr = store.lineage(args.id, max_records=args.max_records)
    recs = fr.records
    lines: list[str] = []

    def draw(rid: str, depth: int, path: frozenset[str]) -> None:
        rec = recs.get(rid)
        label = f"{rid[:12]}  {rec.key} ({rec.kind}, {rec.author})" if rec else f"{rid[:12]}  ?"
        lines.append("  " * depth + ("└─ " if depth else "") + label)
        if rec is None or rid in path:
            return
        for parent in rec.parents:
            draw(parent, depth + 1, path | {rid})

    draw(args.id, 0, frozenset())
    if fr.unknown:
        lines.append("unknown ids: " + ", ".join(sorted(fr.unknown)))
    if fr.truncated:
        lines.append(f"(walk stopped at {args.max_records} records)")
    data = {
        "root": args.id,
        "records": {rid: r.to_dict() for rid, r in recs.items()},
        "unknown": sorted(fr.unknown),
        "truncated": fr.truncated,
    }
    emit(args, data, "\n".join(lines))
    return 0 if fr.complete else 1


def _changes(args: argparse.Namespace) -> int:
    with _open(args) as store:
        rows = [c.to_dict() for c in store.iter_changes(args.since)]
    text = "\n".join(
        f"{c['seq']}\t{c['key']}\t{c['kind']}\t{c['head'] or '-'}\tby {c['by']}" for c in rows
    )
    emit(args, rows, text or "(no changes)")
    return 0
