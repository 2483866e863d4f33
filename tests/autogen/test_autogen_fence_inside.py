"""In front of a `StaticWorkbench` the gate runs when the tool starts (inside AutoGen's span for
it): the user's tools are left as they were, and a call whose tool never starts is judged all
the same."""

from __future__ import annotations

from autogen_core import CancellationToken
from autogen_core.tools import FunctionTool, StaticWorkbench
from autogen_helpers import POLICY, REQ, Trip

from planfence.adapters.autogen import PlanfenceWorkbench
from planfence.plugins.gate import create_plan
from planfence.shared_memory import open_async_store


async def test_the_fence_leaves_the_users_tools_alone_and_judges_every_call() -> None:
    store = await open_async_store("memory://")
    ran: list[str] = []

    def book_flight(destination: str) -> str:
        """Book the flight for the trip."""
        ran.append(destination)
        return f"booked {destination}"

    tool = FunctionTool(book_flight, description="Book a flight.")
    run_before = tool.run
    fence = PlanfenceWorkbench(StaticWorkbench([tool]), store=store, policy=POLICY)
    try:
        first = await Trip(store).seed("Lisbon")
        fence.bind((await create_plan(store, author="planner", parents=[first])).id)

        booked = await fence.call_tool("book_flight", {"destination": "Lisbon"})
        assert not booked.is_error and ran == ["Lisbon"]
        # Arguments the tool rejects: it never starts, and the call is still judged (allowed).
        bad = await fence.call_tool("book_flight", {"where": "Lisbon"})
        assert bad.is_error and ran == ["Lisbon"]
        await store.put(REQ, {"destination": "Porto"}, author="customer")
        stale = await fence.call_tool("book_flight", {"destination": "Lisbon"})
        assert stale.is_error and f"{REQ} changed" in stale.to_text()
        assert [v.verdict for v in fence.verdicts] == ["allow", "allow", "replan"]
        assert ran == ["Lisbon"]

        # The user's own tool is unchanged and still runs unfenced where they use it directly.
        assert tool.run == run_before
        await tool.run_json({"destination": "Faro"}, CancellationToken())
        assert ran == ["Lisbon", "Faro"]
    finally:
        await store.aclose()
