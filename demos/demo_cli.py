"""`planfence demo ...`: the quickstart story and the bundled workflows.

Demos run in their own temporary store unless `--store URL` is given, and say which one they used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from planfence.adapters.cli.common import (
    add_output,
    given_store,
    guarded,
    positive_int,
    write_out,
)
from planfence.shared_memory import create_async_store

from .executors import EXECUTORS
from .judging import describe_change
from .metering import Cost
from .support import STORE_HELP, DemoStore, Progress, demo_store
from .workflows import WORKFLOWS, WorkflowResult, run_workflow

DEFAULT_RUNS = 10
QUICK_RUNS = 2

# One line on what each baseline is, shown beside its run.
EXPLAIN = {
    "freshness": "freshness-only: the baseline that keeps the executor's copy of the records "
    "current, but never checks which versions its plan was derived from",
    "eager": "eager sync: the baseline that pushes every update to every replica, and holds the "
    "write until all of them acknowledged it, whether or not an action depends on it",
    "allkeys": "all-key check: the baseline that asks the owners for the head of every shared "
    "key before each action, not only the keys the action depends on",
}

# What an executor's synchronous waits are.
STALLS = {
    "planfence": "owner head requests for the keys the action depends on",
    "allkeys": "owner head requests for every shared key",
    "freshness": "replica catch-ups before acting",
    "eager": "writes held until every replica acknowledged",
}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="run a bundled demo")
    dsub = demo.add_subparsers(dest="demo_cmd", required=True, metavar="DEMO")

    p = dsub.add_parser("quickstart", help="the stale-plan story: a booking revised after planning")
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        default=None,
        help="run one executor (default: planfence, then freshness-only for contrast)",
    )
    p.add_argument(
        "--workflow",
        choices=sorted(WORKFLOWS),
        default="booking",
        help="which workflow tells the story",
    )
    p.add_argument(
        "--revise-during-replan",
        action="store_true",
        help="commit another revision while the replan is in flight (shows a block)",
    )
    _add_demo_options(p)
    p.set_defaults(handler=guarded(_quickstart))

    p = dsub.add_parser(
        "workflows", help="booking, fulfilment and deploy workflows under every executor"
    )
    p.add_argument(
        "--runs",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"runs of each workflow per executor (default: {DEFAULT_RUNS}; "
        f"{QUICK_RUNS} with --quick)",
    )
    p.add_argument(
        "--quick", action="store_true", help=f"smoke run: {QUICK_RUNS} runs of each workflow"
    )
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        action="append",
        default=None,
        help="run this executor; repeat for several (default: all of them)",
    )
    _add_demo_options(p)
    p.set_defaults(handler=guarded(_workflows))


def _add_demo_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=None, metavar="URL", help=STORE_HELP)
    add_output(p)


def _times(n: int) -> str:
    return f"{n} time" if n == 1 else f"{n} times"


def _cost_line(executor: str, cost: Cost) -> str:
    return (
        f"  cost: waited {_times(cost.stalls)} ({STALLS[executor]}), {cost.stall_ms:.2f} ms in "
        f"all; traffic {cost.messages} messages, {cost.bytes} bytes"
    )


def _narrate(r: WorkflowResult) -> str:
    lines = [f"[{r.executor}] workflow {r.workflow} (run {r.run})"]
    if r.executor in EXPLAIN:
        lines.append(f"  {EXPLAIN[r.executor]}")
    for step in r.steps:
        changed = "; ".join(describe_change(c) for c in step["stale"])
        if step["verdict"] == "replan":
            lines.append(f"  {r.executor}: stale plan, replan once: {changed}")
        elif step["verdict"] == "block":
            why = changed or step["message"]
            lines.append(f"  {r.executor}: BLOCK ({step['reason']}): {why}".rstrip(": "))
    for a in r.actions:
        if a["executed"]:
            if a["valid"]:
                ok = "valid"
            else:
                stale = "; ".join(describe_change(c) for c in a["stale"])
                ok = "INVALID: acted on a stale plan" + (f" ({stale})" if stale else "")
            lines.append(f"  executed {a['tool']}({json.dumps(a['args'])}) -> {ok}")
        else:
            lines.append(f"  refused {a['tool']}: nothing was executed")
    status = "completed" if r.completed else "not completed"
    lines.append(
        f"  {status}; invalid actions {r.invalid_actions}, replans {r.replans}, blocked {r.blocked}"
    )
    lines.append(_cost_line(r.executor, r.cost))
    return "\n".join(lines)


async def _run(
    url: str,
    jobs: Sequence[tuple[str, str]],
    into: list[WorkflowResult],
    progress: Progress | None = None,
    on_result: Callable[[WorkflowResult], None] | None = None,
    **kw: Any,
) -> None:
    """Play `jobs` in order, appending each result to `into` as it finishes (so an interrupted
    run keeps what it did)."""
    store = create_async_store(url)
    async with store:
        for wf, ex in jobs:
            into.append(await run_workflow(store, wf, ex, **kw))
            if progress is not None:
                progress.advance(f"{ex} {wf}")
            if on_result is not None:
                on_result(into[-1])


def _quickstart(args: argparse.Namespace) -> int:
    executors = [args.executor] if args.executor else ["planfence", "freshness"]
    results: list[WorkflowResult] = []
    with demo_store(given_store(args)) as where:
        asyncio.run(
            _run(
                where.url,
                [(args.workflow, ex) for ex in executors],
                results,
                revise_during_replan=args.revise_during_replan,
            )
        )
    data = {**where.fields(), "runs": [r.to_dict() for r in results]}
    write_out(args, data)
    if args.json:
        print(json.dumps(data))
    else:
        print(where.line())
        for r in results:
            print(_narrate(r))
    return 0


SUMMARY_FIELDS = (
    "runs",
    "completed",
    "invalid_actions",
    "replans",
    "blocked",
    "stalls",
    "stall_ms",
    "messages",
    "bytes",
)


def summarize(results: Sequence[WorkflowResult]) -> dict[str, dict[str, Any]]:
    """Per executor: runs, outcomes, and the coordination cost summed over its runs."""
    summary: dict[str, dict[str, Any]] = {}
    costs: dict[str, Cost] = {}
    for r in results:
        row = summary.setdefault(r.executor, dict.fromkeys(SUMMARY_FIELDS, 0))
        row["runs"] += 1
        row["completed"] += int(r.completed)
        row["invalid_actions"] += r.invalid_actions
        row["replans"] += r.replans
        row["blocked"] += r.blocked
        costs.setdefault(r.executor, Cost()).add(r.cost)
    for ex, cost in costs.items():
        summary[ex].update(cost.to_dict())
    return summary


def _kb(n: int) -> str:
    return f"{n / 1000:.1f} kB" if n >= 1000 else f"{n} B"


TABLE_HEAD = (
    f"{'executor':<10} {'runs':>5} {'completed':>10} {'invalid':>8} {'replans':>8} "
    f"{'blocked':>8}  {'stalls':<18} {'traffic':<20}"
).rstrip()


def table_row(ex: str, row: dict[str, Any]) -> str:
    stalls = f"{row['stalls']} / {row['stall_ms']:.1f} ms"
    traffic = f"{row['messages']} msg / {_kb(row['bytes'])}"
    return (
        f"{ex:<10} {row['runs']:>5} {row['completed']:>10} {row['invalid_actions']:>8} "
        f"{row['replans']:>8} {row['blocked']:>8}  {stalls:<18} {traffic:<20}".rstrip()
    )


def table(summary: dict[str, dict[str, Any]]) -> str:
    lines = [TABLE_HEAD, *(table_row(ex, row) for ex, row in summary.items())]
    lines.extend(table_legend())
    return "\n".join(lines)


def table_legend() -> list[str]:
    lines = []
    lines.append(
        "invalid: executed actions whose plan was stale when the tool ran (judged from the "
        "store's history); blocked: actions refused"
    )
    lines.append(
        "stalls: synchronous coordination waits and their total time (owner head requests, "
        "replica catch-ups, eager writes held for acknowledgements)"
    )
    lines.append("traffic: coordination messages between agents and their size as JSON")
    return lines


def _workflows(args: argparse.Namespace) -> int:
    executors = args.executor or list(EXECUTORS)
    runs = args.runs if args.runs is not None else (QUICK_RUNS if args.quick else DEFAULT_RUNS)
    jobs = [(wf, ex) for ex in executors for wf in WORKFLOWS for _ in range(runs)]
    results: list[WorkflowResult] = []
    start = time.perf_counter()
    interrupted = False
    with demo_store(given_store(args)) as where:
        # In text, the table comes row by row as each executor finishes: a reader that has
        # what it wanted (`| head -3`) can stop the demo there.
        shown = _TableStream(executors, len(WORKFLOWS) * runs) if not args.json else None
        if shown is not None:
            shown.start(where)
        try:
            with Progress("demo workflows", len(jobs)) as progress:
                on_result = shown.add if shown is not None else None
                asyncio.run(_run(where.url, jobs, results, progress, on_result))
        except KeyboardInterrupt:
            interrupted = True
    elapsed = time.perf_counter() - start
    _report_workflows(args, where, results, runs, elapsed, interrupted, shown)
    if interrupted:
        raise KeyboardInterrupt
    return 0


class _TableStream:
    """Prints the workflows table as it fills: the header first, then each executor's row once
    all its runs are done."""

    def __init__(self, executors: Sequence[str], runs_each: int) -> None:
        self.executors = list(executors)
        self.runs_each = runs_each
        self.results: list[WorkflowResult] = []
        self.printed: set[str] = set()

    def start(self, where: DemoStore) -> None:
        print(where.line())
        print(TABLE_HEAD, flush=True)

    def add(self, result: WorkflowResult) -> None:
        self.results.append(result)
        mine = [r for r in self.results if r.executor == result.executor]
        if len(mine) == self.runs_each:
            self._print(result.executor, mine)

    def _print(self, executor: str, results: Sequence[WorkflowResult]) -> None:
        self.printed.add(executor)
        print(table_row(executor, summarize(results)[executor]), flush=True)

    def finish(self) -> None:
        """The rows not printed yet (executors cut short by Ctrl-C), then the legend."""
        for ex in self.executors:
            mine = [r for r in self.results if r.executor == ex]
            if ex not in self.printed and mine:
                self._print(ex, mine)
        print("\n".join(table_legend()))


def _report_workflows(
    args: argparse.Namespace,
    where: DemoStore,
    results: Sequence[WorkflowResult],
    runs: int,
    elapsed: float,
    interrupted: bool,
    shown: _TableStream | None = None,
) -> None:
    summary = summarize(results)
    data = {
        **where.fields(),
        "runs_per_workflow": runs,
        "elapsed_s": round(elapsed, 3),
        "interrupted": interrupted,
        "summary": summary,
        "runs": [r.to_dict() for r in results],
    }
    write_out(args, data)
    if args.json:
        print(json.dumps(data))
        return
    if shown is not None:
        shown.finish()
    else:
        print(where.line())
        print(table(summary))
    per_run = elapsed / len(results) * 1000 if results else 0.0
    print(f"{len(results)} runs in {elapsed:.1f} s ({per_run:.1f} ms per run)")
    if interrupted:
        print("interrupted: the table shows the runs that finished before Ctrl-C")
