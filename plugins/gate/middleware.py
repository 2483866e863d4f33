"""One interception seam for every tool-call path: middleware around the gate.

An adapter translates its framework's tool call into a frozen `ToolCall` and asks the middleware
stack for a judgement, `Allowed` or `Refused`; it runs the tool only on `Allowed`, and shows a
`Refused` to the model in its framework's own form. Each middleware sees the call on the way in
and the judgement on the way out, as in FastMCP or Starlette:

    class Logged(Middleware):
        async def on_call_tool(self, call: ToolCall, call_next: CallNext) -> Allowed | Refused:
            outcome = await call_next(call)
            log.info("%s: %s", call.tool, outcome.verdict.reason)
            return outcome

    gate = GateMiddleware(store, policy, agent="executor", middleware=[Logged()])
    outcome = await gate.judge(ToolCall("book_flight", args, plan_id))

`GateMiddleware` is the innermost one: it owns the gate per store (or judges with the `Gate` it
is given, configured as its user wants: owner heads, verification), fails closed (anything that
goes wrong is a refusal, never an allow), and reaches the store from sync or async code through
the one `StoreBridge`. What a
judgement says travels as its `payload` (`wire`); a step's judgements fold into one outcome with
`steps.fold_step`, which also keeps the one-replan budget.

Every allow carries a fencing token (`Allowed.fence`, see `fence`); when the tool's policy
declares `lease_ms`, the allow also holds a lease on the heads it was checked against
(`Allowed.lease`), so no owner moves them while the tool runs. Adapters run the tool inside
`guard` (or `guard_sync`), which judges, makes the token `planfence.fence.current()`, and
releases the lease when the tool returns:

    async with gate.guard(ToolCall("deploy", args, plan_id)) as judged:
        if judged.allowed:
            result = await deploy(args)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, ClassVar, Protocol, cast

from planfence.shared_memory import (
    AsyncStore,
    ConfigError,
    Lease,
    PlanfenceError,
    Store,
    StoreBridge,
)

from . import runner
from .audit import AUDIT_SOURCE, Decision
from .audit_writer import DEFAULT_AUDIT, AuditMode, audit_mode
from .call import Checker, ToolCall
from .checkers import CheckerFactory, gate_checker
from .decision import ALLOW, BLOCK, REPLAN, UNGATED, Verdict
from .executor import CallFn, Outcome, ReplanFn, Replanned
from .explain import explain
from .fence import FenceToken, TokenSigner, bound, issue
from .gate import Gate
from .leasing import LeaseRefused, release_lease, take_lease
from .outage import PlanUnavailable, failure
from .policy import Policy
from .wire import AllowPayload, DecisionDetail, RefusalPayload

logger = logging.getLogger("planfence.gate")


@dataclass(frozen=True)
class Allowed:
    """The call may run; `verdict` says why (a current plan, or an ungated tool). `fence` is
    what the allow was checked against, for the tool to re-check at commit time; `lease`, the
    lease held on those heads while the tool runs (when its policy declares `lease_ms`)."""

    verdict: Verdict
    fence: FenceToken | None = None
    lease: Lease | None = None
    allowed: ClassVar[bool] = True

    @property
    def payload(self) -> AllowPayload:
        """The decision in its wire model, for the allowed call's result."""
        return AllowPayload.of(self.verdict)


@dataclass(frozen=True)
class Refused:
    """The call must not run. `replan` says whether the caller may plan again once (the plan was
    stale) or is blocked; `message` is the refusal in words, for the model."""

    verdict: Verdict
    allowed: ClassVar[bool] = False

    @property
    def replan(self) -> bool:
        return self.verdict.verdict == REPLAN

    @property
    def reason(self) -> str:
        return str(self.verdict.reason)

    @property
    def stale_keys(self) -> tuple[str, ...]:
        return tuple(s.key for s in self.verdict.stale)

    @property
    def current(self) -> dict[str, str | None]:
        """Key -> the head the refusal showed, for every changed key."""
        return {s.key: s.current for s in self.verdict.stale}

    @property
    def message(self) -> str:
        """The refusal in words, for the model that has to act on it."""
        return explain(self.verdict)

    @property
    def payload(self) -> RefusalPayload:
        """The refusal in its wire model, for the framework's answer to the call."""
        return RefusalPayload.of(self.verdict)


