"""What judges an adapter's calls: the gate it builds, or the `Gate` its user gives it, never
anything else through a configuration. A baseline (for experiments) plugs in only through the
seam the demos use (`judge_with`, `planfence.demos.executors.on_baseline`)."""

from __future__ import annotations

import ast
import importlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from planfence.demos.baselines import FreshnessOnly, freshness_checker
from planfence.demos.executors import on_baseline
from planfence.plugins.gate import Gate, GateMiddleware, PlanStamper, Policy, ToolCall
from planfence.plugins.gate.checkers import gate_checker
from planfence.plugins.gate.middleware import judge_with
from planfence.shared_memory import AsyncStore, ConfigError, create_async_store

POLICY = Policy.from_toml('[tools.book]\ndepends_on = ["trip/42"]\n')

# Every public adapter class, by import path: none takes a checker, each takes a gate.
ADAPTERS = [
    "planfence.adapters.pydantic_ai:PlanfenceCapability",
    "planfence.adapters.openai_agents:PlanfenceGuardrail",
    "planfence.adapters.adk:PlanfencePlugin",
    "planfence.adapters.crewai:PlanfenceHooks",
    "planfence.adapters.maf:PlanfenceFunctionMiddleware",
    "planfence.adapters.langgraph:PlanfenceAgentMiddleware",
    "planfence.adapters.langgraph:PlanfenceToolNode",
    "planfence.adapters.autogen:PlanfenceWorkbench",
    "planfence.adapters.a2a:PlanfenceAgentExecutor",
    "planfence.adapters.mcp:ToolJudge",  # PlanfenceServerMiddleware's constructor
    "planfence.adapters.mcp:PlanfenceFastMCPMiddleware",
]


@pytest.fixture
async def astore() -> AsyncIterator[AsyncStore]:
    store = create_async_store("memory://")
    await store.setup()
    try:
        yield store
    finally:
        await store.aclose()


async def stale_plan(store: AsyncStore) -> str:
    """A plan citing a version of trip/42 that its owner has since replaced."""
    await store.own("trip/42", "customer")
    first = await store.put("trip/42", {"to": "Lisbon"}, author="customer")
    plan = await PlanStamper(store, "planner").stamp([first.id])
    await store.put("trip/42", {"to": "Porto"}, author="customer")
    return plan.id


def init_params(path: str) -> list[str]:
    """The constructor's parameter names, read from the source (no framework import needed)."""
    module, _, name = path.partition(":")
    package = importlib.import_module(module)
    for source in Path(package.__file__ or "").parent.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ClassDef) and node.name == name:
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                        a = item.args
                        return [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    raise AssertionError(f"{path}: no __init__ found")


@pytest.mark.parametrize("path", ADAPTERS)
def test_no_adapter_takes_a_checker_and_each_takes_a_gate(path: str) -> None:
    params = init_params(path)
    assert "checker" not in params
    assert "gate" in params


async def test_the_gate_is_the_default(astore: AsyncStore) -> None:
    middleware = GateMiddleware(astore, POLICY)
    assert middleware.factory is gate_checker
    assert isinstance(middleware.checker_for(astore), Gate)


async def test_a_given_gate_judges_as_it_was_configured(astore: AsyncStore) -> None:
    plan = await stale_plan(astore)
    async with Gate(astore, POLICY, agent="configured") as given:
        middleware = GateMiddleware(astore, POLICY, gate=given)
        assert middleware.checker_for(astore) is given
        judged = await middleware.judge(ToolCall("book", {}, plan))
        assert (judged.verdict.verdict, judged.verdict.agent) == ("replan", "configured")


async def test_a_gate_that_is_not_a_gate_refuses_to_start(astore: AsyncStore) -> None:
    with pytest.raises(ConfigError, match="must be a planfence Gate"):
        GateMiddleware(astore, POLICY, gate=FreshnessOnly(astore, POLICY))  # type: ignore[arg-type]


async def test_a_gate_over_another_store_or_policy_refuses_to_start(astore: AsyncStore) -> None:
    other = create_async_store("memory://")
    await other.setup()
    try:
        with pytest.raises(ConfigError, match="give both the same store"):
            GateMiddleware(astore, POLICY, gate=Gate(other, POLICY))
        wider = Policy.from_toml('[tools.book]\ndepends_on = ["trip/42", "trip/43"]\n')
        with pytest.raises(ConfigError, match="give both the same policy"):
            GateMiddleware(astore, POLICY, gate=Gate(astore, wider))
    finally:
        await other.aclose()


async def test_a_baseline_judges_only_through_the_experiment_seam(astore: AsyncStore) -> None:
    """The control: the freshness-only baseline acts on the stale plan the gate refuses."""
    plan = await stale_plan(astore)
    gate = GateMiddleware(astore, POLICY)
    assert (await gate.judge(ToolCall("book", {}, plan))).verdict.verdict == "replan"
    control = on_baseline(GateMiddleware(astore, POLICY))
    assert (await control.judge(ToolCall("book", {}, plan))).allowed
    ready = judge_with(GateMiddleware(astore, POLICY), freshness_checker(astore, POLICY))
    assert (await ready.judge(ToolCall("book", {}, plan))).allowed
    await gate.aclose()
