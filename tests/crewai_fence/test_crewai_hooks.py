"""The CrewAI page's snippet runs as written, and in a real crew (a scripted `BaseLLM` that
returns native tool calls) the hooks show the records, gate the tools and fail closed."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from docpages import block

pytest.importorskip("crewai", reason="CrewAI runs in its own venv: pip install 'planfence[crewai]'")

from crewai import Agent, Crew, Task
from crewai.hooks import InterceptionPoint, get_hooks
from crewai.llms.base_llm import BaseLLM
from crewai.tools import tool

from planfence.adapters.conformance.world import Outage
from planfence.adapters.crewai import PlanfenceHooks
from planfence.adapters.crewai.conformance import private_home
from planfence.fence import current
from planfence.plugins.gate import Policy, find_decisions_sync
from planfence.shared_memory import Store, open_async_store, open_store

PAGE = "docs/frameworks/crewai.md"
REQ = "trip/42/requirements"
POLICY = Policy().declare("book_flight", depends_on=[REQ])
# CrewAI reads its own deprecated fields on every run (its warnings come from `crewai`).
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai")
Answer = Callable[[list[dict[str, Any]]], Any]


class FunctionLLM(BaseLLM):  # type: ignore[misc]
    """A CrewAI model whose answers come from `answer(messages)`: a text, or a tool call."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(model="scripted")
        self._answer = answer
        self.seen: list[list[dict[str, Any]]] = []

    def supports_function_calling(self) -> bool:
        return True

    def get_context_window_size(self) -> int:
        return 100_000

    def call(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
        self.seen.append(copy.deepcopy(messages))
        return self._answer(messages)


def book(destination: str) -> list[dict[str, Any]]:
    function = {"name": "book_flight", "arguments": json.dumps({"destination": destination})}
    return [{"id": "c1", "type": "function", "function": function}]


def tool_result(messages: list[dict[str, Any]]) -> str | None:
    return str(messages[-1]["content"]) if messages[-1].get("role") == "tool" else None


def records_shown(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m["content"]) for m in messages if "Current public records" in str(m["content"])]


def books_once(messages: list[dict[str, Any]]) -> Any:
    return "Booked." if tool_result(messages) else book("Lisbon")


def trip_store() -> Store:
    store = open_store("memory://")
    store.own(REQ, "customer")
    store.put(REQ, {"destination": "Lisbon"}, author="customer")
    return store


def crew(llm: FunctionLLM, booked: list[Any], role: str = "booker") -> Crew:
    @tool("book_flight")
    def book_flight(destination: str) -> str:
        """Book the trip's flight."""
        booked.append((destination, current()))
        return f"booked a flight to {destination}"

    agent = Agent(role=role, goal="Book trips", backstory="Books.", llm=llm, tools=[book_flight])
    task = Task(description="Book the flight for trip 42.", expected_output="booked", agent=agent)
    return Crew(agents=[agent], tasks=[task])


def test_crewai_page_snippet_runs(capsys: Any, tmp_path: Path) -> None:
    code = block(PAGE, "Add planfence to a CrewAI crew")
    # The snippet closes its store: on a file, what it wrote can be read back after.
    url = f"sqlite:///{tmp_path / 'team.db'}"
    code = code.replace('open_store("memory://")', f"open_store({url!r})")
    llm = FunctionLLM(books_once)
    namespace: dict[str, Any] = {"__name__": "snippet", "llm": llm}
    exec(compile(code, PAGE, "exec"), namespace)
    store = open_store(url)
    try:
        assert capsys.readouterr().out.strip() == "Booked."
        [allow] = find_decisions_sync(store, source="gate")
        assert (allow.verdict, allow.reason) == ("allow", "current")
        assert store.get(allow.plan).parents == (store.head(REQ),)  # exactly what was shown
        [shown] = records_shown(llm.seen[0])
        assert '{"destination":"Lisbon"}' in shown and store.head(REQ)[:12] in shown
        assert get_hooks(InterceptionPoint.PRE_TOOL_CALL) == []  # `with` removed the hooks
    finally:
        store.close()


