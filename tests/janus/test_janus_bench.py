"""`planfence bench janus` end to end: a short simulation, JSON shape, plot, and the LLM path."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
from janus_scripted_llm import ScriptedLLM

from planfence.demos.bench import janus as bench
from planfence.demos.bench.janus_llm import run_tasks
from planfence.demos.bench.janus_sim import World, WorldConfig, WorldEncoder, empty_memory
from planfence.plugins.janus import cosine


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_bench_runs_end_to_end_and_writes_valid_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "janus.json"
    assert bench.run(parse("--seeds", "2", "--steps", "60", "--out", str(out))) == 0
    printed = capsys.readouterr().out
    assert "CONTROLLED SIMULATION" in printed and "target" in printed
    doc = json.loads(out.read_text())
    assert set(doc) >= {"rows", "curves"}
    rows = doc["rows"]
    assert len(rows) == 2 * len(bench.STRATEGIES)
    assert {r["strategy"] for r in rows} == set(bench.STRATEGIES)
    for r in rows:
        assert set(r) == {
            "strategy",
            "seed",
            "final_accuracy",
            "comparisons",
            "deployed",
            "rejected",
        }
        assert 0.0 <= r["final_accuracy"] <= 1.0
        assert r["deployed"] + r["rejected"] == 60
    plain = [r for r in rows if r["strategy"] == "plain"]
    assert all(r["comparisons"] == 0 and r["rejected"] == 0 for r in plain)
    assert doc["curves"]["steps"] == list(range(10, 61, 10))
    assert all(len(v) == 6 for v in doc["curves"]["accuracy"].values())


def test_bench_is_deterministic() -> None:
    import asyncio

    a = asyncio.run(bench.run_simulation(1, 50, 10))
    b = asyncio.run(bench.run_simulation(1, 50, 10))
    assert a == b


def test_bench_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "janus.png"
    assert bench.run(parse("--seeds", "1", "--steps", "40", "--plot", str(png))) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_world_solver_and_updater_behave_as_documented() -> None:
    world = World(WorldConfig(stream_length=30), seed=0)
    task = world.holdout[0]
    topic, skill = task.meta["topic"], task.meta["skill"]
    right = {"rules": [world.general_rule(topic, skill)]}
    wrong = {"rules": [world.wrong_rule(topic, skill)]}
    assert world.p_correct(right, task) > world.p_correct(empty_memory(), task)
    assert world.p_correct(wrong, task) < world.p_correct(empty_memory(), task)
    memory = empty_memory()
    candidate = world.propose(memory, world.stream[0], 1, solved=False)
    assert memory == empty_memory()  # proposing never mutates the current memory
    assert candidate == world.propose(memory, world.stream[0], 1, solved=False)
    enc = WorldEncoder(world)
    same, other = (
        enc.encode([t.question for t in world.holdout if t.meta["topic"] == k][:2]) for k in (0, 1)
    )
    assert cosine(same[0], same[1]) > cosine(same[0], other[0])


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


def test_elaborating_a_rule_changes_its_text_but_not_the_solver() -> None:
    world = World(WorldConfig(stream_length=30, elaborate=1.0, rephrase=0.0), seed=1)
    task = world.stream[0]
    topic, skill = task.meta["topic"], task.meta["skill"]
    memory = {"rules": [world.general_rule(topic, skill)]}
    candidate = world.propose(memory, task, 1, solved=True)
    assert world.last_event == "elaborate"
    (rule,) = candidate["rules"]
    assert rule["text"] != memory["rules"][0]["text"] and rule["examples"]
    on_topic = set(world.vocab.topic_words[topic]) | set(world.vocab.skill_words[topic][skill])
    assert set(rule["examples"]) <= on_topic  # the task's own topic vocabulary, no incidentals
    assert all(world.p_correct(candidate, t) == world.p_correct(memory, t) for t in world.holdout)


def test_diagnose_reports_trigger_quality_without_changing_the_rows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import asyncio

    plain = asyncio.run(bench.run_simulation(1, 80, 10))
    traced = asyncio.run(bench.run_simulation(1, 80, 10, diagnose=True))
    assert traced["rows"] == plain["rows"] and traced["curves"] == plain["curves"]
    diag = traced["diagnostics"]
    assert set(diag) == set(bench.DIAGNOSED)
    assert diag["always"]["recall"] == 1.0 or diag["always"]["harmful"] == 0
    for d in diag.values():
        assert 0.0 <= d["precision"] <= 1.0 and 0.0 <= d["recall"] <= 1.0
        assert sum(e["n"] for e in d["events"].values()) == d["candidates"]
    assert bench.run(parse("--seeds", "1", "--steps", "60", "--diagnose")) == 0
    assert "Trigger diagnostics" in capsys.readouterr().out
