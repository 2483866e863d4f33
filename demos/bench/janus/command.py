"""`planfence bench janus`: does gating memory updates with Janus pay off?

Default: a controlled simulation (no LLM, deterministic, offline; see `janus_sim`). Over several
seeds it runs the plain updater, Janus, always-compare, random and periodic triggering at
Janus's observed rate, and Janus without each evaluation subset, and reports final held-out
accuracy, comparisons, deployed and rejected candidates, and accuracy along the stream.

With `--tasks FILE` it runs the real path instead: DC-RS and ExpeL with an LLM evaluator on your
JSONL tasks (see `janus_llm`), using the endpoint in PLANFENCE_LLM_BASE_URL,
PLANFENCE_LLM_MODEL and PLANFENCE_LLM_API_KEY.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from planfence.adapters.cli.common import UsageError, add_output, positive_int
from planfence.plugins.janus import (
    CachedEncoder,
    FunctionEvaluator,
    HashingEncoder,
    JanusConfig,
    JanusController,
    render_memory,
)

from .._support import Progress
from .common import add_quick, new_results, pick, run_bench
from .janus_sim import World, WorldConfig, WorldEncoder, empty_memory

HELP = "Janus memory-update gating on a controlled stream (or your tasks with an LLM)"

STRATEGIES = (
    "plain",
    "janus",
    "always",
    "random",
    "periodic",
    "janus-no-coverage",
    "janus-no-boundary",
    "janus-no-fresh",
)
BANNER = (
    "CONTROLLED SIMULATION: a synthetic task stream, a rule-based solver and a deliberately "
    "faulty updater (no LLM).\nThe numbers show how the controller behaves on a world built to "
    "have the paper's failure modes; they are not LLM results."
)


SEEDS, QUICK_SEEDS = 5, 2
STEPS, QUICK_STEPS = 300, 100


def holdout_share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_quick(p, f"{QUICK_SEEDS} seeds x {QUICK_STEPS} steps")
    p.add_argument(
        "--seeds",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"number of seeds, one simulated world each (default: {SEEDS}; "
        f"{QUICK_SEEDS} with --quick)",
    )
    p.add_argument(
        "--steps",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"stream length per seed (default: {STEPS}; {QUICK_STEPS} with --quick)",
    )
    p.add_argument(
        "--curve-every",
        type=positive_int,
        default=10,
        metavar="N",
        help="held-out accuracy every N steps",
    )
    add_output(p)
    p.add_argument("--plot", metavar="FILE", help="also save a figure (needs planfence[bench])")
    p.add_argument(
        "--encoder",
        choices=("world", "hashing"),
        default="world",
        help="simulation encoder: the world's sentence-encoder stand-in or the "
        "product's offline hashing encoder",
    )
    p.add_argument(
        "--diagnose",
        action="store_true",
        help="also report, per updater event, how often each trigger fires and how often it "
        "fires on harmful updates (harm measured on the held-out set, never shown to Janus)",
    )
    p.add_argument(
        "--tasks",
        metavar="FILE",
        help="JSONL tasks ({'question', 'answer'} per line): run DC-RS and ExpeL with an LLM "
        "on them instead of the simulation (needs PLANFENCE_LLM_BASE_URL and PLANFENCE_LLM_MODEL;"
        " default: the controlled simulation)",
    )
    p.add_argument(
        "--updater",
        choices=("dc-rs", "expel", "both"),
        default="both",
        help="with --tasks: which base updater(s) to run",
    )
    p.add_argument(
        "--holdout",
        type=holdout_share,
        default=0.3,
        help="with --tasks: fraction kept for the final test",
    )
    p.add_argument(
        "--llm-budget",
        type=positive_int,
        default=None,
        metavar="N",
        help="with --tasks: stop after this many LLM calls (default: no limit)",
    )


@dataclass
class Run:
    strategy: str
    seed: int
    final_accuracy: float
    comparisons: int
    deployed: int
    rejected: int
    candidates: int = 0
    curve: list[float] = field(default_factory=list)
    trace: list[dict[str, Any]] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "seed": self.seed,
            "final_accuracy": round(self.final_accuracy, 4),
            "comparisons": self.comparisons,
            "deployed": self.deployed,
            "rejected": self.rejected,
        }


async def simulate(
    world: World,
    strategy: str,
    config: JanusConfig,
    encoder: CachedEncoder,
    curve_every: int,
    *,
    diagnose: bool = False,
) -> Run:
    """One pass over the stream with one strategy; returns its counts and held-out curve.

    With `diagnose`, every post-warm-up candidate that changes the memory text is traced: the
    updater's event, cos(z, m), whether it was compared and deployed, and the change in held-out
    accuracy it would cause (measured here, for the report; the controller never sees it).
    """
    controller = JanusController(FunctionEvaluator(world.correct), config=config, encoder=encoder)
    memory = empty_memory()
    curve: list[float] = []
    recent: deque[bool] = deque(maxlen=4)
    trace: list[dict[str, Any]] = []
    for step, task in enumerate(world.stream, 1):
        solved = world.correct(memory, task)
        recent.append(solved)
        failing = len(recent) == recent.maxlen and sum(not r for r in recent) >= 3
        candidate = world.propose(memory, task, step, solved, failing=failing)
        verdict = await controller.consider(memory, candidate, task)
        if (
            diagnose
            and step > config.support_size
            and render_memory(candidate) != render_memory(memory)
        ):
            trace.append(
                {
                    "step": step,
                    "event": event_kind(world.last_event),
                    "cosine": verdict.trigger.cosine if verdict.trigger else None,
                    "compared": verdict.compared,
                    "deployed": verdict.deploy,
                    "delta": world.accuracy(candidate) - world.accuracy(memory),
                }
            )
        if verdict.deploy:
            memory = candidate
        if step % curve_every == 0:
            curve.append(world.accuracy(memory))
    c = controller.state.counters
    return Run(
        strategy,
        world.seed,
        world.accuracy(memory),
        c.comparisons,
        c.deployed,
        c.rejected,
        c.candidates,
        curve,
        trace,
    )


def event_kind(event: str) -> str:
    """The updater's event, with a rewrite kept as its own kind and evictions folded in."""
    parts = event.split("+")
    return "rewrite" if "rewrite" in parts else parts[0]