def test_a_stale_plan_is_answered_with_the_refusal_and_the_retry_books_the_new_value() -> None:
    store = trip_store()
    booked: list[Any] = []

    def answer(messages: list[dict[str, Any]]) -> Any:
        result = tool_result(messages)
        if result is None:
            store.put(REQ, {"destination": "Porto"}, author="customer")  # while the model thinks
            return book("Lisbon")
        return book("Porto") if "changed" in result else "Booked."

    llm = FunctionLLM(answer)
    try:
        with PlanfenceHooks(store, POLICY, keys=[REQ], agent="booker"):
            assert crew(llm, booked).kickoff().raw == "Booked."
        assert [d for d, _ in booked] == ["Porto"]
        assert booked[0][1] is not None  # the allow's fencing token, inside the tool
        refusal = tool_result(llm.seen[1])
        assert refusal is not None and f"{REQ} changed" in refusal and "Porto" in refusal
        # The retry was shown the current record, once: the view is replaced, not appended.
        [shown] = records_shown(llm.seen[1])
        assert '"Porto"' in shown
        decisions = sorted(find_decisions_sync(store, source="gate"), key=lambda d: d.verdict)
        assert [d.verdict for d in decisions] == ["allow", "replan"]
        replanned = store.get(decisions[0].plan)
        assert replanned.parents == (store.head(REQ),)
        assert replanned.supersedes == decisions[1].plan
    finally:
        store.close()


def test_a_block_is_the_tools_answer_and_nothing_runs() -> None:
    store = trip_store()
    booked: list[Any] = []
    moves = iter(["Porto", "Madrid"])

    def answer(messages: list[dict[str, Any]]) -> Any:
        result = tool_result(messages)
        if result is not None and "will not run" in result:
            return "Gave up."
        store.put(REQ, {"destination": next(moves)}, author="customer")
        return book("Lisbon" if result is None else "Porto")

    llm = FunctionLLM(answer)
    try:
        with PlanfenceHooks(store, POLICY, keys=[REQ], agent="booker"):
            assert crew(llm, booked).kickoff().raw == "Gave up."
        assert booked == []
        last = tool_result(llm.seen[-1])
        assert last is not None and "stale_after_replan" in last
        payload = json.loads(last.splitlines()[-1])
        assert (payload["verdict"], payload["reason"]) == ("block", "stale_after_replan")
    finally:
        store.close()


async def test_a_store_failure_inside_the_hook_blocks_although_crewai_swallows_hook_errors(
    tmp_path: Path,
) -> None:
    inner = await open_async_store(f"sqlite:///{tmp_path / 'store.db'}")
    await inner.own(REQ, "customer")
    await inner.put(REQ, {"destination": "Lisbon"}, author="customer")
    down = Outage(inner)
    booked: list[Any] = []

    def answer(messages: list[dict[str, Any]]) -> Any:
        if tool_result(messages):
            return "Done."
        down.down = True  # after the records were shown: the plan cannot be stored
        return book("Lisbon")

    llm = FunctionLLM(answer)
    fence = PlanfenceHooks(down, POLICY, keys=[REQ], agent="booker").install()
    try:
        await crew(llm, booked).kickoff_async()
    finally:
        await fence.aclose()
        await inner.aclose()
    assert booked == []
    told = tool_result(llm.seen[-1])
    assert told is not None and "This action will not run." in told
    assert "store_unavailable" in told


async def test_a_closed_store_is_a_store_unavailable_block(tmp_path: Path) -> None:
    """The records hook cannot read: the model is told so (CrewAI would swallow the hook's
    error and run the model without records), and the call is blocked as store_unavailable."""
    store = await open_async_store(f"sqlite:///{tmp_path / 'store.db'}")
    await store.aclose()  # before the run
    booked: list[Any] = []
    llm = FunctionLLM(lambda m: "Done." if tool_result(m) else book("Lisbon"))
    fence = PlanfenceHooks(store, POLICY, keys=[REQ], agent="booker").install()
    try:
        await crew(llm, booked).kickoff_async()
    finally:
        fence.uninstall()
    assert booked == []
    assert any("cannot be read" in str(m["content"]) for m in llm.seen[0])
    told = tool_result(llm.seen[-1])
    assert told is not None and "store_unavailable" in told


