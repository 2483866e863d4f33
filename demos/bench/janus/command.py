"""`planfence bench janus`: does gating memory updates with Janus pay off?

Default: two simulated streams, the calibrated one (see `stream`) in every cell of
eval_redraw R = 0, 0.3, 1 by rho = 0.2, 0.5, 0.8, and the runbook stream (see `runbook`, where
the paper's premise fails) at every R; every strategy over 20 seeds, with paired differences,
the verdict on the targets and the calibration's settling. With
`--tasks FILE` it runs the real path instead: DC-RS and ExpeL with an LLM on your JSONL tasks
(see `llm`), using PLANFENCE_LLM_BASE_URL, PLANFENCE_LLM_MODEL and PLANFENCE_LLM_API_KEY.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from typing import Any

from planfence.adapters.cli.common import UsageError, add_output, positive_int
from planfence.demos.bench.harness.options import add_quick, pick
from planfence.demos.bench.harness.output import new_results, run_bench
from planfence.demos.support import Progress
from planfence.plugins.janus import Encoder, JanusConfig
from planfence.plugins.janus.config import MOMENTUM_SOURCES, MomentumSource
from planfence.plugins.janus.encoders import wordllama_available

from .report import BANNER, plot, print_calibration, print_paired, print_tables, verdict_lines
from .run import STREAMS, Plan, Run, SharedEncoder, run_all
from .runbook import RunbookConfig
from .stats import calibration, paired
from .stream import StreamConfig
from .tasks import DEFAULT_FAMILY, write_tasks

HELP = "Janus memory-update gating on a calibrated simulated stream (or your tasks with an LLM)"
SEEDS, QUICK_SEEDS = 20, 2
STEPS, QUICK_STEPS = 500, 120
RHOS, QUICK_RHOS = (0.2, 0.5, 0.8), (0.8,)
REDRAWS, QUICK_REDRAWS = (0.0, 0.3, 1.0), (0.0,)


def unit_interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def holdout_share(text: str) -> float:
    value = unit_interval(text)
    if value in (0.0, 1.0):
        raise argparse.ArgumentTypeError(f"must be strictly between 0 and 1, got {text}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_quick(
        p,
        f"{QUICK_SEEDS} seeds x {QUICK_STEPS} steps at rho {QUICK_RHOS[0]} (runbook: 1), "
        f"R {QUICK_REDRAWS[0]}",
    )
    p.add_argument(
        "--seeds",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"seeds per rho (default: {SEEDS}; {QUICK_SEEDS} with --quick)",
    )
    p.add_argument(
        "--steps",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"stream tasks per seed (default: {STEPS}; {QUICK_STEPS} with --quick)",
    )
    p.add_argument(
        "--rho",
        type=unit_interval,
        nargs="+",
        default=None,
        metavar="R",
        help="calibrated stream: share of harmful edits that are abrupt rewrites (the "
        "runbook stream's are all abrupt); several values sweep "
        f"(default: {' '.join(map(str, RHOS))}; {QUICK_RHOS[0]} with --quick)",
    )
    p.add_argument(
        "--eval-redraw",
        type=unit_interval,
        nargs="+",
        default=None,
        metavar="R",
        help="chance that an evaluation draws a fresh outcome instead of the task's latent "
        "one: 0 = paired (temperature 0), 1 = independent draws; several values sweep "
        f"(default: {' '.join(map(str, REDRAWS))}; {QUICK_REDRAWS[0]} with --quick)",
    )
    p.add_argument(
        "--stream",
        choices=(*STREAMS, "both"),
        default="both",
        help="the calibrated stream, the runbook stream (the paper's premise fails there), "
        "or both (default: %(default)s)",
    )
    p.add_argument(
        "--janus",
        choices=("default", "paper"),
        default="default",
        help="the Janus under test: planfence's defaults (budgeted trigger, aimed tasks, a tie "
        "keeps the current memory), with its ablations and the paper's method beside it; or "
        "the paper's method with the paper's study (default: %(default)s)",
    )
    p.add_argument(
        "--encoder",
        choices=("auto", "wordllama", "hashing"),
        default="auto",
        help="phi: wordllama (the embeddings extra) or the hashing encoder; auto "
        "takes wordllama when installed (default: %(default)s)",
    )
    p.add_argument(
        "--momentum-source",
        choices=MOMENTUM_SOURCES,
        default=None,
        help="Janus's momentum source (default: the controller's default, "
        f"{JanusConfig().momentum_source}); the other one also runs, as "
        "janus-momentum-<source>",
    )
    p.add_argument(
        "--order",
        choices=("shuffled", "dwell"),
        default="shuffled",
        help="stream order: a seeded shuffle, or blocks of one kind, an ablation "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--curve-every",
        type=positive_int,
        default=25,
        metavar="N",
        help="held-out accuracy every N steps (default: %(default)s)",
    )
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=None,
        metavar="N",
        help="worker processes, one seed at a time each; results do not depend on it "
        "(default: the CPUs available)",
    )
    add_output(p)
    p.add_argument("--plot", metavar="FILE", help="also save a figure (needs planfence[bench])")
    p.add_argument(
        "--tasks",
        metavar="FILE",
        help="JSONL tasks ({'question', 'answer'} per line): run DC-RS and ExpeL with "
        "an LLM instead of the simulation (needs PLANFENCE_LLM_BASE_URL and "
        "PLANFENCE_LLM_MODEL; default: the simulated stream)",
    )
    p.add_argument(
        "--make-tasks",
        metavar="FILE",
        help="write a JSONL task file for --tasks from a reasoning-gym family and exit "
        "(needs planfence[tasks]; default: run the benchmark)",
    )
    p.add_argument(
        "--family",
        default=DEFAULT_FAMILY,
        help=f"with --make-tasks: the reasoning-gym family (default: {DEFAULT_FAMILY})",
    )
    p.add_argument(
        "--count",
        type=positive_int,
        default=100,
        metavar="N",
        help="with --make-tasks: how many tasks (default: 100)",
    )
    p.add_argument(
        "--updater",
        choices=("dc-rs", "expel", "both"),
        default="both",
        help="with --tasks: which base updater(s) to run (default: %(default)s)",
    )
    p.add_argument(
        "--holdout",
        type=holdout_share,
        default=0.3,
        help="with --tasks: fraction kept for the final test (default: %(default)s)",
    )
    p.add_argument(
        "--llm-budget",
        type=positive_int,
        default=None,
        metavar="N",
        help="with --tasks: stop after this many LLM calls (default: no limit)",
    )


def encoder_factory(name: str) -> tuple[str, Callable[[], Encoder]]:
    """The encoder's resolved name and a factory (one cached encoder per process)."""
    if name == "auto":
        name = "wordllama" if wordllama_available() else "hashing"
    factory = SharedEncoder("wordllama" if name == "wordllama" else "hashing")
    factory()  # loads now, in this process: a missing extra is reported before any work
    return name, factory


