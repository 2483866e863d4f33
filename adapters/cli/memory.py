"""`planfence memory ...`: inspect and seed a shared-memory store."""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from typing import Any

from planfence.adapters.owner_service.keys import SigningKey
from planfence.plugins.gate.graph import load_plan_graph
from planfence.shared_memory import HeadConflictError, Record, Store
from planfence.shared_memory.errors import AlreadyOwnedError

from .common import (
    UsageError,
    add_common,
    emit,
    guarded,
    non_negative_int,
    open_cli_store,
    positive_int,
    read_value_arg,
    split_ids,
)
from .lineage import FORMATS, lineage_dot, lineage_json, lineage_mermaid, lineage_tree
from .reassign import add_reassign_parser

# Without --expect, `put` means "on top of whatever is current": a concurrent writer only makes it
# read the head again. Bounded, so a key under constant churn still ends in a clear error.
PUT_ATTEMPTS = 8
AGENT_ENV = "PLANFENCE_AGENT"
"""Who the command acts as when `--as` is not given (transfer)."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mem = sub.add_parser("memory", help="inspect and seed the shared-memory store")
    msub = mem.add_subparsers(dest="memory_cmd", required=True, metavar="COMMAND")

    p = msub.add_parser(
        "own",
        help="assign the owner of a new key (creates the store if needed, and says where)",
    )
    p.add_argument("key", help="the key, e.g. trip/42/requirements")
    p.add_argument(
        "--owner", required=True, metavar="AGENT", help="the agent that will own the key"
    )
    p.add_argument(
        "--as",
        dest="agent",
        default=None,
        metavar="AGENT",
        help="the agent assigning the key (default: the owner itself)",
    )
    _add_signing_key(
        p,
        "sign the assignment with this Ed25519 key (the assigning agent's), so "
        "gates that do not trust the store can prove the key's owner",
    )
    add_common(p)
    p.set_defaults(handler=guarded(_own))

    p = msub.add_parser(
        "transfer",
        help="hand a key to another owner (current owner only); its owner epoch goes up by one",
    )
    p.add_argument("key", help="the key to hand over")
    p.add_argument("--to", required=True, metavar="AGENT", help="the new owner")
    p.add_argument(
        "--as",
        dest="agent",
        default=None,
        metavar="AGENT",
        help=f"the current owner (default: ${AGENT_ENV})",
    )
    _add_signing_key(
        p,
        "sign the transfer with this Ed25519 key (the current owner's), so "
        "gates that do not trust the store can prove the new owner",
    )
    add_common(p)
    p.set_defaults(handler=guarded(_transfer))
    add_reassign_parser(msub)

    p = msub.add_parser("put", help="store a new version of a key and advance its head")
    p.add_argument("key", help="the key to write (you must own it)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--value", metavar="JSON", help="the new value, as JSON")
    source.add_argument(
        "--value-file",
        metavar="FILE",
        help="read the JSON value from FILE ('-' for stdin): for values too large for a "
        "command line",
    )
    p.add_argument(
        "--as", dest="agent", required=True, metavar="AGENT", help="the writing agent (the owner)"
    )
    p.add_argument(
        "--parents",
        action="append",
        default=[],
        metavar="ID[,ID...]",
        help="record ids this version was derived from (full ids or unique 8+ digit prefixes; "
        "repeat the option or separate with commas)",
    )
    _add_signing_key(
        p,
        "sign the new head with this Ed25519 key (planfence keys generate), so "
        "gates that do not trust the store can check it; the key must be the "
        "writing agent's",
    )
    p.add_argument(
        "--expect",
        default=None,
        metavar="ID|none",
        help="the head you last saw: fail if someone advanced the key since (default: write on "
        f"top of the current head, re-reading it up to {PUT_ATTEMPTS} times on a concurrent write)",
    )
    add_common(p)
    p.set_defaults(handler=guarded(_put))

    p = msub.add_parser("head", help="the current head of a key")
    p.add_argument("key", help="the key")
    add_common(p)
    p.set_defaults(handler=guarded(_head))

    p = msub.add_parser("get", help="one record by id")
    p.add_argument("id", help="a record id, or a unique prefix of 8+ hex digits")
    add_common(p)
    p.set_defaults(handler=guarded(_get))

    p = msub.add_parser("keys", help="every key with its owner and head")
    p.add_argument("--prefix", default="", help="only keys starting with this text")
    add_common(p)
    p.set_defaults(handler=guarded(_keys))

    p = msub.add_parser(
        "lineage", help="a record's ancestry (each record once; shared ancestors referenced)"
    )
    p.add_argument("id", help="a record id, or a unique prefix of 8+ hex digits")
    p.add_argument(
        "--max-records",
        type=positive_int,
        default=10_000,
        metavar="N",
        help="stop the walk after N records",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="tree (default), json (as --json), dot (Graphviz) or mermaid; every format marks the "
        "versions the record used and whether each is still its key's head",
    )
    add_common(p)
    p.set_defaults(handler=guarded(_lineage))

    p = msub.add_parser("changes", help="the change feed after a sequence number")
    p.add_argument(
        "--since",
        type=non_negative_int,
        default=0,
        metavar="SEQ",
        help="show changes with a sequence number above SEQ",
    )
    add_common(p)
    p.set_defaults(handler=guarded(_changes))


def _add_signing_key(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--signing-key", default=None, metavar="FILE", help=text)


def _signer(args: argparse.Namespace, agent: str) -> SigningKey | None:
    """The `--signing-key` of `agent`, if given."""
    signer = SigningKey.load(args.signing_key) if args.signing_key else None
    if signer is not None and signer.agent != agent:
        raise UsageError(f"--signing-key holds {signer.agent!r}'s key, not {agent!r}'s")
    return signer


def _own(args: argparse.Namespace) -> int:
    by = args.agent or args.owner
    signer = _signer(args, by)
    with open_cli_store(args, writes=True, creates=True) as store:
        store.signer = signer
        try:
            ch = store.own(args.key, args.owner, by=by)
        except AlreadyOwnedError:
            if store.owner(args.key) != args.owner:
                raise
            # Asking again for what is already so succeeds: scripts can be re-run.
            emit(
                args,
                {"key": args.key, "owner": args.owner, "unchanged": True},
                f"{args.key}: owner {args.owner} (already)",
            )
            return 0
    emit(args, ch.to_dict(), f"{args.key}: owner {args.owner}")
    return 0


def _transfer(args: argparse.Namespace) -> int:
    agent = args.agent or os.environ.get(AGENT_ENV, "")
    if not agent:
        raise UsageError(f"say who hands the key over: --as AGENT (or set ${AGENT_ENV})")
    signer = _signer(args, agent)
    with open_cli_store(args, writes=True) as store:
        store.signer = signer
        state = store.states([args.key]).get(args.key)
        if state is not None and state.owner == args.to == agent:
            # The owner handing a key to itself changes nothing: no owner change, no new epoch
            # (anyone else asking is refused by the store as a non-owner).
            emit(
                args,
                {"key": args.key, "owner": args.to, "epoch": state.epoch, "unchanged": True},
                f"{args.key}: owner {args.to} (already), epoch {state.epoch}",
            )
            return 0
        ch = store.transfer(args.key, args.to, by=agent)
    emit(args, ch.to_dict(), f"{args.key}: owner {args.to} (was {agent}), epoch {ch.epoch}")
    return 0


def _put(args: argparse.Namespace) -> int:
    value = read_value_arg(args.value, args.value_file)
    signer = _signer(args, args.agent)
    with open_cli_store(args, writes=True) as store:
        store.signer = signer
        parents = [store.resolve_id(p) for p in split_ids(args.parents)]
        if args.expect is not None:
            rec = _put_expecting(store, args, value, parents)
        else:
            rec = _put_on_current(store, args, value, parents)
    emit(args, rec.to_dict(), rec.id)
    return 0


def _put_expecting(
    store: Store, args: argparse.Namespace, value: Any, parents: list[str]
) -> Record:
    expected = None if args.expect.lower() == "none" else store.resolve_id(args.expect)
    try:
        return store.put(
            args.key, value, author=args.agent, parents=parents, expected_head=expected
        )
    except HeadConflictError as exc:
        now = exc.current or "no version"
        raise _conflict(
            exc, f"someone else advanced {exc.key} since you read it: now {now}"
        ) from None


def _put_on_current(
    store: Store, args: argparse.Namespace, value: Any, parents: list[str]
) -> Record:
    for attempt in range(1, PUT_ATTEMPTS + 1):
        try:
            return store.put(args.key, value, author=args.agent, parents=parents)
        except HeadConflictError as exc:
            if attempt == PUT_ATTEMPTS:
                raise _conflict(
                    exc,
                    f"{exc.key} kept changing under concurrent writers; gave up after "
                    f"{PUT_ATTEMPTS} attempts (now {exc.current or 'no version'})",
                ) from None
            time.sleep(random.uniform(0.0, 0.005 * attempt))  # let the other writer finish
    raise AssertionError("unreachable")  # pragma: no cover


def _conflict(exc: HeadConflictError, message: str) -> HeadConflictError:
    """The same conflict, told in plain words for the command line."""
    err = HeadConflictError(exc.key, exc.expected, exc.current)
    err.args = (message,)
    return err


def _head(args: argparse.Namespace) -> int:
    with open_cli_store(args) as store:
        state = store.states([args.key]).get(args.key)
        if state is None:
            store.head(args.key)  # raises UnknownKeyError with the standard message
            return 1
    emit(
        args,
        {
            "key": state.key,
            "owner": state.owner,
            "head": state.head,
            "version": state.version,
            "epoch": state.epoch,
            "signed": state.head_sig is not None,
            "owner_from": state.owner_from,
            "owner_signed": state.owner_sig is not None,
        },
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
    with open_cli_store(args) as store:
        rec = store.get(store.resolve_id(args.id))
    emit(args, rec.to_dict(), _describe(rec))
    return 0


def _keys(args: argparse.Namespace) -> int:
    with open_cli_store(args) as store:
        states = store.keys(args.prefix)
    rows = [
        {"key": s.key, "owner": s.owner, "head": s.head, "version": s.version, "epoch": s.epoch}
        for s in states
    ]
    text = "\n".join(f"{s.key}\t{s.owner}\tv{s.version}\t{s.head or '-'}" for s in states)
    emit(args, rows, text or "(no keys)")
    return 0


def _lineage(args: argparse.Namespace) -> int:
    fmt = args.format or ("json" if args.json else "tree")
    if args.json and fmt != "json":
        raise UsageError(f"--json and --format {fmt} disagree: give one of them")
    with open_cli_store(args) as store:
        root = store.resolve_id(args.id)
        store.get(root)  # unknown root: a clear error, not an empty tree
        fr = store.lineage(root, max_records=args.max_records)
        graph = load_plan_graph(store, root, lineage=fr)
    if fmt == "json":
        args.json = True
        emit(args, lineage_json(root, fr, graph), "")
    else:
        draw = {"tree": lambda: lineage_tree(root, fr, graph), "dot": lambda: lineage_dot(graph)}
        draw["mermaid"] = lambda: lineage_mermaid(graph)
        sys.stdout.write("\n".join(draw[fmt]()) + "\n")
    return 0 if fr.complete else 1


def _changes(args: argparse.Namespace) -> int:
    with open_cli_store(args) as store:
        rows = [c.to_dict() for c in store.iter_changes(args.since)]
    text = "\n".join(
        f"{c['seq']}\t{c['key']}\t{c['kind']}\t{c['head'] or '-'}\tby {c['by']}" for c in rows
    )
    emit(args, rows, text or "(no changes)")
    return 0
