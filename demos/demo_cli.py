"""`planfence demo ...`: the quickstart story and the bundled workflows."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from planfence.adapters.cli.common import add_common, guarded, store_url
from planfence.shared_memory import create_async_store

from .workflows import EXECUTORS, WORKFLOWS, WorkflowResult, run_workflow


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="run a bundled demo")
    dsub = demo.add_subparsers(dest="demo_cmd", required=True, metavar="DEMO")

    p = dsub.add_parser("quickstart", help="the stale-plan story: a booking revised after planning")
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        default=None,
        help="run one executor (default: planfence, then freshness for contrast)",
    )
    p.add_argument("--workflow", choices=sorted(WORKFLOWS), default="booking")
    p.add_argument(
        "--revise-during-replan",
        action="store_true",
        help="commit another revision while the replan is in flight (shows a block)",
    )
    add_common(p)
    p.set_defaults(handler=guarded(_quickstart))

    p = dsub.add_parser(
        "workflows", help="booking, fulfilment and deploy workflows under every executor"
    )
    p.add_argument("--runs", type=int, default=10, help="runs per workflow (default 10)")
    p.add_argument("--executor", choices=EXECUTORS, action="append", default=None)
    add_common(p)
    p.set_defaults(handler=guarded(_workflows))


def _narrate(r: WorkflowResult) -> str:
    lines = [f"[{r.executor}] workflow {r.workflow} (run {r.run})"]
    for v in r.verdicts:
        if v.verdict == "replan":
            for s in v.stale:
                lines.append(
                    f"  gate: {s.key} changed after planning "
                    f"({s.used[0][:10]} -> {(s.current or 'none')[:10]}): replan"
                )
        elif v.verdict == "block":
            lines.append(f"  gate: BLOCK ({v.reason}) {v.message}")
    for a in r.actions:
        if a["executed"]:
            ok = "valid" if a["valid"] else "INVALID: acted on a stale plan"
            lines.append(f"  executed {a['tool']}({json.dumps(a['args'])}) -> {ok}")
        else:
            lines.append(f"  refused {a['tool']}: nothing was executed")
    status = "completed" if r.completed else "not completed"
    lines.append(
        f"  {status}; invalid actions {r.invalid_actions}, replans {r.replans}, blocked {r.blocked}"
    )
    return "\n".join(lines)


async def _run(url: str, jobs: list[tuple[str, str]], **kw: Any) -> list[WorkflowResult]:
    store = create_async_store(url)
    async with store:
        return [await run_workflow(store, wf, ex, **kw) for wf, ex in jobs]


def _quickstart(args: argparse.Namespace) -> int:
    if args.executor:
        executors = [args.executor]
    else:  # the story reads best as a contrast; JSON is one object, for planfence
        executors = ["planfence"] if args.json else ["planfence", "freshness"]
    results = asyncio.run(
        _run(
            store_url(args),
            [(args.workflow, ex) for ex in executors],
            revise_during_replan=args.revise_during_replan,
        )
    )
    if args.json:
        print(json.dumps(results[0].to_dict()))
    else:
        print(f"store: {store_url(args)}")
        for r in results:
            print(_narrate(r))
    return 0


def _workflows(args: argparse.Namespace) -> int:
    executors = args.executor or list(EXECUTORS)
    jobs = [(wf, ex) for ex in executors for wf in WORKFLOWS for _ in range(args.runs)]
    results = asyncio.run(_run(store_url(args), jobs))
    summary: dict[str, dict[str, int]] = {}
    for r in results:
        row = summary.setdefault(
            r.executor,
            {"runs": 0, "completed": 0, "invalid_actions": 0, "replans": 0, "blocked": 0},
        )
        row["runs"] += 1
        row["completed"] += int(r.completed)
        row["invalid_actions"] += r.invalid_actions
        row["replans"] += r.replans
        row["blocked"] += r.blocked
    if args.json:
        print(json.dumps({"summary": summary, "runs": [r.to_dict() for r in results]}))
    else:
        print(f"{'executor':<10} {'runs':>5} {'completed':>10} {'invalid':>8} {'replans':>8}")
        for ex, row in summary.items():
            print(
                f"{ex:<10} {row['runs']:>5} {row['completed']:>10} "
                f"{row['invalid_actions']:>8} {row['replans']:>8}"
            )
    return 0
