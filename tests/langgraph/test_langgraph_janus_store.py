"""`JanusStore`: Janus on the LangGraph store that keeps a team's memories (in-memory and
PostgreSQL), driven by LangMem-style writes from a scripted memory manager."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import pytest
from janus_facts import CONFIG, FACTS, task
from janus_facts import controller as shared_controller
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore, GetOp, PutOp
from langgraph.store.memory import InMemoryStore

from planfence.adapters.langgraph import JanusStore
from planfence.adapters.langgraph.janus_store import item_text, render_items
from planfence.plugins.janus import JanusController
from planfence.shared_memory import AsyncStore, create_async_store, open_store

NS = ("memories", "team")


def controller() -> JanusController:
    return shared_controller(render_items)


@dataclass
class ScriptedMemoryManager:
    """Writes as LangMem's store manager does: it searches the namespace for what it knows,
    then inserts, updates or deletes `{"kind": "Memory", "content": {"content": ...}}` items
    (the extraction an LLM would make, scripted)."""

    store: BaseStore
    namespace: tuple[str, ...] = NS
    keys: dict[str, str] = field(default_factory=dict)

    async def insert(self, name: str, text: str) -> None:
        await self.store.asearch(self.namespace, query=None, limit=10)
        self.keys[name] = str(uuid.uuid4())
        await self.store.aput(self.namespace, self.keys[name], memory(text))

    async def update(self, name: str, text: str) -> None:
        await self.store.asearch(self.namespace, query=None, limit=10)
        await self.store.aput(self.namespace, self.keys[name], memory(text))

    async def delete(self, name: str) -> None:
        await self.store.adelete(self.namespace, self.keys[name])


def memory(text: str) -> dict[str, Any]:
    return {"kind": "Memory", "content": {"content": text}}


async def texts(store: BaseStore) -> list[str]:
    return sorted(item_text(i.value) for i in await store.asearch(NS, limit=100))


@pytest.fixture(params=["memory", "postgres"])
async def inner(request: pytest.FixtureRequest) -> AsyncIterator[BaseStore]:
    """The team's LangGraph store: InMemoryStore, or PostgreSQL's in a fresh schema (the shared
    `pg_url` fixture: skipped without a server, failing under PLANFENCE_REQUIRE_POSTGRES=1)."""
    if request.param == "memory":
        yield InMemoryStore()
        return
    import psycopg
    from langgraph.store.postgres import AsyncPostgresStore

    from planfence.shared_memory.backends.postgres import split_schema

    conninfo, schema = split_schema(str(request.getfixturevalue("pg_url")))
    assert schema is not None
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")  # dropped by the fixture
    sep = "&" if "?" in conninfo else "?"
    url = f"{conninfo}{sep}options=-csearch_path%3D{schema}"
    async with AsyncPostgresStore.from_conn_string(url) as store:
        await store.setup()
        yield store


@pytest.fixture
def records_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'planfence.db'}"


@pytest.fixture
async def records(records_url: str) -> AsyncIterator[AsyncStore]:
    store = create_async_store(records_url)
    await store.setup()
    try:
        yield store
    finally:
        await store.aclose()


async def test_harmful_rewrite_is_rejected_benign_append_deployed_restart_resumes(
    inner: BaseStore, records: AsyncStore, records_url: str
) -> None:
    janus = JanusStore(inner, namespace=NS, controller=controller(), records=records)
    manager = ScriptedMemoryManager(janus)
    with janus.working_on(task("deploy")):  # warm-up: deployed as written
        await manager.insert("deploy", "The deploy command is make ship.")
    with janus.working_on(task("staging")):
        await manager.insert("staging", "Staging runs on host alpha-7.")
    # a benign append: compared (trigger "always"), solves the new task, breaks nothing
    with janus.working_on(task("port")):
        await manager.insert("port", "The service listens on port 8443.")
    assert janus.last is not None and janus.last.verdict.compared and janus.last.verdict.deploy
    # a harmful rewrite: the manager "consolidates" and loses two facts
    with janus.working_on(task("deploy")):
        await manager.update("deploy", "Deploys are done by the release team.")
    harmful = janus.last
    assert harmful is not None and harmful.verdict.compared and not harmful.verdict.deploy
    assert harmful.verdict.acc_new is not None and harmful.verdict.acc_old is not None
    assert harmful.verdict.acc_new < harmful.verdict.acc_old
    # never visible to a reader: through the wrapper or on the team's store itself
    want = [
        "Staging runs on host alpha-7.",
        "The deploy command is make ship.",
        "The service listens on port 8443.",
    ]
    assert await texts(janus) == want and await texts(inner) == want
    item = await janus.aget(NS, manager.keys["deploy"])
    assert item is not None and item_text(item.value) == "The deploy command is make ship."
    # the rejected candidate is on record in planfence's store, the head is the deployed one
    candidate = await records.get(harmful.record.id)
    assert "release team" in render_items(candidate.value)
    head = await records.head("memories/team")
    assert head != harmful.record.id and render_items((await records.get(head or "")).value) == (
        "\n".join(f"- {t}" for t in ["The deploy command is make ship.",
                                      "Staging runs on host alpha-7.",
                                      "The service listens on port 8443."])
    )  # fmt: skip
    decisions = await records.journal(kind="janus", limit=10)
    assert [d.labels["verdict"] for d in decisions] == ["keep", "deploy", "deploy", "deploy"]
    assert decisions[0].detail["candidate"] == harmful.record.id
    assert decisions[0].detail["key"] == "memories/team"
    steps = janus.controller.state.step

    # a restarted wrapper: a new controller, planfence's store reopened from its file
    await records.aclose()
    reopened = create_async_store(records_url)
    await reopened.setup()
    try:
        fresh = controller()
        assert fresh.state.step == 0
        again = JanusStore(inner, namespace=NS, controller=fresh, records=reopened)
        manager.store = again
        with again.working_on(task("owner")):
            await manager.insert("owner", "Dara owns the billing service.")
        assert again.last is not None and again.last.verdict.deploy
        assert again.last.verdict.compared  # past the warm-up: the saved state was resumed
        assert again.last.verdict.step == harmful.verdict.step + 1
        assert fresh.state.step == steps + 1
        assert "Dara owns the billing service." in await texts(inner)
        # the harmful rewrite again, after the restart: still rejected
        with again.working_on(task("staging")):
            await manager.delete("staging")
        assert again.last is not None and not again.last.verdict.deploy
        assert "Staging runs on host alpha-7." in await texts(inner)
        assert len(await reopened.journal(kind="janus", limit=10)) == 6
    finally:
        await reopened.aclose()


async def test_everything_outside_the_gated_namespace_passes_through(
    inner: BaseStore, records: AsyncStore
) -> None:
    janus = JanusStore(inner, namespace=NS, controller=controller(), records=records)
    await janus.aput(("profile", "u1"), "name", {"name": "Ana"})
    await janus.aput(("memories", "other"), "x", memory("not gated: a sibling namespace"))
    item = await inner.aget(("profile", "u1"), "name")
    assert item is not None and item.value == {"name": "Ana"}
    assert await inner.aget(("memories", "other"), "x") is not None
    assert [i.key for i in await janus.asearch(("profile",))] == ["name"]
    await janus.adelete(("profile", "u1"), "name")
    assert await inner.aget(("profile", "u1"), "name") is None
    assert await records.journal(kind="janus", limit=10) == []
    assert janus.controller.state.step == 0
    # a batch mixing gated and other operations keeps its order and results
    got = await janus.abatch(
        [
            PutOp(NS, "m", memory("gated, judged (warm-up: deployed)")),
            GetOp(("memories", "other"), "x"),
            PutOp(("profile", "u2"), "name", {"name": "Ben"}),
            GetOp(NS, "m"),
        ]
    )
    assert got[0] is None and got[2] is None
    assert got[1] is not None and got[1].key == "x"
    assert got[3] is not None and item_text(got[3].value).startswith("gated")
    assert [d.labels["verdict"] for d in await records.journal(kind="janus", limit=10)] == [
        "deploy"
    ]


def test_sync_api_with_a_sync_planfence_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inner = InMemoryStore()
    url = f"sqlite:///{tmp_path / 'pf.db'}"
    with open_store(url) as records:
        janus = JanusStore(inner, namespace=NS, controller=controller(), records=records)
        for name in ("deploy", "staging"):
            with janus.working_on(task(name)):
                janus.put(NS, name, memory(f"{FACTS[name][1]} is the answer to {name}."))
        with janus.working_on(task("deploy")):
            janus.put(NS, "deploy", memory("nothing useful"))
        assert janus.last is not None and not janus.last.verdict.deploy
        item = janus.get(NS, "deploy")
        assert item is not None and item_text(item.value) == "make ship is the answer to deploy."
        assert [d.labels["verdict"] for d in records.journal(kind="janus", limit=10)] == [
            "keep",
            "deploy",
            "deploy",
        ]
    # the decisions are the ones `planfence audit --source janus` shows
    from planfence.adapters.cli.main import main

    capsys.readouterr()
    assert main(["audit", "--store", url, "--source", "janus", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["decisions"]
    assert [(r["source"], r["verdict"]) for r in rows] == [
        ("janus", "keep"),
        ("janus", "deploy"),
        ("janus", "deploy"),
    ]
    assert all(r["payload"]["key"] == "memories/team" for r in rows)


class Chat(TypedDict):
    question: str


async def test_inside_a_graph_the_node_writes_through_get_store(records: AsyncStore) -> None:
    """A memory node in a compiled graph reaches the wrapper as LangGraph's store."""
    from langgraph.config import get_store

    janus = JanusStore(InMemoryStore(), namespace=NS, controller=controller(), records=records)

    async def remember(state: Chat) -> Chat:
        name = state["question"]
        with JanusStore.working_on(task(name)):
            await get_store().aput(NS, name, memory(f"{FACTS[name][1]} answers {name}."))
        return state

    builder = StateGraph(Chat)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    graph = builder.compile(store=janus)
    for name in ("deploy", "staging", "port"):
        await graph.ainvoke({"question": name})
    assert len(await janus.asearch(NS)) == 3
    assert len(await records.journal(kind="janus", limit=10)) == 3


def test_gated_namespace_must_be_named() -> None:
    from planfence.shared_memory import ConfigError

    with pytest.raises(ConfigError):
        JanusStore(InMemoryStore(), namespace=(), controller=controller(), records=_memory())


def _memory() -> AsyncStore:
    return create_async_store("memory://")


async def test_a_failing_evaluation_keeps_the_write_out(records: AsyncStore) -> None:
    """Fail closed: when the comparison cannot run, the write does not reach the store."""

    class Broken:
        async def evaluate(self, memory: Any, tasks: Any) -> list[bool]:
            raise ConnectionError("the evaluation model is down")

    inner = InMemoryStore()
    janus = JanusStore(
        inner, namespace=NS, controller=JanusController(Broken(), config=CONFIG), records=records
    )
    for name in ("deploy", "staging"):  # warm-up: no evaluation needed
        await janus.aput(NS, name, memory(FACTS[name][1]))
    with pytest.raises(ConnectionError):
        await janus.aput(NS, "port", memory(FACTS["port"][1]))
    assert await inner.aget(NS, "port") is None
    assert len(await records.journal(kind="janus", limit=10)) == 2
    assert janus.controller.state.step == 2  # as before the failed step: it can be retried