Judgement = Allowed | Refused


class CallNext(Protocol):
    def __call__(self, call: ToolCall) -> Awaitable[Judgement]: ...


class Middleware:
    """Base class: override `on_call_tool`; the default passes the call on unchanged."""

    async def on_call_tool(self, call: ToolCall, call_next: CallNext) -> Judgement:
        return await call_next(call)


async def _ungated(call: ToolCall) -> Judgement:
    plan = call.plan if isinstance(call.plan, str) else None
    return Allowed(Verdict(ALLOW, UNGATED, call.tool, plan, call.agent))


async def run_middleware(stack: Sequence[Middleware], call: ToolCall) -> Judgement:
    """Pass `call` through `stack`, outermost first; a call no middleware refuses is allowed."""
    handler: CallNext = _ungated
    for middleware in reversed(stack):
        handler = partial(middleware.on_call_tool, call_next=handler)
    return await handler(call)


class GateMiddleware(Middleware):
    """The gate as the innermost middleware of a stack.

    Args:
        store: an `AsyncStore`, a sync `Store`, a store URL, or a `StoreBridge` to one.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        gate: a `Gate` configured beyond these settings (owner heads, `verify_heads`, ...),
            over the same store and policy; default a `Gate(store, policy, agent=, audit=)`
            built per store. Nothing else judges calls: a baseline checker (for experiments)
            plugs in only through `planfence.demos.executors`, never through a configuration.
        agent: who calls, when the call does not say.
        middleware: middleware around the gate, outermost first.
        audit: how the default gate records its decisions (`Gate`'s `audit`): "deferred"
            (default), allows written by group commit just after; "durable", every decision
            before it answers; "off", the replan budget's refusals only. `aclose()` writes
            what a deferred audit queued.
        signing_key: signs each allow's fencing token (an Ed25519 `SigningKey`); without one
            the tokens are unsigned (and say so).
    """

    def __init__(
        self,
        store: AsyncStore | Store | StoreBridge | str,
        policy: Policy | Mapping[str, Any] | str,
        *,
        gate: Gate | None = None,
        agent: str | None = None,
        middleware: Iterable[Middleware] = (),
        audit: AuditMode = DEFAULT_AUDIT,
        signing_key: TokenSigner | None = None,
    ) -> None:
        self.bridge = store if isinstance(store, StoreBridge) else StoreBridge(store)
        self.policy = Policy.coerce(policy)
        self.agent = agent
        self.audit = audit
        self.signing_key = signing_key
        if signing_key is None:
            logger.info("no signing key: fencing tokens are issued unsigned")
        _check_gate_fits(gate, self.bridge, self.policy, audit)
        self.fixed: Checker | None = gate
        self.factory: CheckerFactory = gate_checker
        self.stack: tuple[Middleware, ...] = (*middleware, self)
        self._by_store: dict[int, tuple[AsyncStore, Checker]] = {}

    def checker_for(self, store: AsyncStore) -> Checker:
        """The checker for `store`, built once per store object."""
        if self.fixed is not None:
            return self.fixed
        hit = self._by_store.get(id(store))
        if hit is None or hit[0] is not store:
            made: Checker
            if self.factory is gate_checker:
                made = gate_checker(store, self.policy, self.agent, audit=self.audit)
            else:
                made = self.factory(store, self.policy, self.agent)
            hit = self._by_store[id(store)] = (store, made)
        return hit[1]

    async def flush(self) -> None:
        """Write the allows the gates' deferred audits have queued (before reading the journal)."""
        checkers = [self.fixed] if self.fixed is not None else []
        await self._on_store_loop(
            "flush", [*checkers, *(checker for _, checker in self._by_store.values())]
        )

    async def __aenter__(self) -> GateMiddleware:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the checkers this middleware built (a deferred audit writes its queue)."""
        built, self._by_store = list(self._by_store.values()), {}
        await self._on_store_loop("aclose", [checker for _, checker in built])

    async def _on_store_loop(self, method: str, checkers: list[Checker]) -> None:
        """Call each checker's `method` where its checks ran: on the store's loop (a sync
        store's portal), since its queued writes belong to that loop."""
        calls = [c for c in (getattr(checker, method, None) for checker in checkers) if c]
        if not calls or self.bridge.store is None:
            return

        async def each(_: AsyncStore) -> None:
            for call in calls:
                await call()

        await self.bridge.acall(each)

    async def on_call_tool(self, call: ToolCall, call_next: CallNext) -> Judgement:
        verdict = await self._verdict(call)
        if verdict.verdict != ALLOW:
            return Refused(verdict)
        after = await call_next(call)
        return Allowed(verdict) if after.allowed else after

    async def _verdict(self, call: ToolCall) -> Verdict:
        """The checker's verdict on `call`; a check that cannot run blocks (fail closed), as
        `store_unavailable` when the store is down (or the plan could not be stamped)."""
        if isinstance(call.plan, PlanUnavailable):
            declared = self.policy.get(call.tool)
            if declared is not None and not declared.ungated:
                return call.plan.verdict(call.tool, call.agent or self.agent)
            call = replace(call, plan=None)
        try:
            return await self.bridge.acall(self._check, call)
        except Exception as exc:
            return failure(call.tool, call.plan, call.agent or self.agent, exc)

    async def _check(self, store: AsyncStore, call: ToolCall) -> Verdict:
        return await self.checker_for(store).check(call.by(self.agent))

    async def run(self, call: ToolCall, fn: CallFn, replan: ReplanFn | None = None) -> Outcome:
        """Check `call`, replan once if told to, and run `fn(args)` only on an allow: inside the
        allow's guard (`guard`), with its fencing token as `planfence.fence.current()` and the
        lease the tool's policy declares held until `fn` returns (see `runner`)."""
        return await runner.run(self, call, fn, replan)

    def run_sync(
        self,
        call: ToolCall,
        fn: Callable[[Mapping[str, Any]], Any],
        replan: Callable[[Verdict], Replanned | None] | None = None,
    ) -> Outcome:
        """`run` for sync code, with plain callables; the tool runs on the caller's thread."""
        return runner.run_sync(self, call, fn, replan)

    async def judge(self, call: ToolCall) -> Judgement:
        """Pass `call` through the whole stack, from async code; an allow comes back with its
        fencing token, and with a lease when the tool's policy declares `lease_ms` (release
        it with `release`, or judge inside `guard`, which does)."""
        try:
            judged = await run_middleware(self.stack, call)
            if isinstance(judged, Allowed):
                return await self._fenced(call, judged)
            return judged
        except Exception as exc:  # a middleware that fails must not let the call through
            return Refused(failure(call.tool, call.plan, call.agent or self.agent, exc))

    def judge_sync(self, call: ToolCall) -> Judgement:
        """`judge` from sync code (on the store's portal)."""
        try:
            return self.bridge.run(self.judge, call)
        except Exception as exc:
            return Refused(failure(call.tool, call.plan, call.agent or self.agent, exc))

    async def _fenced(self, call: ToolCall, judged: Allowed) -> Judgement:
        """The allow with its token, and its lease when the tool's policy asks for one (taken on
        the heads the gate checked: if they moved meanwhile, the call is judged again)."""
        declared = self.policy.get(call.tool)
        lease: Lease | None = None
        if declared is not None and declared.lease_ms is not None:
            holder = call.agent or self.agent or "gate"

            async def again() -> Judgement:
                return await run_middleware(self.stack, call)

            got = await self.bridge.acall(take_lease, judged, again, holder, declared.lease_ms)
            if isinstance(got, LeaseRefused):
                return await self.refuse(call, got.reason, got.message, by="gate-lease")
            again_judged, lease = got
            if not isinstance(again_judged, Allowed):
                return again_judged
            judged = again_judged
        try:
            token = issue(judged.verdict, lease=lease, signer=self.signing_key)
        except BaseException:
            if lease is not None:  # the call is refused: nobody will release this lease
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.bridge.acall(release_lease, lease))
            raise
        return Allowed(judged.verdict, token, lease)

    async def release(self, judged: Judgement | None) -> None:
        """Release the lease an allow holds (nothing for a refusal or an allow without one);
        a lease that cannot be released ends by itself after its `lease_ms`."""
        if isinstance(judged, Allowed) and judged.lease is not None:
            try:
                await self.bridge.acall(release_lease, judged.lease)
            except PlanfenceError:
                logger.warning("could not release the lease of %s", judged.verdict.tool)

    @asynccontextmanager
    async def guard(self, call: ToolCall) -> AsyncIterator[Judgement]:
        """Judge `call`; inside the block (where the tool runs, on an allow) its token is
        `planfence.fence.current()`; the lease is released when the block ends."""
        judged = await self.judge(call)
        try:
            with bound(judged.fence if isinstance(judged, Allowed) else None):
                yield judged
        finally:
            await self.release(judged)

    @contextmanager
    def guard_sync(self, call: ToolCall) -> Iterator[Judgement]:
        """`guard` for sync code."""
        judged = self.judge_sync(call)
        try:
            with bound(judged.fence if isinstance(judged, Allowed) else None):
                yield judged
        finally:
            if isinstance(judged, Allowed) and judged.lease is not None:
                self.bridge.run(self.release, judged)

    async def refuse(self, call: ToolCall, reason: str, message: str, *, by: str) -> Refused:
        """Refuse a call no checker could judge (its request was malformed), on the record
        when the store can take it; `by` names who refused, for the audit log."""
        plan = call.plan if isinstance(call.plan, str) else None
        verdict = Verdict(BLOCK, reason, call.tool, plan, message=message)
        decision = Decision(
            source=AUDIT_SOURCE,
            verdict=BLOCK,
            reason=reason,
            tool=call.tool,
            plan=plan,
            payload=DecisionDetail(message=message, executor=by).wire(),
        )
        try:
            verdict = replace(verdict, decision_id=await self.bridge.acall(_log, decision))
        except PlanfenceError:
            logger.warning("could not record the refusal of %s", call.tool, exc_info=True)
        return Refused(verdict)