def strategy_configs(seed: int, janus_rate: float) -> dict[str, JanusConfig]:
    """Settings of every strategy but Janus itself; random/periodic match Janus's rate.

    `janus_rate` is comparisons per changed candidate, the unit both ablations count in.
    """
    base = JanusConfig(seed=seed)
    rate = min(1.0, max(janus_rate, 1e-6))
    return {
        "plain": replace(base, trigger="never"),
        "always": replace(base, trigger="always"),
        "random": replace(base, trigger="random", random_rate=rate),
        "periodic": replace(base, trigger="periodic", period=max(1, round(1 / rate))),
        "janus-no-coverage": replace(base, use_coverage=False),
        "janus-no-boundary": replace(base, use_boundary=False),
        "janus-no-fresh": replace(base, use_fresh=False),
    }


async def run_simulation(
    seeds: int,
    steps: int,
    curve_every: int,
    *,
    encoder_name: str = "world",
    diagnose: bool = False,
    progress: Callable[[str], None] = lambda _: None,
    runs: list[Run] | None = None,
) -> dict[str, Any]:
    """Every strategy on `seeds` worlds; the JSON document the bench writes. `runs` receives
    each seed's runs as soon as that seed is done (what a Ctrl-C leaves to report)."""
    world_config = WorldConfig(stream_length=steps)
    runs = [] if runs is None else runs
    for seed in range(seeds):
        world = World(world_config, seed)
        inner = WorldEncoder(world) if encoder_name == "world" else HashingEncoder()
        encoder = CachedEncoder(inner)
        janus = await simulate(
            world, "janus", JanusConfig(seed=seed), encoder, curve_every, diagnose=diagnose
        )
        configs = strategy_configs(seed, janus.comparisons / max(1, janus.candidates))
        by_name = {"janus": janus}
        for name, cfg in configs.items():
            traced = diagnose and name in DIAGNOSED
            by_name[name] = await simulate(world, name, cfg, encoder, curve_every, diagnose=traced)
        runs.extend(by_name[s] for s in STRATEGIES)
        progress(f"seed {seed}: done")
    return simulation_doc(runs, steps, curve_every, encoder_name, diagnose)


def simulation_doc(
    runs: list[Run], steps: int, curve_every: int, encoder_name: str, diagnose: bool
) -> dict[str, Any]:
    """The JSON document for the seeds in `runs` (every strategy of each)."""
    world_config = WorldConfig(stream_length=steps)
    seeds = len({r.seed for r in runs})
    points = list(range(curve_every, steps + 1, curve_every))
    curves: dict[str, Any] = {"steps": points, "accuracy": {}}
    for s in STRATEGIES:
        mine = [r.curve for r in runs if r.strategy == s]
        curves["accuracy"][s] = (
            [round(statistics.fmean(col), 4) for col in zip(*mine, strict=True)] if mine else []
        )
    doc: dict[str, Any] = {
        "simulation": True,
        "note": "controlled simulation: synthetic stream, rule-based solver, faulty updater",
        "config": {
            "seeds": seeds,
            "steps": steps,
            "encoder": encoder_name,
            "world": asdict(world_config),
            "janus": JanusConfig().to_dict(),
        },
        "rows": [r.row() for r in runs],
        "curves": curves,
    }
    if diagnose:
        doc["diagnostics"] = diagnostics(runs)
    return doc


