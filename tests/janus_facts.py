"""The team facts the Janus memory-wrapper tests write (`JanusStore` on a LangGraph store,
`JanusMemory` on Mem0): the tasks that ask for them, and a controller whose solver answers a
task when the rendered memory states its answer. Tests import it by name (`tests/` is on
`sys.path` through its conftest)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from planfence.plugins.janus import FunctionEvaluator, JanusConfig, JanusController, Task

CONFIG = JanusConfig(support_size=2, coverage_size=1, fresh_size=2, trigger="always", seed=3)
FACTS = {
    "deploy": ("What is the deploy command?", "make ship"),
    "staging": ("Which host is staging?", "alpha-7"),
    "port": ("Which port does the service listen on?", "8443"),
    "owner": ("Who owns the billing service?", "Dara"),
}


def task(name: str) -> Task:
    question, answer = FACTS[name]
    return Task.create(question, answer, id=name)


def controller(render: Callable[[Any], str]) -> JanusController:
    """A controller comparing every write, whose solver reads the memory as `render` shows it:
    a question is answered when a memory states its answer."""

    def judge(memory: Any, t: Task) -> bool:
        return str(t.answer) in render(memory)

    return JanusController(FunctionEvaluator(judge), config=CONFIG)
