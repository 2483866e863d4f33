"""Janus on the shared memory's write path, on every backend (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from planfence.plugins.janus import (
    FunctionEvaluator,
    JanusConfig,
    JanusController,
    JanusStoreHook,
    Task,
)
from planfence.plugins.janus.errors import JanusConflictError, JanusStateError
from planfence.shared_memory import AsyncStore, NotOwnerError, create_async_store

CONFIG = JanusConfig(support_size=2, coverage_size=1, fresh_size=2, trigger="always", seed=5)
TASKS = [
    Task(id=f"t{i}", question=f"what is fact {i % 4}?", answer=f"fact{i % 4}") for i in range(12)
]


def judge(memory: Any, task: Task) -> bool:
    return str(task.answer) in str(memory)


def controller(config: JanusConfig = CONFIG) -> JanusController:
    return JanusController(FunctionEvaluator(judge), config=config)


async def test_candidates_are_stored_head_moves_only_on_deploy(astore: AsyncStore) -> None:
    hook = await JanusStoreHook(astore, "team/notes", controller(), owner="janus").open()
    assert await hook.current() == (None, "")
    first = await hook.submit("fact0", TASKS[0], author="curator")
    second = await hook.submit("fact0 fact1", TASKS[1], author="curator")
    assert first.verdict.deploy and second.verdict.deploy  # warm-up
    assert await astore.head("team/notes") == second.record.id
    assert second.record.parents == (first.record.id,)

    worse = await hook.submit("fact1", TASKS[2], author="curator")  # forgets fact0
    assert not worse.verdict.deploy and worse.verdict.compared
    assert worse.head == second.record.id
    assert await astore.head("team/notes") == second.record.id
    stored = await astore.get(worse.record.id)  # nothing is lost
    assert stored.value == "fact1" and stored.kind == "janus-candidate"
    assert stored.parents == (second.record.id,) and stored.author == "curator"

    better = await hook.submit("fact0 fact1 fact2", TASKS[3], author="curator")
    assert better.verdict.deploy
    assert await hook.current() == (better.record.id, "fact0 fact1 fact2")

    log = await hook.decisions()
    assert [d.labels["verdict"] for d in log] == ["deploy", "keep", "deploy", "deploy"]
    keep = log[1]
    assert keep.kind == "janus" and keep.labels["agent"] == "curator"
    assert keep.detail["candidate"] == worse.record.id
    assert keep.detail["previous"] == second.record.id
    assert keep.detail["scores"]["new"] < keep.detail["scores"]["old"]
    used = keep.detail["tasks"]
    assert used["coverage"] and set(used["fresh"]) <= {"t2"}
    assert keep.detail["trigger"]["kind"] == "always"


async def test_state_lives_in_the_store_and_resumes(store_url: str) -> None:
    async def run(hook: JanusStoreHook, tasks: Sequence[Task]) -> list[tuple[str, Any]]:
        out = []
        for i, task in enumerate(tasks):
            _, memory = await hook.current()
            candidate = f"{memory} {task.answer}" if i % 3 else str(task.answer)
            sub = await hook.submit(candidate, task)
            out.append((sub.verdict.verdict, sub.decision.detail["tasks"]))
        return out

    store = create_async_store(store_url)
    await store.setup()
    try:
        whole = await run(
            await JanusStoreHook(store, "a/mem", controller(), owner="j").open(), TASKS
        )
        half = await run(
            await JanusStoreHook(store, "b/mem", controller(), owner="j").open(), TASKS[:6]
        )
        if not store_url.startswith("memory://"):  # a real restart: reconnect
            await store.aclose()
            store = create_async_store(store_url)
            await store.setup()
        resumed = await JanusStoreHook(store, "b/mem", controller(), owner="j").open()
        assert resumed.controller.state.step == 6
        rest = await run(resumed, TASKS[6:])
        assert half + rest == whole
        state = await store.get(str(await store.head("b/mem/janus-state")))
        assert state.kind == "janus-state" and state.value["step"] == len(TASKS)
        with pytest.raises(JanusStateError):
            await JanusStoreHook(store, "b/mem", controller(JanusConfig()), owner="j").open()
    finally:
        await store.aclose()


async def test_concurrent_head_move_is_a_conflict_and_nothing_is_written(
    astore: AsyncStore,
) -> None:
    class Interfering:
        armed = False

        async def evaluate(self, memory: Any, tasks: Sequence[Task]) -> list[bool]:
            if self.armed:
                self.armed = False
                await astore.put("k/mem", "sneaky", author="janus")
            return [judge(memory, t) for t in tasks]

    evaluator = Interfering()
    ctl = JanusController(evaluator, config=CONFIG)
    hook = await JanusStoreHook(astore, "k/mem", ctl, owner="janus").open()
    for task in TASKS[:3]:
        await hook.submit(f"fact0 fact1 {task.answer}", task)
    before = ctl.save_state()
    decisions_before = len(await hook.decisions())
    evaluator.armed = True
    with pytest.raises(JanusConflictError, match="submit again"):
        await hook.submit("fact0 fact1 fact2 fact3", TASKS[3])
    assert ctl.save_state() == before
    assert len(await hook.decisions()) == decisions_before
    again = await hook.submit("fact0 fact1 fact2 fact3", TASKS[3])
    assert again.verdict.deploy
    assert (await astore.get(again.record.id)).parents == (str(again.decision.detail["previous"]),)


async def test_open_refuses_a_key_owned_by_someone_else(astore: AsyncStore) -> None:
    await astore.own("x/mem", "someone")
    with pytest.raises(NotOwnerError):
        await JanusStoreHook(astore, "x/mem", controller(), owner="janus").open()


async def test_a_failed_write_leaves_the_controller_as_it_was(astore: AsyncStore) -> None:
    from planfence.shared_memory import StoreUnavailableError

    ctl = controller()
    hook = await JanusStoreHook(astore, "team/notes", ctl, owner="janus").open()
    await hook.submit("fact0", TASKS[0], author="curator")
    before = ctl.save_state()

    async def broken_write(batch: object) -> None:
        raise StoreUnavailableError("disk gone")

    real_write = astore.write
    astore.write = broken_write  # type: ignore[method-assign,assignment]
    try:
        with pytest.raises(StoreUnavailableError):
            await hook.submit("fact0 fact1", TASKS[1], author="curator")
    finally:
        astore.write = real_write  # type: ignore[method-assign]
    assert ctl.save_state() == before
    again = await hook.submit("fact0 fact1", TASKS[1], author="curator")
    assert again.verdict.step == 2  # the failed attempt did not count as a step
