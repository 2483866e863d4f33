"""The real-task smoke path: a task file generated offline from reasoning-gym, then DC-RS and
ExpeL with and without Janus against a scripted OpenAI-compatible endpoint."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from janus_scripted_llm import ScriptedLLM

from planfence.demos.bench.janus import command as bench
from planfence.demos.bench.janus.llm import run_tasks
from planfence.demos.bench.janus.tasks import generate
from planfence.shared_memory import MissingExtraError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_without_reasoning_gym_the_hint_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'planfence\[tasks\]'"):
        generate("basic_arithmetic", 3, 0)


def test_generated_tasks_drive_dc_rs_and_expel_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("reasoning_gym")
    tasks = tmp_path / "tasks.jsonl"
    assert bench.run(parse("--make-tasks", str(tasks), "--count", "30")) == 0
    lines = [json.loads(x) for x in tasks.read_text().splitlines()]
    assert len(lines) == 30 and all({"id", "question", "answer"} <= set(x) for x in lines)
    assert lines == generate("basic_arithmetic", 30, 0)  # reproducible for a seed
    answers = {x["question"]: x["answer"] for x in lines}
    monkeypatch.setenv("PLANFENCE_LLM_BASE_URL", "http://llm.test/v1")
    monkeypatch.setenv("PLANFENCE_LLM_MODEL", "scripted")

    def reply(body: dict[str, Any]) -> str:
        system = body["messages"][0]["content"]
        user = body["messages"][-1]["content"]
        if "cheatsheet" in system:
            return "<cheatsheet>work left to right, multiplication first</cheatsheet>"
        if "insight rules" in system:
            return "ADD: work left to right, multiplication first"
        question = user.split("TASK:\n", 1)[-1].strip()
        if "multiplication first" in user and question in answers:
            return f"Working it out.\nANSWER: {answers[question]}"
        return "ANSWER: -1"

    scripted = ScriptedLLM(default=reply)
    out = tmp_path / "llm.json"
    args = parse("--tasks", str(tasks), "--out", str(out), "--holdout", "0.2")
    assert run_tasks(args, transport=scripted.transport()) == 0
    doc = json.loads(out.read_text())
    assert [r["strategy"] for r in doc["rows"]] == [
        "dc-rs/plain", "dc-rs/janus", "expel/plain", "expel/janus",
    ]  # fmt: skip
    # the memory the updaters wrote is what makes the held-out answers right
    assert all(r["final_accuracy"] == 1.0 for r in doc["rows"])
    assert doc["tasks"] == {"file": str(tasks), "stream": 24, "holdout": 6}
    assert doc["llm"]["calls"] == len(scripted.requests) > 0
    janus = [r for r in doc["rows"] if r["strategy"].endswith("/janus")]
    assert all(r["deployed"] + r["rejected"] == 24 for r in janus)
    capsys.readouterr()
