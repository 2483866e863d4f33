"""`FencedWorkbench`: the PlanFence gate in front of any AutoGen workbench.

Every `call_tool` is checked against the plan bound to the workbench (a `FencedAgent` binds the
plan id it finds in the incoming messages' metadata). A refusal comes back as
`ToolResult(is_error=True)` naming the records that changed. It never raises: an exception from
`call_tool` leaves `AssistantAgent` waiting on a tool stream that never ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from planfence.plugins.gate import BLOCK, GuardedExecutor, Policy, Verdict
from planfence.plugins.gate.decision import INTERNAL_ERROR
from planfence.shared_memory import AsyncStore, ConfigError, MissingExtraError, Store

try:
    from autogen_core import CancellationToken, Component, ComponentModel
    from autogen_core.tools import TextResultContent, ToolResult, ToolSchema, Workbench
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise MissingExtraError("planfence.adapters.autogen", "autogen") from exc
from pydantic import BaseModel
from typing_extensions import Self

from ._fence import CHECKERS, CheckerKind, coerce_policy, make_checker, policy_to_dict, refusal_text
from ._store import StoreRef


class FencedWorkbenchConfig(BaseModel):
    """Declarative form of `FencedWorkbench`; the store travels as a URL, the policy as a dict."""

    workbench: ComponentModel
    store: str
    policy: dict[str, Any]
    agent: str | None = None
    checker: Literal["planfence", "freshness"] = "planfence"


class FencedWorkbench(Workbench, Component[FencedWorkbenchConfig]):
    """Runs the gate before each tool call of the wrapped workbench.

    Args:
        workbench: the workbench whose tools are guarded (static tools, an MCP workbench, ...).
        store: an `AsyncStore`, a sync `Store`, or a store URL.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        agent: the executor's id, written to the audit log.
        checker: "planfence" (the gate) or "freshness" (the baseline that acts on stale plans;
            for measurements and for showing what the gate prevents).
    """

    component_type = "workbench"
    component_config_schema = FencedWorkbenchConfig
    component_provider_override = "planfence.adapters.autogen.FencedWorkbench"

    def __init__(
        self,
        workbench: Workbench,
        *,
        store: AsyncStore | Store | str,
        policy: Policy | Mapping[str, Any] | str,
        agent: str | None = None,
        checker: CheckerKind = "planfence",
    ) -> None:
        self.inner = workbench
        self.store = StoreRef(store)
        self.policy = coerce_policy(policy)
        self.agent = agent
        self.checker_kind: CheckerKind = checker
        if checker not in CHECKERS:
            raise ConfigError(f"unknown checker {checker!r}: use one of {', '.join(CHECKERS)}")
        self._checker: GuardedExecutor | None = None
        self._checker_store: AsyncStore | None = None
        self._plan_id: str | None = None
        self._turn: list[Verdict] = []
        self.verdicts: list[Verdict] = []

    # ---- the plan the calls act under

    @property
    def plan_id(self) -> str | None:
        return self._plan_id

    def bind(self, plan_id: str | None) -> None:
        """Act under `plan_id` from now on (None: calls carry no plan and are blocked)."""
        self._plan_id = plan_id

    def begin_turn(self) -> None:
        self._turn = []

    @property
    def turn_verdicts(self) -> tuple[Verdict, ...]:
        """Verdicts since `begin_turn` (a `FencedAgent` starts one per turn)."""
        return tuple(self._turn)

    # ---- Workbench

    async def list_tools(self) -> list[ToolSchema]:
        return list(await self.inner.list_tools())

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        cancellation_token: CancellationToken | None = None,
        call_id: str | None = None,
    ) -> ToolResult:
        args = dict(arguments or {})
        verdict = await self.check(name, args)
        self._turn.append(verdict)
        self.verdicts.append(verdict)
        if not verdict.allowed:
            return _error(name, refusal_text(verdict))
        try:
            return await self.inner.call_tool(name, args, cancellation_token, call_id)
        except Exception as exc:
            return _error(name, f"{type(exc).__name__}: {exc}")

    async def check(self, name: str, args: Mapping[str, Any]) -> Verdict:
        """The gate's verdict for a call under the bound plan; never raises."""
        plan_id = self._plan_id

        async def judge(store: AsyncStore) -> Verdict:
            return await self._checker_for(store).check(name, args, plan_id, agent=self.agent)

        try:
            return await self.store.run(judge)
        except Exception as exc:  # fail closed: a store that cannot be reached blocks
            return Verdict(
                BLOCK,
                INTERNAL_ERROR,
                name,
                plan_id,
                self.agent,
                message=f"gate error: {type(exc).__name__}: {exc}",
            )

    def _checker_for(self, store: AsyncStore) -> GuardedExecutor:
        if self._checker is None or self._checker_store is not store:
            self._checker = make_checker(self.checker_kind, store, self.policy, self.agent)
            self._checker_store = store
        return self._checker

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        await self.inner.stop()
        await self.store.aclose()

    async def reset(self) -> None:
        await self.inner.reset()
        self._plan_id = None
        self._turn = []

    async def save_state(self) -> Mapping[str, Any]:
        return {"inner": dict(await self.inner.save_state()), "plan_id": self._plan_id}

    async def load_state(self, state: Mapping[str, Any]) -> None:
        await self.inner.load_state(state.get("inner", {}))
        self._plan_id = state.get("plan_id")

    def _to_config(self) -> FencedWorkbenchConfig:
        return FencedWorkbenchConfig(
            workbench=self.inner.dump_component(),
            store=self.store.url,
            policy=policy_to_dict(self.policy),
            agent=self.agent,
            checker=self.checker_kind,
        )

    @classmethod
    def _from_config(cls, config: FencedWorkbenchConfig) -> Self:
        return cls(
            Workbench.load_component(config.workbench),
            store=config.store,
            policy=config.policy,
            agent=config.agent,
            checker=config.checker,
        )


def _error(name: str, text: str) -> ToolResult:
    return ToolResult(name=name, result=[TextResultContent(content=text)], is_error=True)
