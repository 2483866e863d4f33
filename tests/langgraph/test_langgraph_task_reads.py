"""Reads made in child tasks of a node (or threads running in its context) are the node's reads:
`take_reads()` in the node returns all of them, every version."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langgraph.constants import END, START
from langgraph.graph import StateGraph
from typing_extensions import TypedDict

from planfence.adapters.langgraph import PlanfenceStore
from planfence.shared_memory import AsyncStore, create_async_store, open_store


class S(TypedDict, total=False):
    reads: dict[str, list[str]]


def one_node(node: Any) -> Any:
    graph = StateGraph(S)
    graph.add_node("planner", node)
    graph.add_edge(START, "planner")
    graph.add_edge("planner", END)
    return graph.compile()


@pytest.fixture
async def astore() -> AsyncIterator[AsyncStore]:
    store = create_async_store("memory://")
    await store.setup()
    for key in ("a/x", "a/y"):
        await store.own(key, "owner")
        await store.put(key, {"v": 1}, author="owner")
    try:
        yield store
    finally:
        await store.aclose()


async def test_gathered_reads_in_a_planner_node_are_the_nodes(astore: AsyncStore) -> None:
    reader = PlanfenceStore(astore)
    first_x = await astore.head("a/x")

    async def planner(state: S) -> dict[str, Any]:
        await asyncio.gather(reader.aget(("a",), "x"), reader.aget(("a",), "y"))
        await astore.put("a/x", {"v": 2}, author="owner")
        await reader.aget(("a",), "x")  # a newer version of a key a child read
        return {"reads": reader.take_reads()}

    out = await one_node(planner).ainvoke({})
    assert out["reads"] == {
        "a/x": [first_x, await astore.head("a/x")],
        "a/y": [await astore.head("a/y")],
    }


async def test_two_runs_gathering_at_once_keep_their_reads_apart(astore: AsyncStore) -> None:
    reader = PlanfenceStore(astore)
    both = asyncio.Barrier(2)

    async def planner(state: S) -> dict[str, Any]:
        keys = list(state["reads"])
        await asyncio.gather(*(reader.aget(("a",), k.split("/")[1]) for k in keys))
        await both.wait()
        return {"reads": reader.take_reads()}

    graph = one_node(planner)
    outs = await asyncio.gather(
        graph.ainvoke({"reads": {"a/x": []}}), graph.ainvoke({"reads": {"a/y": []}})
    )
    assert [list(o["reads"]) for o in outs] == [["a/x"], ["a/y"]]


def test_threads_in_the_nodes_context_read_for_the_node(tmp_path: Any) -> None:
    with open_store(f"sqlite:///{tmp_path / 'pf.db'}") as store:
        for key in ("a/x", "a/y"):
            store.own(key, "owner")
            store.put(key, {"v": 1}, author="owner")
        reader = PlanfenceStore(store)

        def planner(state: S) -> dict[str, Any]:
            with ThreadPoolExecutor(2) as pool:
                calls = [
                    pool.submit(contextvars.copy_context().run, reader.get, ("a",), k)
                    for k in ("x", "y")
                ]
                for call in calls:
                    call.result()
            return {"reads": reader.take_reads()}

        out = one_node(planner).invoke({})
        assert out["reads"] == {"a/x": [store.head("a/x")], "a/y": [store.head("a/y")]}
