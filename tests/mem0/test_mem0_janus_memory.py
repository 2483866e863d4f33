"""`JanusMemory`: Janus on a Mem0 `Memory` that runs here with no hosted model: `infer=False`
adds, LangChain's deterministic fake embedder, Qdrant in local mode."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from janus_facts import CONFIG, FACTS, task
from janus_facts import controller as shared_controller
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from mem0 import Memory

from planfence.adapters.mem0 import JanusMemory
from planfence.adapters.mem0.janus_memory import render_entries
from planfence.plugins.janus import JanusController
from planfence.shared_memory import AsyncStore, ConfigError, create_async_store, open_store

TEAM = {"user_id": "team"}


def controller() -> JanusController:
    return shared_controller(render_entries)


def local_mem0(folder: Path) -> Memory:
    """Mem0 with nothing hosted: its LLM is never called with infer=False (a fake stands in)."""
    return Memory.from_config(
        {
            "llm": {"provider": "langchain", "config": {"model": FakeListChatModel(responses=[])}},
            "embedder": {
                "provider": "langchain",
                "config": {"model": DeterministicFakeEmbedding(size=16), "embedding_dims": 16},
            },
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "collection_name": "team",
                    "embedding_model_dims": 16,
                    "path": str(folder / "qdrant"),
                    "on_disk": True,
                },
            },
            "history_db_path": str(folder / "history.db"),
        }
    )


def say(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def texts(memory: Memory | JanusMemory) -> list[str]:
    return sorted(r["memory"] for r in memory.get_all(filters=TEAM)["results"])


@pytest.fixture
def mem(tmp_path: Path) -> Memory:
    return local_mem0(tmp_path / "mem0")


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


async def test_harmful_rewrite_is_rejected_benign_add_deployed_restart_resumes(
    mem: Memory, records: AsyncStore, records_url: str
) -> None:
    janus = JanusMemory(mem, scope=TEAM, controller=controller(), records=records)
    ids: dict[str, str] = {}
    for name, text in [
        ("deploy", "The deploy command is make ship."),  # warm-up: deployed as written
        ("staging", "Staging runs on host alpha-7."),
        ("port", "The service listens on port 8443."),  # benign: compared, deployed
    ]:
        with janus.working_on(task(name)):
            added = janus.add(say(text), user_id="team", infer=False)
        ids[name] = added["results"][0]["id"]
    assert janus.last is not None and janus.last.verdict.compared and janus.last.verdict.deploy
    # a harmful rewrite: the deploy command is lost
    with janus.working_on(task("deploy")):
        answer = janus.update(ids["deploy"], text="Deploys are done by the release team.")
    harmful = janus.last
    assert harmful is not None and harmful.verdict.compared and not harmful.verdict.deploy
    assert "kept" in answer["message"]
    want = [
        "Staging runs on host alpha-7.",
        "The deploy command is make ship.",
        "The service listens on port 8443.",
    ]
    # never visible to a reader: through the wrapper or on Mem0 itself, nor in its history
    assert texts(janus) == want and texts(mem) == want
    assert mem.get(ids["deploy"])["memory"] == "The deploy command is make ship."
    assert [h["event"] for h in mem.history(ids["deploy"])] == ["ADD"]
    candidate = await records.get(harmful.record.id)
    assert "release team" in render_entries(candidate.value)
    decisions = await records.journal(kind="janus", limit=10)
    assert [d.labels["verdict"] for d in decisions] == ["keep", "deploy", "deploy", "deploy"]
    assert decisions[0].detail["key"] == "mem0/user_id/team"

    # a restarted wrapper: a new controller, planfence's store reopened from its file
    await records.aclose()
    reopened = create_async_store(records_url)
    await reopened.setup()
    try:
        fresh = controller()
        again = JanusMemory(mem, scope=TEAM, controller=fresh, records=reopened)
        with again.working_on(task("owner")):
            again.add("Dara owns the billing service.", user_id="team", infer=False)
        assert again.last is not None and again.last.verdict.deploy
        assert again.last.verdict.compared  # past the warm-up: the saved state was resumed
        assert again.last.verdict.step == harmful.verdict.step + 1
        assert "Dara owns the billing service." in texts(mem)
        # a harmful deletion after the restart: still rejected
        with again.working_on(task("staging")):
            again.delete(ids["staging"])
        assert again.last is not None and not again.last.verdict.deploy
        assert "Staging runs on host alpha-7." in texts(mem)
        assert len(await reopened.journal(kind="janus", limit=10)) == 6
    finally:
        await reopened.aclose()


async def test_everything_outside_the_scope_passes_through(
    mem: Memory, records: AsyncStore
) -> None:
    janus = JanusMemory(mem, scope=TEAM, controller=controller(), records=records)
    other = janus.add(say("Ana prefers window seats."), user_id="ana", infer=False)
    mid = other["results"][0]["id"]
    janus.update(mid, text="Ana prefers aisle seats.")
    assert mem.get(mid)["memory"] == "Ana prefers aisle seats."
    janus.delete(mid)
    assert mem.get(mid) is None
    assert await records.journal(kind="janus", limit=10) == []
    assert janus.controller.state.step == 0


async def test_an_inferred_add_to_the_scope_is_refused_not_let_through(
    mem: Memory, records: AsyncStore
) -> None:
    """With inference Mem0's LLM picks the changes as it applies them: nothing to judge first."""
    janus = JanusMemory(mem, scope=TEAM, controller=controller(), records=records)
    with pytest.raises(ConfigError, match="infer=False"):
        janus.add(say("The deploy command is make ship."), user_id="team")
    assert texts(mem) == []