def test_an_agent_whose_role_no_fence_knows_is_refused_on_the_record() -> None:
    """A role that matches no fenced role never turns the gate off: the call is blocked,
    recorded, and the refusal names the roles the fence knows and how to add one."""
    store = trip_store()
    booked: list[Any] = []
    llm = FunctionLLM(lambda m: "Stopped." if tool_result(m) else book("Lisbon"))
    try:
        with PlanfenceHooks(store, POLICY, keys=[REQ], agent="front-desk"):
            crew(llm, booked, role="Front Desk").kickoff()
        assert booked == []
        [block] = find_decisions_sync(store, source="gate")
        assert (block.verdict, block.reason) == ("block", "unknown_agent")
        told = tool_result(llm.seen[-1])
        assert told is not None and "This action will not run." in told
        assert "'Front Desk'" in told and "'front-desk'" in told and "roles=[" in told
        for point in (InterceptionPoint.PRE_MODEL_CALL, InterceptionPoint.POST_TOOL_CALL):
            assert get_hooks(point) == []  # `with` removed the hooks
    finally:
        store.close()


def test_a_role_another_installed_fence_knows_is_gated_by_that_fence() -> None:
    ours, theirs = trip_store(), trip_store()
    booked: list[Any] = []
    try:
        with (
            PlanfenceHooks(ours, POLICY, keys=[REQ], agent="booker"),
            PlanfenceHooks(theirs, POLICY, keys=[REQ], agent="planner"),
        ):
            crew(FunctionLLM(books_once), booked, role="planner").kickoff()
        assert [d for d, _ in booked] == ["Lisbon"] and booked[0][1] is not None
        assert find_decisions_sync(ours, source="gate") == []
        [allow] = find_decisions_sync(theirs, source="gate")
        assert (allow.verdict, allow.reason) == ("allow", "current")
    finally:
        ours.close()
        theirs.close()


def test_a_second_kickoff_after_a_blocked_one_gets_its_own_replan() -> None:
    store = trip_store()
    booked: list[Any] = []
    moves = iter(["Porto", "Madrid"])

    def answer(messages: list[dict[str, Any]]) -> Any:
        result = tool_result(messages)
        if result is not None and ("will not run" in result or "booked" in result):
            return "Over."
        [shown] = records_shown(messages)  # the current value, the one it books
        destination = json.loads(shown[shown.index("{") :])["destination"]
        move = next(moves, None)
        if move is not None:  # while it thinks
            store.put(REQ, {"destination": move}, author="customer")
        return book(destination)

    llm = FunctionLLM(answer)
    team = crew(llm, booked)
    try:
        with PlanfenceHooks(store, POLICY, keys=[REQ], agent="booker"):
            team.kickoff()  # Lisbon refused (replan), Porto blocked (stale again)
            moves = iter(["Rome"])
            team.kickoff()  # Madrid refused: its own replan, then Rome books
        assert [d for d, _ in booked] == ["Rome"]
        verdicts = [(d.verdict, d.reason) for d in find_decisions_sync(store, source="gate")]
        assert sorted(verdicts) == sorted(
            [
                ("replan", "stale_dependencies"),
                ("block", "stale_after_replan"),
                ("replan", "stale_dependencies"),
                ("allow", "current"),
            ]
        )
    finally:
        store.close()


def test_crewai_keeps_its_files_out_of_the_users_home() -> None:
    """Whatever `XDG_DATA_HOME` says, CrewAI puts credentials under `~/.local/share/crewai` and
    settings under `~/.config/crewai`: the tests point the home at a temporary folder."""
    from crewai_core import settings
    from crewai_core.paths import db_storage_path
    from crewai_core.token_manager import TokenManager

    home = Path(private_home()).resolve()
    paths = [
        Path(db_storage_path()),
        TokenManager._get_secure_storage_path(),
        settings.DEFAULT_CONFIG_PATH,
    ]
    assert all(p.resolve().is_relative_to(home) for p in paths), paths
