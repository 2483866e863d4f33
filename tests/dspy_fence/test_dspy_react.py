"""`PlanfenceReAct`: the docs example runs, the records are an input of the signature on every
step, refusals are the tool's observation in the trajectory, a fault is a block, and DSPy's own
argument check comes before the gate."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import dspy
import pytest
from docpages import block
from dspy_script import FINISH, call, scripted

from planfence.adapters.dspy import PlanfenceReAct
from planfence.fence import current
from planfence.plugins.gate import Middleware, Policy, ToolCall, find_decisions_sync
from planfence.plugins.gate.middleware import CallNext, Judgement
from planfence.shared_memory import ConfigError, Store, open_store

REQ = "trip/42/requirements"
POLICY = Policy().declare("book_flight", depends_on=[REQ])
TASK = "Book the flight for trip 42."


def test_the_docs_example_runs(capsys: Any, tmp_path: Path) -> None:
    code = block("docs/frameworks/dspy.md", "Example")
    url = f"sqlite:///{tmp_path / 'team.db'}"  # on a file, what it wrote is read back after
    code = code.replace('open_store("memory://")', f"open_store({url!r})")
    exec(compile(code, "docs/frameworks/dspy.md", "exec"), {"__name__": "docs"})
    assert capsys.readouterr().out.strip() == "Booked the flight to Lisbon."
    store = open_store(url)
    try:
        [allow] = find_decisions_sync(store, source="gate")
        assert (allow.verdict, allow.reason) == ("allow", "current")
        assert store.get(allow.plan).parents == (store.head(REQ),)  # exactly what was shown
    finally:
        store.close()


@pytest.fixture
def store() -> Any:
    s = open_store("memory://")
    s.own(REQ, "customer")
    s.put(REQ, {"destination": "Lisbon"}, author="customer")
    yield s
    s.close()


class Booker:
    """The tool, recording what ran and under which fencing token."""

    def __init__(self) -> None:
        self.booked: list[str] = []
        self.tokens: list[Any] = []

    def __call__(self, destination: str) -> str:
        self.booked.append(destination)
        self.tokens.append(current())
        return f"booked a flight to {destination}"

    def tool(self) -> dspy.Tool:
        return dspy.Tool(self, name="book_flight", desc="Book the trip's flight.")


def _destination(text: str) -> str:
    found = re.findall(r'"destination":\s*"(\w+)"', text)
    return found[-1]


def book_once(shown: dict[str, str]) -> dict[str, Any]:
    """Book Lisbon, then finish."""
    return FINISH if "observation_0" in shown else call("book_flight", destination="Lisbon")


def verdicts(store: Store) -> list[tuple[str, str]]:
    return sorted((d.verdict, d.reason) for d in find_decisions_sync(store, source="gate"))


def fence(store: Store, booker: Booker, **options: Any) -> PlanfenceReAct:
    return PlanfenceReAct(
        store, POLICY, "task -> answer", [booker.tool()], keys=[REQ], agent="booker", **options
    )


def test_a_stale_plan_is_the_observation_and_the_next_step_sees_the_current_records(
    store: Store,
) -> None:
    booker = Booker()

    def answer(shown: dict[str, str]) -> dict[str, Any]:
        if "observation_0" not in shown:
            store.put(REQ, {"destination": "Porto"}, author="customer")  # while it thinks
            return call("book_flight", destination="Lisbon")
        if "observation_1" not in shown:
            return call("book_flight", destination=_destination(shown["records"]))
        return FINISH

    lm, engine = scripted(answer)
    react = fence(store, booker)
    with dspy.context(lm=lm):
        result = react(task=TASK)
    react.close()
    assert booker.booked == ["Porto"]
    refusal = result.trajectory["observation_0"]
    assert refusal.startswith("planfence refused book_flight")
    assert f"{REQ} changed" in refusal and '{"destination":"Porto"}' in refusal
    # The records are an input of every step: Lisbon first, Porto after the refusal.
    first, second = engine.shown[0]["records"], engine.shown[1]["records"]
    assert _destination(first) == "Lisbon" and _destination(second) == "Porto"
    assert verdicts(store) == [("allow", "current"), ("replan", "stale_dependencies")]
    assert booker.tokens[0] is not None  # the tool ran with the allow's fencing token


def test_a_block_is_the_observation_and_the_tool_never_runs(store: Store) -> None:
    booker = Booker()
    moves = iter(["Porto", "Madrid"])

    def answer(shown: dict[str, str]) -> dict[str, Any]:
        if "observation_1" in shown:
            return FINISH
        destination = _destination(shown["records"])
        store.put(REQ, {"destination": next(moves)}, author="customer")  # it moves every time
        return call("book_flight", destination=destination)

    lm, _ = scripted(answer)
    react = fence(store, booker)
    with dspy.context(lm=lm):
        result = react(task=TASK)
    react.close()
    assert booker.booked == []
    blocked = result.trajectory["observation_1"]
    assert blocked.startswith("planfence blocked book_flight (stale_after_replan)")
    assert "This action will not run." in blocked
    assert verdicts(store) == [("block", "stale_after_replan"), ("replan", "stale_dependencies")]


class Broken(Middleware):
    """A gate middleware that fails (fault injection)."""

    async def on_call_tool(self, call: ToolCall, call_next: CallNext) -> Judgement:
        raise RuntimeError("injected fault")


def test_a_fault_in_the_gate_is_a_block(store: Store) -> None:
    booker = Booker()
    lm, _ = scripted(book_once)
    react = fence(store, booker, middleware=[Broken()])
    with dspy.context(lm=lm):
        result = react(task=TASK)
    react.close()
    assert booker.booked == []
    assert result.trajectory["observation_0"].startswith("planfence blocked book_flight")


def test_a_store_that_cannot_be_read_is_shown_and_blocks(store: Store, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gone.db'}"
    gone = open_store(url)
    gone.close()  # closed before the run
    booker = Booker()
    lm, engine = scripted(book_once)
    react = fence(gone, booker)  # not closed after: its store is
    with dspy.context(lm=lm):
        result = react(task=TASK)
    assert booker.booked == []
    assert "cannot be read" in engine.shown[0]["records"]
    assert "(store_unavailable)" in result.trajectory["observation_0"]


def test_a_call_dspy_rejects_never_reaches_the_gate(store: Store) -> None:
    booker = Booker()

    def answer(shown: dict[str, str]) -> dict[str, Any]:
        if "observation_0" not in shown:
            return call("book_flight", to="Lisbon")  # not the tool's argument
        if "observation_1" not in shown:
            return call("book_flight", destination="Lisbon")
        return FINISH

    lm, _ = scripted(answer)
    react = fence(store, booker)
    with dspy.context(lm=lm):
        result = react(task=TASK)
    react.close()
    assert result.trajectory["observation_0"].startswith("Execution error in book_flight")
    assert booker.booked == ["Lisbon"]
    assert verdicts(store) == [("allow", "current")]  # one decision: the valid call's


async def test_acall_runs_async_tools_inside_the_gate(store: Store) -> None:
    tokens: list[Any] = []

    async def book_flight(destination: str) -> str:
        """Book the trip's flight."""
        await asyncio.sleep(0)
        tokens.append(current())
        return f"booked a flight to {destination}"

    lm, _ = scripted(book_once)
    react = PlanfenceReAct(store, POLICY, "task -> answer", [book_flight], keys=[REQ])
    with dspy.context(lm=lm):
        result = await react.acall(task=TASK)
    await react.aclose()
    assert result.trajectory["observation_0"] == "booked a flight to Lisbon"
    assert len(tokens) == 1 and tokens[0] is not None