def test_sync_api_with_a_sync_planfence_store(
    tmp_path: Path, mem: Memory, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'pf.db'}"
    with open_store(url) as records:
        janus = JanusMemory(mem, scope=TEAM, controller=controller(), records=records)
        for name in ("deploy", "staging"):
            with janus.working_on(task(name)):
                janus.add(say(f"{FACTS[name][1]} answers {name}."), user_id="team", infer=False)
        with janus.working_on(task("deploy")):
            janus.add(say("nothing useful"), user_id="team", infer=False)
        # an append that solves nothing new and breaks nothing: the controller's call
        assert janus.last is not None and janus.last.verdict.compared
        assert [d.labels["verdict"] for d in janus.decisions()][1:] == ["deploy", "deploy"]
    from planfence.adapters.cli.main import main

    capsys.readouterr()
    assert main(["audit", "--store", url, "--source", "janus", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["decisions"]
    assert all(r["payload"]["key"] == "mem0/user_id/team" for r in rows) and len(rows) == 3


def test_a_scope_must_name_whose_memories(mem: Memory) -> None:
    for scope in ({}, {"team": "x"}, {"user_id": ""}):
        with pytest.raises(ConfigError):
            JanusMemory(mem, scope=scope, controller=controller(), records=_memory())


def _memory() -> AsyncStore:
    return create_async_store("memory://")


async def test_a_failing_evaluation_keeps_the_write_out(mem: Memory, records: AsyncStore) -> None:
    """Fail closed: when the comparison cannot run, the write does not reach Mem0."""

    class Broken:
        async def evaluate(self, memory: Any, tasks: Any) -> list[bool]:
            raise ConnectionError("the evaluation model is down")

    janus = JanusMemory(
        mem, scope=TEAM, controller=JanusController(Broken(), config=CONFIG), records=records
    )
    for name in ("deploy", "staging"):  # warm-up: no evaluation needed
        janus.add(say(FACTS[name][1]), user_id="team", infer=False)
    with pytest.raises(ConnectionError):
        janus.add(say(FACTS["port"][1]), user_id="team", infer=False)
    assert texts(mem) == ["alpha-7", "make ship"]
    assert len(await records.journal(kind="janus", limit=10)) == 2


def test_the_docs_example_keeps_the_harmful_rewrite_out(tmp_path: Path) -> None:
    """The Janus page's Mem0 example, run as a user runs it (a fresh process, its own folder)."""
    import os
    import subprocess
    import sys

    from docpages import block

    code = block("docs/janus.md", "Janus on a Mem0 memory")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEM0_")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    verdict, kept = done.stdout.strip().splitlines()
    assert verdict.startswith("keep ")
    assert kept == "['Deploy with make ship.', 'Staging is host alpha-7.']"
    assert (tmp_path / ".mem0" / "history.db").exists()  # Mem0 wrote into the folder, not $HOME
