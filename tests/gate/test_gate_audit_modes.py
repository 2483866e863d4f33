"""One audit setting, one default: `deferred`, for the gate and every adapter that builds one."""

from __future__ import annotations

from typing import Any

import pytest

from planfence.plugins.gate import DEFAULT_AUDIT, Gate, GateMiddleware, Policy, SyncGate
from planfence.plugins.gate.audit_writer import audit_mode
from planfence.shared_memory import AsyncStore, Store

POLICY = Policy.from_toml('[tools.ship]\ndepends_on = ["order/7"]\n')


def test_the_default_is_deferred_and_the_old_spellings_still_mean_the_same() -> None:
    assert DEFAULT_AUDIT == "deferred"
    assert [audit_mode(m) for m in (True, False, "durable", "deferred", "off")] == [
        "durable",
        "off",
        "durable",
        "deferred",
        "off",
    ]
    for wrong in ("before", "Deferred", None, 1):
        with pytest.raises(ValueError, match="audit must be"):
            audit_mode(wrong)


def built_by(middleware: GateMiddleware, store: AsyncStore) -> Gate:
    gate = middleware.checker_for(store)
    assert isinstance(gate, Gate)
    return gate


@pytest.mark.parametrize("given", [None, "durable", "off", "deferred"])
def test_every_way_to_build_a_gate_takes_the_setting_with_the_same_default(
    store: Store, given: str | None
) -> None:
    kw: dict[str, Any] = {} if given is None else {"audit": given}
    expected = given or "deferred"
    found = {
        "Gate": Gate(store.aio, POLICY, **kw).audit_mode,
        "SyncGate": SyncGate(store, POLICY, **kw).gate.audit_mode,
        "GateMiddleware": built_by(GateMiddleware(store.aio, POLICY, **kw), store.aio).audit_mode,
    }
    langgraph = pytest.importorskip("planfence.adapters.langgraph")
    graph = langgraph.PlanfenceToolNode(store, POLICY, planner="planner", **kw)
    found["PlanfenceToolNode"] = built_by(graph.gate, store.aio).audit_mode
    agent = langgraph.PlanfenceAgentMiddleware(store, POLICY, **kw)
    found["PlanfenceAgentMiddleware"] = built_by(agent.gate, store.aio).audit_mode
    mcp = pytest.importorskip("planfence.adapters.mcp")
    found["PlanfenceServerMiddleware"] = built_by(
        mcp.PlanfenceServerMiddleware(store.aio, POLICY, **kw).gate, store.aio
    )
    found["PlanfenceServerMiddleware"] = found["PlanfenceServerMiddleware"].audit_mode  # type: ignore[attr-defined]
    fastmcp = mcp.PlanfenceFastMCPMiddleware(store.aio, POLICY, **kw)
    found["PlanfenceFastMCPMiddleware"] = built_by(fastmcp.judge.gate, store.aio).audit_mode
    autogen = pytest.importorskip("planfence.adapters.autogen")
    from autogen_core.tools import StaticWorkbench

    bench = autogen.PlanfenceWorkbench(StaticWorkbench([]), store=store, policy=POLICY, **kw)
    found["PlanfenceWorkbench"] = built_by(bench.gate, store.aio).audit_mode
    loaded = autogen.PlanfenceWorkbench.load_component(bench.dump_component())  # kept in its config
    found["PlanfenceWorkbench, loaded"] = loaded.audit
    found.update(_framework_adapters(store, kw))
    assert found == dict.fromkeys(found, expected)


def _framework_adapters(store: Store, kw: dict[str, Any]) -> dict[str, Any]:
    """The audit mode each framework adapter gives its gate, for the frameworks installed here
    (ADK and CrewAI install in venvs of their own)."""
    import importlib

    found: dict[str, Any] = {}
    for module, name, build in (
        ("planfence.adapters.pydantic_ai", "PlanfenceCapability", lambda c: c(store, POLICY, **kw)),
        (
            "planfence.adapters.openai_agents",
            "PlanfenceGuardrail",
            lambda c: c(store, POLICY, **kw),
        ),
        ("planfence.adapters.adk", "PlanfencePlugin", lambda c: c(store, POLICY, **kw)),
        ("planfence.adapters.crewai", "PlanfenceHooks", lambda c: c(store, POLICY, **kw)),
        ("planfence.adapters.maf", "PlanfenceFunctionMiddleware", lambda c: c(store, POLICY, **kw)),
        (
            "planfence.adapters.a2a",
            "PlanfenceAgentExecutor",
            lambda c: c(None, store, POLICY, **kw),
        ),
    ):
        try:
            cls = getattr(importlib.import_module(module), name)
            adapter = build(cls)
        except ImportError:  # the framework is not installed in this venv
            continue
        found[f"{module.rsplit('.', 1)[1]}.{name}"] = built_by(adapter.gate, store.aio).audit_mode
    return found
