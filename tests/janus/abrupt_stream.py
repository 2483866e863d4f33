"""A stream built on the paper's premise: benign updates append one rule, harmful ones are
abrupt rewrites (the cheatsheet truncated, or its rules replaced by one topic's).

Tasks are "which rule applies to topic k, case j"; a task is solved exactly when the memory
holds the rule for its topic and case, so a comparison on an evaluation set is noise-free and
the only question is whether the trigger asks for one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planfence.plugins.janus import Task

TOPICS = ("fractions", "percent", "geometry", "speed", "probability", "ratios", "ages", "time")
VERBS = ("simplify", "convert", "measure", "divide", "count", "compare", "subtract", "carry")


def rule(topic: int, case: int) -> str:
    t, v = TOPICS[topic], VERBS[(topic + case) % len(VERBS)]
    return f"For {t} problems of case {case}, {v} the {t} values before combining them."


def task(topic: int, case: int, n: int) -> Task:
    q = f"A {TOPICS[topic]} question, case {case}, variant {n}: what is the result?"
    return Task(id=f"{topic}-{case}-{n}", question=q, answer="x", meta={"rule": rule(topic, case)})


@dataclass
class AbruptStream:
    seed: int
    steps: int = 300
    harm: float = 0.08

    def __post_init__(self) -> None:
        rng = np.random.default_rng(self.seed)
        pairs = [(k, c) for k in range(len(TOPICS)) for c in range(6)]
        self.order = [pairs[int(i)] for i in rng.integers(len(pairs), size=self.steps)]
        self.tasks = [task(k, c, n) for n, (k, c) in enumerate(self.order)]
        self.holdout = [task(k, c, 1000 + n) for n, (k, c) in enumerate(pairs)]

    def propose(self, memory: list[str], step: int) -> tuple[list[str], bool]:
        """(candidate, harmful) after stream task `step`."""
        rng = np.random.default_rng([self.seed, step])
        k, c = self.order[step]
        if step > 25 and rng.random() < self.harm:
            if rng.random() < 0.5:  # truncation: the rewrite loses the second half
                return memory[: len(memory) // 2], True
            # topic replacement: everything rewritten around the current topic
            return [r for r in memory if r.startswith(f"For {TOPICS[k]} ")] or [rule(k, c)], True
        r = rule(k, c)
        return (memory if r in memory else [*memory, r]), False


def solved(memory: list[str], t: Task) -> bool:
    return t.meta["rule"] in memory


def accuracy(memory: list[str], tasks: list[Task]) -> float:
    return sum(solved(memory, t) for t in tasks) / len(tasks)
