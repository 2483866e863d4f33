"""`planfence memory reassign`: an assigner takes a key over for a new owner, without the old
owner (whose machine is gone), in a new owner epoch that fences the old owner out."""

from __future__ import annotations

import argparse

from planfence.adapters.owner_service.keys import SigningKey

from .common import UsageError, add_common, emit, guarded, open_cli_store, positive_int


def add_reassign_parser(msub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = msub.add_parser(
        "reassign",
        help="an assigner hands a key to a new owner without the old one (fenced takeover); "
        "its owner epoch goes up by one",
        description=(
            "Reassign KEY to --to AGENT as the assigner --as ASSIGNER (an agent the gates trust "
            "to assign owners: their owner_assigners). The owner epoch goes up by one in the "
            "same write and the key's leases end: the old owner's writes are refused, its "
            "answers and signed heads name a stale epoch, and fencing tokens of its epoch stop "
            "verifying. Sign with --signing-key so gates that do not trust the store accept "
            "the new owner."
        ),
    )
    p.add_argument("key", help="the key to take over")
    p.add_argument("--to", required=True, metavar="AGENT", help="the new owner")
    p.add_argument(
        "--as", dest="agent", required=True, metavar="ASSIGNER", help="the assigning agent"
    )
    p.add_argument(
        "--signing-key",
        default=None,
        metavar="FILE",
        help="sign the reassignment with this Ed25519 key (the assigner's)",
    )
    p.add_argument(
        "--from-epoch",
        type=positive_int,
        default=None,
        metavar="N",
        help="the owner epoch taken over: refuse (and write nothing) if the key moved past it",
    )
    add_common(p)
    p.set_defaults(handler=guarded(_reassign))


def _reassign(args: argparse.Namespace) -> int:
    signer = SigningKey.load(args.signing_key) if args.signing_key else None
    if signer is not None and signer.agent != args.agent:
        raise UsageError(f"--signing-key holds {signer.agent!r}'s key, not {args.agent!r}'s")
    with open_cli_store(args, writes=True) as store:
        store.aio.signer = signer
        was = store.owner(args.key)
        ch = store.reassign(args.key, args.to, by=args.agent, from_epoch=args.from_epoch)
    emit(
        args,
        {**ch.to_dict(), "previous_owner": was},
        f"{args.key}: owner {args.to} (was {was}, reassigned by {args.agent}), epoch {ch.epoch}",
    )
    return 0
