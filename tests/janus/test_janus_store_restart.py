"""The store hook and `JanusStore` run the budgeted trigger by default and keep the deployed
memory on a tie, and the trigger's state (window, change norms, calibration examples and
weights) survives a restart: a resumed hook decides exactly as one that never stopped."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from planfence.plugins.janus import (
    FunctionEvaluator,
    JanusConfig,
    JanusController,
    JanusStoreHook,
    Task,
)
from planfence.plugins.janus.calibration import PRIOR
from planfence.shared_memory import create_async_store

# Only the sizes are small: trigger, tie rule and aimed tasks are the defaults.
CONFIG = JanusConfig(support_size=6, coverage_size=3, fresh_size=2, budget_window=10, seed=4)
FACTS = [f"fact{i}" for i in range(8)]
TASKS = [
    Task(id=f"t{i}", question=f"what is {FACTS[i % 8]}?", answer=FACTS[i % 8]) for i in range(40)
]


def judge(memory: Any, task: Task) -> bool:
    return str(task.answer) in str(memory)


def controller() -> JanusController:
    return JanusController(FunctionEvaluator(judge), config=CONFIG)


def candidate(memory: str, step: int) -> str:
    """Mostly learns one fact a line; now and then a rewrite keeps only the first line."""
    lines = [ln for ln in memory.splitlines() if ln]
    if len(lines) > 3 and np.random.default_rng([9, step]).random() < 0.2:
        return lines[0]
    return "\n".join([*lines, f"{FACTS[step % 8]} is known ({step})"])


async def run(hook: JanusStoreHook, start: int, stop: int) -> list[tuple[Any, ...]]:
    out = []
    for step in range(start, stop):
        _, memory = await hook.current()
        sub = await hook.submit(candidate(str(memory), step), TASKS[step])
        trigger = sub.verdict.trigger
        out.append((sub.verdict.verdict, sub.verdict.compared, trigger and trigger.score))
    return out


def test_the_default_is_the_budgeted_trigger() -> None:
    assert JanusConfig().trigger == "budget" and controller().config.trigger == "budget"


async def test_by_default_the_hook_keeps_the_deployed_memory_on_a_tie() -> None:
    """A compared candidate that the evaluation cannot tell from the deployed memory is kept
    out: nothing is deployed without evidence."""
    store = create_async_store("memory://")
    await store.setup()
    try:
        hook = await JanusStoreHook(store, "team/mem", controller(), owner="j").open()
        memory = ""
        for step in range(CONFIG.support_size):  # warm-up: every candidate is deployed
            memory = f"{memory}\n{FACTS[step % 8]}".strip()
            assert (await hook.submit(memory, TASKS[step])).verdict.deploy
        head = await store.head("team/mem")
        tied = await hook.submit(f"{memory}\nthe weather was fine", TASKS[CONFIG.support_size])
        verdict = tied.verdict
        assert verdict.compared and verdict.acc_new == verdict.acc_old
        assert not verdict.deploy and verdict.reason.endswith("(a tie keeps the current memory)")
        assert await store.head("team/mem") == head
        assert await hook.current() == (head, memory)
    finally:
        await store.aclose()


async def test_the_hooks_budgeted_state_survives_a_restart(store_url: str) -> None:
    store = create_async_store(store_url)
    await store.setup()
    try:
        whole = await run(
            await JanusStoreHook(store, "a/mem", controller(), owner="j").open(), 0, 40
        )
        first = await JanusStoreHook(store, "b/mem", controller(), owner="j").open()
        half = await run(first, 0, 22)
        saved = first.controller.state
        assert saved.window and saved.norms and saved.examples
        assert saved.weights is not None and saved.weights != list(PRIOR)
        if not store_url.startswith("memory://"):  # a real restart: reconnect
            await store.aclose()
            store = create_async_store(store_url)
            await store.setup()
        resumed = await JanusStoreHook(store, "b/mem", controller(), owner="j").open()
        state = resumed.controller.state
        assert (state.window, state.norms, state.examples, state.weights) == (
            saved.window,
            saved.norms,
            saved.examples,
            saved.weights,
        )
        rest = await run(resumed, 22, 40)
        assert half + rest == whole
        assert any(compared for _, compared, _ in whole[6:]) and not all(
            compared for _, compared, _ in whole[6:]
        )
    finally:
        await store.aclose()


async def test_janus_store_runs_the_budgeted_trigger_and_resumes_it() -> None:
    pytest.importorskip("langgraph")
    from langgraph.store.memory import InMemoryStore

    from planfence.adapters.langgraph import JanusStore

    ns = ("memories", "team")

    async def write(store: JanusStore, step: int) -> list[tuple[Any, ...]]:
        """One step of a memory manager: now and then it deletes most items first."""
        out = []
        items = await store.asearch(ns, limit=100)
        with store.working_on(TASKS[step]):
            if step % 7 == 6 and len(items) > 3:
                for item in items[1:]:
                    await store.adelete(ns, item.key)
                    out.append(store.last)
            await store.aput(ns, f"k{step}", {"content": f"{FACTS[step % 8]} noted at {step}"})
            out.append(store.last)
        return [
            (s.verdict.verdict, s.verdict.compared, s.verdict.trigger and s.verdict.trigger.kind)
            for s in out
            if s is not None
        ]

    async def session(steps: range, inner: Any, records: Any) -> list[tuple[Any, ...]]:
        store = JanusStore(inner, namespace=ns, controller=controller(), records=records)
        return [v for step in steps for v in await write(store, step)]

    whole_records, records = create_async_store("memory://"), create_async_store("memory://")
    await whole_records.setup()
    await records.setup()
    try:
        whole = await session(range(30), InMemoryStore(), whole_records)
        inner = InMemoryStore()
        half = await session(range(18), inner, records)
        rest = await session(range(18, 30), inner, records)  # a restart: a new controller
        assert half + rest == whole
        assert {kind for _, _, kind in whole[6:]} == {"budget"}
        assert any(compared for _, compared, _ in whole)
        saved = (await records.get(str(await records.head("memories/team/janus-state")))).value
        assert saved["config"]["trigger"] == "budget" and saved["window"] and saved["norms"]
    finally:
        await whole_records.aclose()
        await records.aclose()


async def test_by_default_janus_store_keeps_a_tied_write_out_of_the_store() -> None:
    pytest.importorskip("langgraph")
    from langgraph.store.memory import InMemoryStore

    from planfence.adapters.langgraph import JanusStore

    ns = ("memories", "team")
    inner, records = InMemoryStore(), create_async_store("memory://")
    await records.setup()
    try:
        store = JanusStore(inner, namespace=ns, controller=controller(), records=records)
        for step in range(CONFIG.support_size):
            with store.working_on(TASKS[step]):
                await store.aput(ns, f"k{step}", {"content": FACTS[step % 8]})
        with store.working_on(TASKS[CONFIG.support_size]):
            await store.aput(ns, "weather", {"content": "the weather was fine"})
        assert store.last is not None
        verdict = store.last.verdict
        assert verdict.compared and verdict.acc_new == verdict.acc_old and not verdict.deploy
        assert await inner.aget(ns, "weather") is None
        assert len(await inner.asearch(ns, limit=100)) == CONFIG.support_size
    finally:
        await records.aclose()
