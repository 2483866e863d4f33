"""`planfence bench janus` end to end: the calibrated and runbook streams, counting, JSON
contract, the statistics, the plot and the LLM path."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from janus_scripted_llm import ScriptedLLM

from planfence.demos.bench.janus import command as bench
from planfence.demos.bench.janus.llm import run_tasks
from planfence.demos.bench.janus.run import (
    STRATEGIES,
    LatentEvaluator,
    Plan,
    run_all,
)
from planfence.demos.bench.janus.runbook import RunbookConfig, RunbookStream
from planfence.demos.bench.janus.stats import mean_ci, paired, pairs, t_quantile
from planfence.demos.bench.janus.strategies import (
    PAPER_STRATEGIES,
    settle_point,
    strategy_config,
)
from planfence.demos.bench.janus.stream import Rule, Stream, StreamConfig
from planfence.plugins.janus import HashingEncoder, JanusConfig, Task
from planfence.plugins.janus.config import TIE_RULES


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(list(argv))


ROW_KEYS = {
    "rho", "strategy", "seed", "final_accuracy", "comparisons", "comparisons_per_step",
    "cost_proxy", "deployed", "rejected",
}  # fmt: skip


def test_bench_runs_end_to_end_and_writes_the_json_contract(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "janus.json"
    argv = ("--quick", "--steps", "60", "--rho", "0.2", "0.8", "--encoder", "hashing")
    assert bench.run(parse(*argv, "--out", str(out))) == 0
    printed = capsys.readouterr().out
    assert "CONTROLLED SIMULATION" in printed
    assert "Targets at calibrated, R = 0.0, rho = 0.8 (the target cell)" in printed
    doc = json.loads(out.read_text())
    assert {"rows", "paired", "calibration"} <= set(doc)
    assert set(doc["calibration"]) == {"calibrated", "runbook"}
    assert all(set(c) >= {"memory_free", "plain", "ceiling"} for c in doc["calibration"].values())
    assert "Targets at runbook, R = 0.0, rho = 1.0 (the target cell)" in printed
    rows = doc["rows"]
    names = {r["strategy"] for r in rows}
    assert set(STRATEGIES) <= names and "janus-momentum-all" not in names
    cells = {(r["stream"], r["rho"]) for r in rows}
    assert cells == {("calibrated", 0.2), ("calibrated", 0.8), ("runbook", 1.0)}
    assert {r["seed"] for r in rows} == {0, 1}
    assert {r["eval_redraw"] for r in rows} == {0.0}  # --quick: the paired cell
    for r in rows:
        assert set(r) >= ROW_KEYS
        assert 0.0 <= r["final_accuracy"] <= 1.0
        if r["strategy"] in ("memory-free", "ceiling"):
            continue
        # every step is deployed or rejected; unchanged candidates count as steps
        assert r["deployed"] + r["rejected"] == 60
        assert r["comparisons_per_step"] == pytest.approx(r["comparisons"] / 40, abs=1e-4)
        assert r["cost_proxy"] == r["comparisons"] * 25  # triggers x (K + L)
        # the budgeted trigger keeps to its budget (30% of any 50 steps; 40 steps here)
        if r["strategy"].startswith("janus") and r["strategy"] not in (
            "janus-momentum",
            "janus-paper",
        ):
            assert r["comparisons"] <= 15
    by = {(r["rho"], r["strategy"], r["seed"]): r for r in rows}
    rhos = (0.2, 0.8, 1.0)
    assert all(by[rho, "always", s]["comparisons"] == 40 for rho in rhos for s in (0, 1))
    assert all(by[rho, "plain", s]["comparisons"] == 0 for rho in rhos for s in (0, 1))
    for p in doc["paired"]:
        assert {"rho", "a", "b", "mean_diff", "ci_low", "ci_high"} <= set(p)
        assert p["ci_low"] <= p["mean_diff"] <= p["ci_high"]
    assert ("janus", "plain") in {(p["a"], p["b"]) for p in doc["paired"]}


def test_json_flag_prints_the_same_document(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("--quick", "--seeds", "1", "--steps", "40", "--rho", "0.5", "--encoder", "hashing")
    assert bench.run(parse(*argv, "--json", "--stream", "calibrated")) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["encoder"] == "hashing" and len(doc["rows"]) == len(STRATEGIES) + 2
    assert doc["config"]["janus"]["trigger"] == "budget"
    assert bench.run(parse(*argv, "--json", "--stream", "calibrated", "--janus", "paper")) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["rows"]) == len(PAPER_STRATEGIES) + 3  # and the other momentum source
    assert doc["config"]["janus"]["trigger"] == "momentum"


def test_bench_is_deterministic() -> None:
    plan = Plan(1, (0.5,), StreamConfig(stream_tasks=50), HashingEncoder, curve_every=10)
    a = [r.row() for r in run_all(plan)]
    b = [r.row() for r in run_all(plan)]
    assert a == b


def test_bench_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "janus.png"
    argv = ("--quick", "--seeds", "1", "--steps", "40", "--encoder", "hashing")
    assert bench.run(parse(*argv, "--plot", str(png))) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_stream_is_calibrated_and_its_edits_behave_as_documented() -> None:
    stream = Stream(StreamConfig(rho=0.5), seed=0)
    assert len(stream.tasks) == 500 and len(stream.holdout) == 500
    assert stream.expected_accuracy(()) == pytest.approx(0.727, abs=0.02)
    task = stream.holdout[0]
    k = task.meta["kind"]
    good = (Rule("good", k, "a correct rule"),)
    wrong = (*good, Rule("wrong", k, "a misleading rule"))
    assert stream.p_correct(good, task) > stream.p_correct((), task) > stream.p_correct(wrong, task)
    memory: tuple[Rule, ...] = ()
    for step in range(200):  # memory accumulates like a cheatsheet
        proposal = stream.propose(memory, step, stream.attempt(memory, step))
        if not proposal.harmful:
            memory = proposal.memory
    assert len(memory) > 20 and stream.expected_accuracy(memory) > stream.expected_accuracy(())
    assert stream.propose(memory, 7, True) == stream.propose(memory, 7, True)  # seeded


@pytest.mark.parametrize(("rho", "abrupt"), [(0.0, False), (1.0, True)])
def test_rho_decides_the_form_of_harm(rho: float, abrupt: bool) -> None:
    stream = Stream(StreamConfig(rho=rho, harm=1.0), seed=1)
    memory = tuple(Rule("good", i % 20, f"rule {i}") for i in range(30))
    proposals = [stream.propose(memory, step, False) for step in range(30)]
    assert all(p.harmful and p.abrupt == abrupt for p in proposals)
    if abrupt:  # rewrites: content removed
        assert all(not set(memory) <= set(p.memory) for p in proposals)
    else:  # one appended line that looks like any other
        assert all(p.memory[:-1] == memory and len(p.memory) == 31 for p in proposals)


def evaluator(stream: Stream, seed: int = 0) -> LatentEvaluator:
    return LatentEvaluator(stream, np.random.default_rng(seed), np.random.default_rng(seed + 1))


def evaluate(ev: LatentEvaluator, memory: tuple[Rule, ...], tasks: list[Task]) -> list[bool]:
    return asyncio.run(ev.evaluate(memory, tasks))


def test_at_redraw_one_evaluations_are_independent_draws() -> None:
    stream = Stream(StreamConfig(eval_redraw=1.0), seed=2)
    ev = evaluator(stream)
    tasks = stream.tasks[:200]
    a, b = evaluate(ev, (), tasks), evaluate(ev, (), tasks)
    assert a != b
    assert abs(sum(a) / len(a) - stream.expected_accuracy(())) < 0.1


def test_at_redraw_zero_evaluations_are_paired_by_a_latent_threshold() -> None:
    stream = Stream(StreamConfig(eval_redraw=0.0), seed=2)
    ev = evaluator(stream)
    tasks = stream.tasks[:300]
    k = tasks[0].meta["kind"]
    old = (Rule("good", k, "a correct rule"),)
    other = (*old, Rule("good", (k + 1) % 20, "a rule for another kind"))
    harmful = (*old, Rule("wrong", k, "a misleading rule"))
    base = evaluate(ev, old, tasks)
    assert evaluate(ev, old, tasks) == base  # the same memory: the same answers
    # a task is solved exactly when its latent u is below its solve probability
    assert base == [stream.latent[t.id] < stream.p_correct(old, t) for t in tasks]
    # an edit flips only tasks of the kinds whose solve probability it moves
    for memory, moved in ((other, (k + 1) % 20), (harmful, k)):
        flips = [t for t, a, b in zip(tasks, base, evaluate(ev, memory, tasks), strict=True)
                 if a != b]  # fmt: skip
        assert flips and all(t.meta["kind"] == moved for t in flips)
        assert all(
            min(stream.p_correct(old, t), stream.p_correct(memory, t))
            <= stream.latent[t.id]
            < max(stream.p_correct(old, t), stream.p_correct(memory, t))
            for t in flips
        )
    # the agent's own attempt reads the same latent
    assert all(
        stream.attempt(old, i) == (stream.latent[t.id] < stream.p_correct(old, t))
        for i, t in enumerate(tasks)
    )


def test_redraw_share_is_the_chance_of_a_fresh_draw() -> None:
    stream = Stream(StreamConfig(eval_redraw=0.3), seed=3)
    ev = evaluator(stream)
    tasks = stream.tasks
    # with u fresh, a task with p = 0.5 disagrees with its latent outcome half the time
    memory: tuple[Rule, ...] = ()
    latent = [stream.latent[t.id] < stream.p_correct(memory, t) for t in tasks]
    runs = [evaluate(ev, memory, tasks) for _ in range(40)]
    disagree = np.mean([[a != b for a, b in zip(r, latent, strict=True)] for r in runs])
    p = stream.p_many(memory, tasks)
    expected = 0.3 * float(np.mean(2 * p * (1 - p)))
    assert disagree == pytest.approx(expected, abs=0.01)


@pytest.mark.parametrize("redraw", [0.0, 0.3, 1.0])
def test_calibration_holds_at_every_redraw(redraw: float) -> None:
    plain, ceiling, free = [], [], []
    for seed in range(4):
        stream = Stream(StreamConfig(rho=0.5, eval_redraw=redraw), seed)
        free.append(stream.expected_accuracy(()))
        for name, out in (("plain", plain), ("ceiling", ceiling)):
            memory: tuple[Rule, ...] = ()
            for step in range(len(stream.tasks)):
                proposal = stream.propose(memory, step, stream.attempt(memory, step))
                if name == "plain" or not proposal.harmful:
                    memory = proposal.memory
            out.append(stream.expected_accuracy(memory))
    assert float(np.mean(free)) == pytest.approx(0.73, abs=0.015)
    assert float(np.mean(plain)) == pytest.approx(0.795, abs=0.02)
    assert float(np.mean(ceiling)) == pytest.approx(0.84, abs=0.015)


def test_sweep_rows_carry_eval_redraw(tmp_path: Path) -> None:
    out = tmp_path / "janus.json"
    argv = ("--seeds", "1", "--steps", "40", "--rho", "0.8", "--encoder", "hashing")
    assert bench.run(parse(*argv, "--eval-redraw", "0", "1", "--out", str(out))) == 0
    doc = json.loads(out.read_text())
    assert {r["eval_redraw"] for r in doc["rows"]} == {0.0, 1.0}
    assert {p["eval_redraw"] for p in doc["paired"]} == {0.0, 1.0}
    for stream in ("calibrated", "runbook"):
        assert set(doc["calibration"][stream]["by_redraw"]) == {"0.0", "1.0"}
        assert set(doc["curves"]["accuracy"][stream]) == {"0.0", "1.0"}
    assert doc["config"]["eval_redraws"] == [0.0, 1.0]


def test_paired_differences_and_intervals() -> None:
    assert t_quantile(19) == pytest.approx(2.093, abs=0.002)
    assert t_quantile(4) == pytest.approx(2.776, abs=0.01)
    m, lo, hi = mean_ci([1.0, 2.0, 3.0])
    assert m == 2.0 and lo == pytest.approx(2 - 4.303 / math.sqrt(3), abs=0.01) and hi > m
    rows = [
        {"rho": 0.8, "strategy": s, "seed": seed, "final_accuracy": acc + 0.01 * seed}
        for seed in range(5)
        for s, acc in (("janus", 0.80), ("plain", 0.77))
    ]
    (diff,) = paired(rows)
    assert (diff["a"], diff["b"]) == ("janus", "plain")
    assert diff["mean_diff"] == pytest.approx(0.03) and diff["ci_low"] == pytest.approx(0.03)


def test_llm_path_on_a_task_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    lines = [{"question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(8)]
    tasks.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    monkeypatch.setenv("PLANFENCE_LLM_BASE_URL", "http://llm.test/v1")
    monkeypatch.setenv("PLANFENCE_LLM_MODEL", "scripted")

    def reply(body: dict[str, Any]) -> str:
        system = body["messages"][0]["content"]
        user = body["messages"][-1]["content"]
        if "cheatsheet" in system:
            return "<cheatsheet>double the number</cheatsheet>"
        if "insight rules" in system:
            return "ADD: double the number"
        if "double the number" in user:  # the memory helps: answer correctly
            n = int(user.split("What is ")[1].split(" +")[0])
            return f"ANSWER: {2 * n}"
        return "ANSWER: 0"

    scripted = ScriptedLLM(default=reply)
    out = tmp_path / "llm.json"
    args = parse("--tasks", str(tasks), "--out", str(out), "--holdout", "0.25")
    assert run_tasks(args, transport=scripted.transport()) == 0
    doc = json.loads(out.read_text())
    assert [r["strategy"] for r in doc["rows"]] == [
        "dc-rs/plain", "dc-rs/janus", "expel/plain", "expel/janus",
    ]  # fmt: skip
    assert all(r["final_accuracy"] == 1.0 for r in doc["rows"])
    assert doc["tasks"]["holdout"] == 2 and doc["llm"]["calls"] == len(scripted.requests)
    assert "warm-up" in capsys.readouterr().out


def test_llm_path_without_an_endpoint_explains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "q", "answer": "a"}\n{"question": "r", "answer": "b"}\n')
    monkeypatch.delenv("PLANFENCE_LLM_BASE_URL", raising=False)
    assert run_tasks(parse("--tasks", str(tasks))) == 2
    assert "PLANFENCE_LLM_BASE_URL" in capsys.readouterr().out


def test_the_runbook_stream_breaks_the_papers_premise() -> None:
    """Every harmful edit drops content (a truncation, a topic rewrite, a lossy reformat);
    benign edits remove and rewrite lines too; harm costs most of what the team learnt."""
    labels: dict[str, int] = {}
    plain, ceiling = [], []
    for seed in range(3):
        stream = RunbookStream(RunbookConfig(eval_redraw=0.0), seed)
        assert stream.expected_accuracy(()) == pytest.approx(0.2)
        for name, out in (("plain", plain), ("ceiling", ceiling)):
            memory: tuple[Any, ...] = ()
            for step in range(len(stream.tasks)):
                proposal = stream.propose(memory, step, stream.attempt(memory, step))
                assert proposal == stream.propose(memory, step, stream.attempt(memory, step))
                if name == "ceiling":
                    kind = proposal.label.split(":")[1] if proposal.label != "none" else "none"
                    labels[kind] = labels.get(kind, 0) + 1
                    if proposal.harmful:
                        assert proposal.label.endswith(":abrupt")
                        assert not set(memory) <= set(proposal.memory)  # content lost
                if name == "plain" or not proposal.harmful:
                    memory = proposal.memory
            out.append(stream.expected_accuracy(memory))
    assert {"truncate", "topic", "reformat"} <= set(labels)
    assert {"learn", "refine", "consolidate", "note", "prune"} <= set(labels)
    assert float(np.mean(ceiling)) > 0.75 > 0.5 > float(np.mean(plain))


def test_settling_is_where_the_model_stops_moving() -> None:
    probes = [[0.0, 0.1, 0.0, 0.0, 0.0], [0.5, 0.0, 1.0, 1.0, 0.0]]
    prior = [-3.0, 8.0, 1.0, 1.0, 0.5, 3.0]
    moved = [-1.0, 8.0, 1.0, 1.0, 0.5, 3.0]
    assert settle_point([prior, prior, prior], probes, 0.02) == 0
    assert settle_point([prior, moved, moved, moved], probes, 0.02) == 1
    assert settle_point([prior, moved, prior, moved], probes, 0.02) == 3


def test_every_strategy_is_paired_with_janus() -> None:
    found = pairs([*STRATEGIES, "memory-free", "ceiling"])
    others = {a for a, b in found if b == "janus"} | {b for a, b in found if a == "janus"}
    assert others == (set(STRATEGIES) - {"janus"}) | {"ceiling"}


def test_the_default_row_keeps_on_a_tie_and_the_other_tie_rules_run_beside_it() -> None:
    base = JanusConfig(seed=3)
    names = ("janus", "janus-tie-score", "janus-tie-deploy")
    rules = {name: strategy_config(name, base, 0.2).on_tie for name in names}
    assert rules == {"janus": "keep", "janus-tie-score": "score", "janus-tie-deploy": "deploy"}
    assert set(rules.values()) == set(TIE_RULES) and set(names) <= set(STRATEGIES)
    for name in names:  # each differs from the default row by its tie rule alone
        assert replace(strategy_config(name, base, 0.2), on_tie="keep") == base
    assert len(STRATEGIES) >= 14