def _check_gate_fits(
    gate: Gate | None, bridge: StoreBridge, policy: Policy, audit: AuditMode
) -> None:
    """A gate given to the middleware must be a `Gate` judging the store and policy the adapter
    reads and stamps from; `audit=` configures the gate the middleware builds, so with a gate of
    the caller's own another recording than the default refuses to start (it would be silently
    dropped) unless that gate records that way already."""
    if gate is None:
        return
    if not isinstance(gate, Gate):
        raise ConfigError(
            f"gate must be a planfence Gate, got {type(gate).__name__}: "
            "a checker of another kind is an experiment (see planfence.demos.executors)"
        )
    opened = bridge.store is not None
    if (gate.store is not bridge.aio) if opened else (gate.store.url != bridge.url):
        raise ConfigError(
            f"the gate judges store {gate.store.url!r}, but the adapter uses {bridge.url!r}: "
            "give both the same store"
        )
    if dict(gate.policy.tools) != dict(policy.tools):
        raise ConfigError(
            "the gate's policy is not the adapter's: give both the same policy "
            f"(gate {gate.policy.source!r}, adapter {policy.source!r})"
        )
    if audit_mode(audit) != audit_mode(DEFAULT_AUDIT) and gate.audit_mode != audit_mode(audit):
        raise ConfigError(
            f"audit={audit!r} configures the gate GateMiddleware builds, and a gate was given: "
            "set the recording on the gate itself (Gate(..., audit=...))"
        )


def judge_with(middleware: GateMiddleware, checker: Checker | CheckerFactory) -> GateMiddleware:
    """For experiments only: make `middleware` judge with `checker` (a ready checker, or a
    factory `(store, policy, agent) -> checker` built once per store) instead of its gate.

    Everything around the checker stays: the middleware stack, fail-closed refusals, fencing
    tokens and leases. Returns `middleware`."""
    middleware._by_store = {}
    if callable(getattr(checker, "check", None)):
        middleware.fixed, middleware.factory = cast(Checker, checker), gate_checker
    else:
        middleware.fixed, middleware.factory = None, cast(CheckerFactory, checker)
    return middleware


async def _log(store: AsyncStore, decision: Decision) -> int:
    return await store.log(decision)


__all__ = [
    "Allowed",
    "CallNext",
    "GateMiddleware",
    "Judgement",
    "Middleware",
    "Refused",
    "ToolCall",
    "judge_with",
    "run_middleware",
]