DIAGNOSED = ("janus", "always", "random", "periodic")


def diagnostics(runs: list[Run]) -> dict[str, Any]:
    """Trigger quality per strategy and, per updater event, what the trigger did with it.

    An update is harmful when deploying it would lower held-out accuracy. Precision: share of
    comparisons spent on harmful updates; recall: share of harmful updates compared;
    weighted recall: the same, weighted by how much held-out accuracy each would cost.
    """
    out: dict[str, Any] = {}
    for s in DIAGNOSED:
        trace = [t for r in runs if r.strategy == s for t in r.trace]
        if not trace:
            continue
        harmful = [t for t in trace if t["delta"] < 0]
        compared = [t for t in trace if t["compared"]]
        loss = sum(-t["delta"] for t in harmful)
        events: dict[str, Any] = {}
        for kind in dict.fromkeys(t["event"] for t in trace):
            mine = [t for t in trace if t["event"] == kind]
            fired = [t for t in mine if t["compared"]]
            cosines = [t["cosine"] for t in mine if t["cosine"] is not None]
            events[kind] = {
                "n": len(mine),
                "mean_cosine": statistics.fmean(cosines) if cosines else None,
                "compared": len(fired) / len(mine),
                "rejected_when_compared": (
                    sum(not t["deployed"] for t in fired) / len(fired) if fired else None
                ),
                "mean_delta": statistics.fmean(t["delta"] for t in mine),
                "harmful": sum(t["delta"] < 0 for t in mine) / len(mine),
            }
        out[s] = {
            "candidates": len(trace),
            "harmful": len(harmful),
            "compared": len(compared),
            "precision": sum(t["delta"] < 0 for t in compared) / len(compared) if compared else 0,
            "recall": sum(t["compared"] for t in harmful) / len(harmful) if harmful else 0,
            "weighted_recall": (
                sum(-t["delta"] for t in harmful if t["compared"]) / loss if loss else 0
            ),
            "harmful_deployed": sum(t["deployed"] for t in harmful),
            "events": events,
        }
    return out


def print_diagnostics(diag: dict[str, Any]) -> None:
    print("Trigger diagnostics (harmful = deploying it lowers held-out accuracy; all seeds):")
    print(f"{'strategy':<12}{'candidates':>11}{'harmful':>9}{'compared':>10}{'precision':>11}"
          f"{'recall':>8}{'w.recall':>10}{'harm deployed':>15}")  # fmt: skip
    for s, d in diag.items():
        print(
            f"{s:<12}{d['candidates']:>11}{d['harmful']:>9}{d['compared']:>10}"
            f"{d['precision']:>11.2f}{d['recall']:>8.2f}{d['weighted_recall']:>10.2f}"
            f"{d['harmful_deployed']:>15}"
        )
    if "janus" not in diag:
        return
    print()
    print("Janus, per updater event:")
    print(f"{'event':<15}{'n':>6}{'cos(z,m)':>10}{'compared':>10}{'rejected|cmp':>14}"
          f"{'harmful':>9}{'mean d acc':>12}")  # fmt: skip
    for kind, e in sorted(diag["janus"]["events"].items(), key=lambda kv: -kv[1]["n"]):
        cos = "-" if e["mean_cosine"] is None else f"{e['mean_cosine']:+.2f}"
        rej = "-" if e["rejected_when_compared"] is None else f"{e['rejected_when_compared']:.2f}"
        print(
            f"{kind:<15}{e['n']:>6}{cos:>10}{e['compared']:>10.2f}{rej:>14}"
            f"{e['harmful']:>9.2f}{e['mean_delta']:>+12.4f}"
        )


