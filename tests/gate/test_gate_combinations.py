"""One contract for every configuration: a gate either gives every guarantee its options
promise, or refuses to start. Hypothesis draws the options that touch proof and recording (where
heads come from, `verify_heads=`, `owner_assigners=`, `audit=`, a policy with `lease_ms`, the
fencing tokens' `signing_key=`) and what the call goes through (the gate alone, inside
`GateMiddleware`, or each adapter's constructor, given that gate as its `gate=` or building
its own), and for each combination three attacks must be refused:

- a stale plan (always promised);
- a forged reassignment, by an agent no gate trusts to assign owners, or unsigned (promised by
  `verify_heads` with `owner_assigners`, whatever the source of heads);
- a forged head: for a source that reads the store, a head its owner never signed (promised by
  `verify_heads`); for owner services, an answer signed by a key that is not the owner's
  (promised by `HttpOwnerHeads` itself).

The control: each forgery is allowed by a gate that does not promise to refuse it, so the
refusals are the options' doing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planfence.adapters.owner_service import HttpOwnerHeads, PublicKeyring, SigningKey
from planfence.adapters.owner_service.server import create_app
from planfence.plugins.gate import Gate, GateMiddleware, Policy, ToolCall, create_plan
from planfence.plugins.gate.store_heads import StoreHeads
from planfence.shared_memory import AsyncStore, ConfigError, Record, WriteBatch, create_async_store
from planfence.shared_memory.batches import ReassignOwner

KEY = "order/7"
ARGS = {"id": "7"}
PLAIN = '[tools.ship]\ndepends_on = ["order/{id}"]\n'
LEASED = PLAIN + "lease_ms = 5000\n"
AGENTS = ("admin", "old", "new", "mallory", "executor")
SIGNING = {a: SigningKey.generate(a) for a in AGENTS}
RING = PublicKeyring({"keys": [k.public_jwk() for k in SIGNING.values()]})
IMPOSTOR = SigningKey.generate("old")  # claims to be the owner; its key is not in the keyring

HEADS = ("store", "store_heads", "owners", "owners_rechecked")
VERIFY = ("none", "both", "keys_only", "assigners_only")
AUDITS = ("deferred", "durable", "off")
ATTACKS = ("stale_plan", "foreign_reassignment", "unsigned_reassignment", "forged_head")


FRONTS = (
    "gate",
    "middleware",
    "pydantic_ai",
    "openai_agents",
    "maf",
    "langgraph",
    "langgraph_graph",
    "autogen",
    "a2a",
    "mcp_in_server",
    "agno",
)


@dataclass(frozen=True)
class Options:
    heads: str
    verify: str
    audit: str
    leased: bool
    front: str  # what the call goes through: the gate, GateMiddleware, or an adapter
    signed_tokens: bool

    @property
    def given_gate(self) -> bool:
        """An adapter is given the gate these options build (`gate=`), not its default."""
        return self.front not in ("gate", "middleware") and (
            self.heads != "store" or self.verify != "none"
        )

    def refused_at_start(self) -> bool:
        """Options that cannot all hold: half of the untrusted-store pair proves nothing (the
        `Gate` refuses to be built, so neither it nor an adapter given it ever starts)."""
        return self.verify in ("keys_only", "assigners_only")

    def promises(self, attack: str) -> bool:
        """Whether these options promise to refuse `attack`."""
        if attack == "stale_plan":
            return True
        if self.front not in ("gate", "middleware") and not self.given_gate:
            return False  # the adapter's own gate: the store taken on trust
        if attack == "forged_head" and self.heads.startswith("owners"):
            return True  # the owner services' answers are verified whatever else is set
        return self.verify == "both"


async def put(store: AsyncStore, owner: str, value: object, *parents: str) -> Record:
    store.signer = SIGNING[owner]
    try:
        return await store.put(KEY, value, author=owner, parents=list(parents))
    finally:
        store.signer = None


async def seeded(store: AsyncStore) -> Record:
    """The key assigned to `old` by `admin`, and its first head, both signed."""
    store.signer = SIGNING["admin"]
    try:
        await store.own(KEY, "old", by="admin")
    finally:
        store.signer = None
    return await put(store, "old", {"n": 1})


async def plan_on(store: AsyncStore, record: Record) -> str:
    return (await create_plan(store, author="planner", parents=[record.id])).id


async def attacked(store: AsyncStore, attack: str) -> str:
    """Set the store up for `attack`; the plan the attacked call carries."""
    r1 = await seeded(store)
    if attack == "stale_plan":
        plan = await plan_on(store, r1)
        await put(store, "old", {"n": 2}, r1.id)
        return plan
    if attack == "foreign_reassignment":  # mallory hands the key to herself
        batch = WriteBatch(
            ops=(ReassignOwner(KEY, "mallory", "mallory"),), signer=SIGNING["mallory"]
        )
        await store.write(batch)
        return await plan_on(store, await put(store, "mallory", {"n": 2}, r1.id))
    if attack == "unsigned_reassignment":  # in the assigner's name, without its signature
        await store.write(WriteBatch(ops=(ReassignOwner(KEY, "new", "admin"),)))
        return await plan_on(store, await put(store, "new", {"n": 2}, r1.id))
    assert attack == "forged_head"
    # For the store's heads: a head the owner never signed. (Owner services answer for the
    # current head; their forgery is the impostor's signature, see `owner_services`.)
    forged = Record.create(KEY, {"n": 666}, author="mallory", parents=[r1.id])
    await store.write(WriteBatch(records=(forged,)))
    state = (await store.states([KEY]))[KEY]
    await store._tamper_head(replace(state, head=forged.id, version=state.version + 1))  # type: ignore[attr-defined]
    return await plan_on(store, forged)


@asynccontextmanager
async def owner_services(
    store: AsyncStore, options: Options, attack: str
) -> AsyncIterator[HttpOwnerHeads]:
    """Owner services for every agent, in process; for a forged head, the owner's address
    answers with the impostor's key (the store's head left as the owner signed it)."""
    mounts = {}
    for agent in ("old", "new", "mallory"):
        key = IMPOSTOR if (agent == "old" and attack == "forged_head") else SIGNING[agent]
        app = create_app(agent, store, RING, signing_key=key)
        mounts[f"http://{agent}"] = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(mounts=mounts) as client:
        yield HttpOwnerHeads(
            {a: f"http://{a}" for a in ("old", "new", "mallory")},
            RING,
            agent="executor",
            signing_key=SIGNING["executor"],
            client=client,
            store=store if options.heads == "owners_rechecked" else None,
        )


async def verdict_of(options: Options, attack: str) -> str:
    """Build the configuration over a store set up for `attack`, judge the call: its verdict
    ("allow", "replan", "block"), or "refused to start"."""
    store = create_async_store("memory://")
    await store.setup()
    async with AsyncExitStack() as stack:
        stack.push_async_callback(store.aclose)
        if attack == "forged_head" and options.heads.startswith("owners"):
            plan = await plan_on(store, await seeded(store))  # current; the answer is forged
        else:
            plan = await attacked(store, attack)
        heads = None
        if options.heads == "store_heads":
            heads = StoreHeads(store)
        elif options.heads.startswith("owners"):
            heads = await stack.enter_async_context(owner_services(store, options, attack))
        verify = {
            "none": {},
            "both": {"verify_heads": RING, "owner_assigners": {"admin"}},
            "keys_only": {"verify_heads": RING},
            "assigners_only": {"owner_assigners": {"admin"}},
        }[options.verify]
        policy = Policy.from_toml(LEASED if options.leased else PLAIN)

        def configured(store: AsyncStore, policy: Policy, agent: str | None) -> Gate:
            return Gate(store, policy, heads=heads, audit=options.audit, agent=agent, **verify)  # type: ignore[arg-type]

        try:
            if options.front == "gate":
                gate = configured(store, policy, None)
                stack.push_async_callback(gate.aclose)
                return (await gate.check(ToolCall("ship", ARGS, plan))).verdict
            if options.front == "middleware":
                gate = configured(store, policy, None)
                stack.push_async_callback(gate.aclose)
                key = SigningKey.generate("gate-1", role="gate") if options.signed_tokens else None
                middleware = GateMiddleware(store, policy, gate=gate, signing_key=key)
            else:
                given = configured(store, policy, "executor") if options.given_gate else None
                if given is not None:
                    stack.push_async_callback(given.aclose)
                middleware = ADAPTERS[options.front](store, policy, given, options)
        except ConfigError:
            return "refused to start"
        stack.push_async_callback(middleware.aclose)
        judged = await middleware.judge(ToolCall("ship", ARGS, plan))
        await middleware.release(judged)
        return "allow" if judged.allowed else judged.verdict.verdict
    raise AssertionError("unreachable")


# ---- each adapter's constructor, as its users call it; the call goes through the gate it built

Given = Gate | None


def _pydantic_ai(store: AsyncStore, policy: Policy, gate: Given, o: Options) -> Any:
    from planfence.adapters.pydantic_ai import PlanfenceCapability

    return PlanfenceCapability(store, policy, agent="executor", gate=gate, audit=o.audit).gate


def _openai_agents(store: AsyncStore, policy: Policy, gate: Given, o: Options) -> Any:
    from planfence.adapters.openai_agents import PlanfenceGuardrail

    return PlanfenceGuardrail(store, policy, agent="executor", gate=gate, audit=o.audit).gate


def _maf(store: AsyncStore, policy: Policy, gate: Given, o: Options) -> Any:
    from planfence.adapters.maf import PlanfenceFunctionMiddleware

    return PlanfenceFunctionMiddleware(
        store, policy, agent="executor", gate=gate, audit=o.audit
    ).gate


def _langgraph(store: AsyncStore, policy: Policy, gate: Given, o: Options) -> Any:
    from planfence.adapters.langgraph import PlanfenceAgentMiddleware

    return PlanfenceAgentMiddleware(store, policy, agent="executor", gate=gate, audit=o.audit).gate


def _langgraph_graph(store: AsyncStore, policy: Policy, gate: Given, o: Options) -> Any:
    from planfence.adapters.langgraph import PlanfenceToolNode

    fence = PlanfenceToolNode(store, policy, planner="planner", gate=gate, audit=o.audit)
    return fence.gate


def _autogen(store: AsyncStore, policy: Policy, gate: Given, o: Options) -> Any:
    from autogen_core.tools import StaticWorkbench

    from planfence.adapters.autogen import PlanfenceWorkbench

    bench = PlanfenceWorkbench(
        StaticWorkbench([]), store=store, policy=policy, gate=gate, audit=o.audit
    )
    return bench.gate


def _a2a(store: AsyncStore, policy: Policy, gate: Given, o: Options) -> Any:
    from a2a.server.agent_execution import AgentExecutor

    from planfence.adapters.a2a import PlanfenceAgentExecutor

    class Booking(AgentExecutor):  # type: ignore[misc]
        async def execute(self, context: Any, event_queue: Any) -> None:
            return None

        async def cancel(self, context: Any, event_queue: Any) -> None:
            return None

    fenced = PlanfenceAgentExecutor(
        Booking(), store, policy, agent="executor", gate=gate, audit=o.audit
    )
    return fenced.gate


def _mcp_in_server(store: AsyncStore, policy: Policy, gate: Given, o: Options) -> Any:
    from planfence.adapters.mcp import PlanfenceServerMiddleware

    key = SigningKey.generate("gate-1", role="gate") if o.signed_tokens else None
    return PlanfenceServerMiddleware(
        store, policy, agent="executor", gate=gate, audit=o.audit, signing_key=key
    ).gate


def _agno(store: AsyncStore, policy: Policy, gate: Given, o: Options) -> Any:
    from planfence.adapters.agno import PlanfenceToolHook

    return PlanfenceToolHook(store, policy, agent="executor", gate=gate, audit=o.audit).gate


ADAPTERS: dict[str, Callable[[AsyncStore, Policy, Given, Options], Any]] = {
    "pydantic_ai": _pydantic_ai,
    "openai_agents": _openai_agents,
    "maf": _maf,
    "langgraph": _langgraph,
    "langgraph_graph": _langgraph_graph,
    "autogen": _autogen,
    "a2a": _a2a,
    "mcp_in_server": _mcp_in_server,
    "agno": _agno,
}


OPTIONS = st.builds(
    Options,
    heads=st.sampled_from(HEADS),
    verify=st.sampled_from(VERIFY),
    audit=st.sampled_from(AUDITS),
    leased=st.booleans(),
    front=st.sampled_from(FRONTS),
    signed_tokens=st.booleans(),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(options=OPTIONS)
async def test_every_combination_refuses_what_it_promises_or_refuses_to_start(
    options: Options,
) -> None:
    for attack in ATTACKS:
        got = await verdict_of(options, attack)
        if options.refused_at_start():
            assert got == "refused to start", (options, attack, got)
        elif options.promises(attack):
            assert got in ("replan", "block"), (options, attack, got)
        else:
            # Control: the forgery gets through a gate that does not promise to refuse it.
            assert got == "allow", (options, attack, got)


@pytest.mark.parametrize("heads", HEADS)
async def test_owner_proof_holds_whatever_the_source_of_heads(heads: str) -> None:
    """The first of the security defects, by name: with `heads=` the gate used to skip the owner
    proof and allow a key a non-assigner reassigned to herself, or that was reassigned unsigned."""
    options = Options(heads, "both", "deferred", False, "gate", False)
    for attack in ("foreign_reassignment", "unsigned_reassignment"):
        assert await verdict_of(options, attack) == "block", attack


async def test_middleware_refuses_an_audit_it_would_drop() -> None:
    """`GateMiddleware(audit=...)` configures the gate it builds: with a gate of the caller's
    own, asking for another recording refuses to start instead of being ignored."""
    store = create_async_store("memory://")
    await store.setup()
    try:
        policy = Policy.from_toml(PLAIN)
        async with Gate(store, policy) as deferred, Gate(store, policy, audit="durable") as durable:
            with pytest.raises(ConfigError, match="set the recording on the gate itself"):
                GateMiddleware(store, policy, gate=deferred, audit="durable")
            GateMiddleware(store, policy, gate=durable, audit="durable")  # says what it does
            GateMiddleware(store, policy, gate=deferred)
    finally:
        await store.aclose()