def test_a_copy_made_by_dspy_shares_the_gate(store: Store) -> None:
    booker = Booker()
    react = fence(store, booker)
    twin = react.deepcopy()
    assert twin.gate is react.gate and twin.react is not react.react
    lm, _ = scripted(book_once)
    with dspy.context(lm=lm):
        twin(task=TASK)
    react.close()
    assert booker.booked == ["Lisbon"] and booker.tokens[0] is not None
    assert verdicts(store) == [("allow", "current")]


def test_a_tool_called_outside_a_run_has_no_plan(store: Store) -> None:
    booker = Booker()
    react = fence(store, booker)
    said = react.tools["book_flight"](destination="Lisbon")
    react.close()
    assert booker.booked == [] and said.startswith("planfence blocked book_flight")


def test_a_signature_with_its_own_records_field_is_refused(store: Store) -> None:
    with pytest.raises(ConfigError, match="records"):
        PlanfenceReAct(store, POLICY, "records, task -> answer", [Booker().tool()], keys=[REQ])


async def test_concurrent_runs_each_act_under_their_own_plan(store: Store) -> None:
    booker = Booker()
    lm, _ = scripted(book_once)
    react = fence(store, booker)
    with dspy.context(lm=lm):
        await asyncio.gather(react.acall(task=TASK), react.acall(task=TASK))
    await react.aclose()
    assert booker.booked == ["Lisbon", "Lisbon"]
    allows = find_decisions_sync(store, source="gate")
    assert [d.verdict for d in allows] == ["allow", "allow"]
    assert len({d.plan for d in allows}) == 2


def test_an_async_tool_from_sync_code_runs_inside_the_gate_only_when_dspy_allows_it(
    store: Store,
) -> None:
    tokens: list[Any] = []

    async def book_flight(destination: str) -> str:
        """Book the trip's flight."""
        tokens.append(current())
        return f"booked a flight to {destination}"

    react = PlanfenceReAct(store, POLICY, "task -> answer", [book_flight], keys=[REQ])
    lm, _ = scripted(book_once)
    with dspy.context(lm=lm):
        refused = react(task=TASK).trajectory["observation_0"]
    assert refused.startswith("Execution error in book_flight") and tokens == []
    lm, _ = scripted(book_once)
    with dspy.context(lm=lm, allow_tool_async_sync_conversion=True):
        ran = react(task=TASK).trajectory["observation_0"]
    react.close()
    assert ran == "booked a flight to Lisbon"
    assert len(tokens) == 1 and tokens[0] is not None
