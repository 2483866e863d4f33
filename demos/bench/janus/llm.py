"""`planfence bench janus --tasks FILE`: DC-RS and ExpeL with an LLM, with and without Janus.

Each line of FILE is a JSON object {"question": ..., "answer": ...} (optional "id"). The first
part of the file is the stream; the last `--holdout` fraction is the final test. For each base
updater the stream runs twice, plain and under Janus, solving every task with the deployed
memory, proposing a candidate from the feedback, and (for Janus) judging it with the LLM
evaluator. The endpoint comes from PLANFENCE_LLM_BASE_URL, PLANFENCE_LLM_MODEL and
PLANFENCE_LLM_API_KEY; `--llm-budget` caps the number of calls.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from planfence.adapters.cli.common import write_out
from planfence.plugins.janus import (
    DCRSUpdater,
    ExpeLUpdater,
    JanusConfig,
    JanusConfigError,
    JanusController,
    LLMEvaluator,
    MemoryUpdater,
    Task,
)
from planfence.plugins.janus.errors import LLMError, UpdaterOutputError
from planfence.plugins.janus.llm import ChatClient, LLMSettings
from planfence.plugins.janus.tasks import Feedback


def load_tasks(path: str) -> list[Task]:
    """Tasks from a JSONL file; raises JanusConfigError on a malformed line."""
    tasks: list[Task] = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            question, answer = str(data["question"]), str(data["answer"])
        except (ValueError, KeyError, TypeError) as exc:
            raise JanusConfigError(
                f"{path}:{n}: expected {{'question', 'answer'}}: {exc}"
            ) from None
        tasks.append(Task.create(question, answer, id=str(data.get("id") or f"t{n}")))
    return tasks


def make_updater(name: str, client: ChatClient) -> MemoryUpdater:
    return DCRSUpdater(client) if name == "dc-rs" else ExpeLUpdater(client)


async def run_stream(
    updater_name: str,
    janus: bool,
    stream: list[Task],
    holdout: list[Task],
    client: ChatClient,
    config: JanusConfig,
) -> dict[str, Any]:
    """One pass: returns the bench row plus the count of unusable updater replies."""
    updater = make_updater(updater_name, client)
    evaluator = LLMEvaluator(client)
    controller = JanusController(
        evaluator, config=config if janus else replace(config, trigger="never")
    )
    memory = updater.initial_memory()
    malformed = 0
    for task in stream:
        attempt = await evaluator.solve(memory, task)
        try:
            candidate = await updater.propose(
                memory, task, Feedback(attempt.output, attempt.correct)
            )
        except UpdaterOutputError:
            malformed += 1  # the updater produced nothing usable: the memory stays
            continue
        verdict = await controller.consider(memory, candidate, task)
        if verdict.deploy:
            memory = candidate
    correct = await evaluator.evaluate(memory, holdout)
    c = controller.state.counters
    return {
        "strategy": f"{updater_name}/{'janus' if janus else 'plain'}",
        "seed": config.seed,
        "final_accuracy": round(sum(correct) / len(correct), 4) if correct else 0.0,
        "comparisons": c.comparisons,
        "deployed": c.deployed,
        "rejected": c.rejected,
        "malformed_updates": malformed,
    }


async def run_llm(
    args: argparse.Namespace, *, transport: httpx.AsyncBaseTransport | None = None
) -> dict[str, Any]:
    tasks = load_tasks(args.tasks)
    cut = max(1, min(len(tasks) - 1, round(len(tasks) * (1 - args.holdout))))
    stream, holdout = tasks[:cut], tasks[cut:]
    settings = LLMSettings.from_env(max_calls=args.llm_budget)
    names = ("dc-rs", "expel") if args.updater == "both" else (args.updater,)
    config = JanusConfig(seed=0)
    rows = []
    async with ChatClient(settings, transport=transport) as client:
        for name in names:
            for janus in (False, True):
                rows.append(await run_stream(name, janus, stream, holdout, client, config))
        usage = {"calls": client.usage.calls, "total_tokens": client.usage.total_tokens}
    return {
        "simulation": False,
        "tasks": {"file": args.tasks, "stream": len(stream), "holdout": len(holdout)},
        "llm": {"model": settings.model, **usage},
        "rows": rows,
        "curves": {},
    }


def run_tasks(
    args: argparse.Namespace, *, transport: httpx.AsyncBaseTransport | None = None
) -> int:
    try:
        doc = asyncio.run(run_llm(args, transport=transport))
    except (JanusConfigError, LLMError, OSError) as exc:
        print(f"planfence bench janus --tasks: {exc}")
        return 2
    write_out(args, doc)
    if args.json:
        print(json.dumps(doc, sort_keys=True))
        return 0
    t = doc["tasks"]
    print(f"LLM run on {t['file']}: {t['stream']} stream tasks, {t['holdout']} held out; "
          f"model {doc['llm']['model']}, {doc['llm']['calls']} calls")  # fmt: skip
    if t["stream"] <= JanusConfig().support_size:
        print(f"note: the stream is not longer than Janus's warm-up ({JanusConfig().support_size} "
              "tasks), so Janus deploys every candidate")  # fmt: skip
    print(f"{'run':<16}{'final acc':>10}{'comparisons':>13}{'deployed':>10}{'rejected':>10}"
          f"{'malformed':>11}")  # fmt: skip
    for r in doc["rows"]:
        print(f"{r['strategy']:<16}{r['final_accuracy']:>10.3f}{r['comparisons']:>13}"
              f"{r['deployed']:>10}{r['rejected']:>10}{r['malformed_updates']:>11}")  # fmt: skip
    if args.out:
        print(f"wrote {args.out}")
    return 0
