"""Task files for the real path (`--tasks FILE`), generated offline from `reasoning-gym`.

    planfence bench janus --make-tasks tasks.jsonl --family basic_arithmetic --count 200

`reasoning-gym` (the `tasks` extra) generates procedural task families with reference answers
locally, so a stream of real tasks needs no dataset download. Each line is
{"id", "question", "answer"}, the format `--tasks` reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from planfence.shared_memory.extras import extra_imports

DEFAULT_FAMILY = "basic_arithmetic"


def generate(family: str, count: int, seed: int) -> list[dict[str, Any]]:
    """`count` tasks of one reasoning-gym family, reproducible for a seed."""
    with extra_imports("tasks", "generating task files"):
        import reasoning_gym
    dataset = reasoning_gym.create_dataset(family, size=count, seed=seed)
    return [
        {"id": f"{family}-{seed}-{i}", "question": str(e["question"]), "answer": str(e["answer"])}
        for i, e in enumerate(dataset)
    ]


def write_tasks(path: str | Path, family: str, count: int, seed: int) -> int:
    """Write the JSONL task file; returns the number of tasks written."""
    tasks = generate(family, count, seed)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(json.dumps(t, sort_keys=True) + "\n" for t in tasks))
    return len(tasks)