def default_jobs() -> int:
    """The CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def curves(runs: list[Run], every: int, steps: int) -> dict[str, Any]:
    """Mean held-out accuracy along the stream: accuracy[stream][R][rho][strategy]."""
    out: dict[str, Any] = {"steps": list(range(every, steps + 1, every)), "accuracy": {}}
    for stream, redraw, rho in dict.fromkeys((r.stream, r.eval_redraw, r.rho) for r in runs):
        cell = [r for r in runs if (r.stream, r.eval_redraw, r.rho) == (stream, redraw, rho)]
        per: dict[str, list[float]] = {}
        for name in dict.fromkeys(r.strategy for r in cell):
            mine = [r.curve for r in cell if r.strategy == name]
            per[name] = [round(statistics.fmean(c), 4) for c in zip(*mine, strict=True)]
        out["accuracy"].setdefault(stream, {}).setdefault(str(redraw), {})[str(rho)] = per
    return out


def document(runs: list[Run], plan: Plan, encoder: str, steps: int) -> dict[str, Any]:
    rows = [r.row() for r in runs]
    return {
        "simulation": True,
        "rows": rows,
        "paired": paired(rows),
        "calibration": calibration(rows),
        "curves": curves(runs, plan.curve_every, steps),
        "config": {
            "seeds": plan.seeds,
            "streams": list(plan.streams),
            "rhos": list(plan.rhos),
            "eval_redraws": list(plan.redraws),
            "encoder": encoder,
            "momentum_source": plan.momentum_source,
            "stream": asdict(plan.stream),
            "runbook": asdict(plan.runbook),
            "janus_under_test": plan.janus,
            "janus": plan.base(0).to_dict(),
        },
    }


def show(doc: Mapping[str, Any]) -> None:
    print(BANNER)
    c = doc["config"]
    print(f"{c['seeds']} seeds x streams {c.get('streams', ['calibrated'])} x R "
          f"{c['eval_redraws']} x rho {c['rhos']} (runbook: rho 1.0), "
          f"{c['stream']['stream_tasks']} stream tasks, encoder {c['encoder']}, "
          f"Janus under test: {c.get('janus_under_test', 'default')}, "
          f"momentum source {c['momentum_source']}\n")  # fmt: skip
    if not doc["rows"]:
        print("no seed finished")
        return
    print_calibration(doc["calibration"])
    print_tables(doc["rows"])
    print_paired(doc["paired"])
    for line in verdict_lines(doc["rows"], doc["paired"]):
        print(line)


def run(args: argparse.Namespace) -> int:
    if args.make_tasks:
        n = write_tasks(args.make_tasks, args.family, args.count, seed=0)
        print(f"wrote {n} {args.family} tasks to {args.make_tasks}")
        return 0
    if args.tasks:
        from .llm import run_tasks

        return run_tasks(args)
    seeds = pick(args.seeds, args.quick, SEEDS, QUICK_SEEDS)
    steps = pick(args.steps, args.quick, STEPS, QUICK_STEPS)
    if steps <= JanusConfig().support_size:
        raise UsageError(f"--steps must be more than {JanusConfig().support_size} (the warm-up)")
    rhos = tuple(args.rho) if args.rho else (QUICK_RHOS if args.quick else RHOS)
    redraws = tuple(args.eval_redraw or (QUICK_REDRAWS if args.quick else REDRAWS))
    encoder, factory = encoder_factory(args.encoder)
    source: MomentumSource = args.momentum_source or JanusConfig().momentum_source
    stream = replace(StreamConfig(), stream_tasks=steps, order=args.order)
    jobs = args.jobs or default_jobs()
    streams = STREAMS if args.stream == "both" else (args.stream,)
    plan = Plan(
        seeds,
        rhos,
        stream,
        factory,
        source,
        args.curve_every,
        jobs,
        redraws,
        streams=streams,
        janus=args.janus,
        runbook=RunbookConfig(stream_tasks=steps),
    )
    runs: list[Run] = []
    results = new_results()

    def measure() -> None:
        try:
            with Progress("bench janus", seeds) as progress:
                run_all(plan, progress=progress.advance, runs=runs)
        finally:
            results.update(document(runs, plan, encoder, steps), interrupted=results["interrupted"])

    code = run_bench(args, results, measure, show)
    if args.plot and results["rows"]:
        plot(results, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr if args.json else sys.stdout)
    return code