def summarise(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Mean and spread (population stdev, min, max) per strategy."""
    out: dict[str, dict[str, float]] = {}
    for s in dict.fromkeys(r["strategy"] for r in rows):
        mine = [r for r in rows if r["strategy"] == s]
        acc = [r["final_accuracy"] for r in mine]
        out[s] = {
            "accuracy_mean": statistics.fmean(acc),
            "accuracy_sd": statistics.pstdev(acc),
            "accuracy_min": min(acc),
            "accuracy_max": max(acc),
            "comparisons": statistics.fmean(r["comparisons"] for r in mine),
            "deployed": statistics.fmean(r["deployed"] for r in mine),
            "rejected": statistics.fmean(r["rejected"] for r in mine),
        }
    return out


def print_table(summary: dict[str, dict[str, float]]) -> None:
    print(f"{'strategy':<20}{'final acc (mean ± sd)':>24}{'min..max':>15}"
          f"{'comparisons':>13}{'deployed':>10}{'rejected':>10}")  # fmt: skip
    for s, v in summary.items():
        acc = f"{v['accuracy_mean']:.3f} ± {v['accuracy_sd']:.3f}"
        span = f"{v['accuracy_min']:.3f}..{v['accuracy_max']:.3f}"
        print(
            f"{s:<20}{acc:>24}{span:>15}{v['comparisons']:>13.1f}"
            f"{v['deployed']:>10.1f}{v['rejected']:>10.1f}"
        )


def verdict_lines(rows: list[dict[str, Any]], summary: dict[str, dict[str, float]]) -> list[str]:
    """The target check: Janus >= always with <= 40% of its comparisons, and beats plain."""
    j, a, p = summary["janus"], summary["always"], summary["plain"]
    share = j["comparisons"] / a["comparisons"] if a["comparisons"] else float("nan")
    seeds = sorted({r["seed"] for r in rows})
    acc = {(r["strategy"], r["seed"]): r["final_accuracy"] for r in rows}
    wins = sum(acc[("janus", s)] > acc[("plain", s)] for s in seeds)
    gain = j["accuracy_mean"] - p["accuracy_mean"]
    lines = [
        f"Janus vs always-compare: accuracy {j['accuracy_mean']:.3f} vs {a['accuracy_mean']:.3f} "
        f"with {share:.0%} of its comparisons",
        f"Janus vs plain updater: {gain:+.3f} mean accuracy, better on {wins}/{len(seeds)} seeds",
    ]
    met = j["accuracy_mean"] >= a["accuracy_mean"] and share <= 0.4 and wins == len(seeds)
    lines.append(f"target (>= always, <= 40% of its comparisons, beats plain): "
                 f"{'met' if met else 'NOT met'}")  # fmt: skip
    return lines


def plot(doc: dict[str, Any], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'planfence[bench]'") from None
    summary = summarise(doc["rows"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    steps = doc["curves"]["steps"]
    for s in ("plain", "janus", "always", "random", "periodic"):
        left.plot(steps, doc["curves"]["accuracy"][s], label=s)
    left.set_xlabel("stream step")
    left.set_ylabel("held-out accuracy (mean over seeds)")
    left.set_title("Accuracy along the stream (controlled simulation)")
    left.legend()
    names = list(summary)
    right.scatter([summary[n]["comparisons"] for n in names],
                  [summary[n]["accuracy_mean"] for n in names])  # fmt: skip
    for n in names:
        right.annotate(n, (summary[n]["comparisons"], summary[n]["accuracy_mean"]), fontsize=8)
    right.set_xlabel("memory comparisons")
    right.set_ylabel("final held-out accuracy")
    right.set_title("Accuracy vs comparisons")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _show(doc: Mapping[str, Any]) -> None:
    print(BANNER)
    c = doc["config"]
    print(f"{c['seeds']} seeds x {c['steps']} steps, 8 strategies, encoder: {c['encoder']}\n")
    if not doc["rows"]:
        print("no seed finished")
        return
    summary = summarise(doc["rows"])
    print_table(summary)
    print()
    for line in verdict_lines(doc["rows"], summary):
        print(line)
    if "diagnostics" in doc:
        print()
        print_diagnostics(doc["diagnostics"])


def run(args: argparse.Namespace) -> int:
    if args.tasks:
        from .janus_llm import run_tasks

        return run_tasks(args)
    seeds = pick(args.seeds, args.quick, SEEDS, QUICK_SEEDS)
    steps = pick(args.steps, args.quick, STEPS, QUICK_STEPS)
    if steps <= JanusConfig().support_size:
        raise UsageError(f"--steps must be more than {JanusConfig().support_size} (the warm-up)")
    runs: list[Run] = []
    results = new_results()

    def measure() -> None:
        try:
            with Progress("bench janus", seeds) as progress:
                asyncio.run(
                    run_simulation(
                        seeds,
                        steps,
                        args.curve_every,
                        encoder_name=args.encoder,
                        diagnose=args.diagnose,
                        progress=progress.advance,
                        runs=runs,
                    )
                )
        finally:
            doc = simulation_doc(runs, steps, args.curve_every, args.encoder, args.diagnose)
            results.update(doc, interrupted=results["interrupted"])

    code = run_bench(args, results, measure, _show)
    if args.plot and results["rows"]:
        plot(results, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr if args.json else sys.stdout)
    return code
