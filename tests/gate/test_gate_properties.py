"""Property: whatever the interleaving of revisions, plans, replans and actions, the gate never
allows an action whose plan frontier differs from the heads at the check. Plans cite single
versions, several versions of one key (the current head beside an older one), or both through a
quote. The same machine run with a wrong gate in place of planfence's (one that allows when the
head is anywhere in the frontier, and the freshness-only baseline) fails: the property can fail."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from planfence.demos.baselines import FreshnessOnly
from planfence.plugins.gate import Policy, SyncGate, ToolCall
from planfence.plugins.gate.plans import create_plan_sync
from planfence.shared_memory import Store, open_store

KEYS = ("doc/a", "doc/b", "doc/c")
TOOLS: dict[str, tuple[str, ...]] = {
    "use_a": ("doc/a",),
    "use_ab": ("doc/a", "doc/b"),
    "use_c": ("doc/c",),
    "use_all": KEYS,
}
POLICY = Policy(
    {name: Policy().declare(name, list(deps)).tools[name] for name, deps in TOOLS.items()}
).declare("read_only", ungated=True)


class Model:
    """Reference model: records as (key, parents), heads, and its own frontier walk."""

    def __init__(self) -> None:
        self.key_of: dict[str, str] = {}
        self.parents: dict[str, tuple[str, ...]] = {}
        self.heads: dict[str, str] = {}
        self.versions: dict[str, list[str]] = {}  # key -> its versions, oldest first

    def add(self, rid: str, key: str, parents: tuple[str, ...]) -> None:
        self.key_of[rid] = key
        self.parents[rid] = parents
        self.versions.setdefault(key, []).append(rid)

    def frontier(self, root: str, scope: tuple[str, ...]) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {k: set() for k in scope}
        seen: set[str] = set()
        stack = [root]
        while stack:
            rid = stack.pop()
            if rid in seen:
                continue
            seen.add(rid)
            if self.key_of[rid] in out:
                out[self.key_of[rid]].add(rid)
                continue
            stack.extend(self.parents[rid])
        return out

    def valid(self, plan: str, tool: str) -> bool:
        fr = self.frontier(plan, TOOLS[tool])
        return all(fr[k] == {self.heads[k]} for k in TOOLS[tool])


class Judged(Protocol):
    @property
    def allowed(self) -> bool: ...

    verdict: str
    reason: str


class Judge(Protocol):
    def check(self, call: ToolCall) -> Judged: ...


@dataclass(frozen=True)
class Allowed:
    verdict: str = "allow"
    reason: str = "current"
    allowed: bool = field(default=True)


class HeadInFrontierGate:
    """A wrong gate for the controls: planfence's verdict, except that a plan refused as stale
    is allowed when every key's head is among the versions it used (rather than the only one)."""

    def __init__(self, store: Store) -> None:
        self.gate = SyncGate(store, POLICY)

    def check(self, call: ToolCall) -> Judged:
        verdict = self.gate.check(call)
        if verdict.reason in ("stale_dependencies", "stale_after_replan") and all(
            head in verdict.frontier.get(key, ()) for key, head in verdict.heads.items()
        ):
            return Allowed()
        return verdict


class FreshnessGate:
    """A wrong gate for the controls: the freshness-only baseline, which never checks the plan."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.fresh = FreshnessOnly(store.aio, POLICY)

    def check(self, call: ToolCall) -> Judged:
        return self.store._run(self.fresh.check(call))


class GateMachine(RuleBasedStateMachine):
    url = "memory://"
    plans = Bundle("plans")
    versions = Bundle("versions")

    def make_gate(self, store: Store) -> Judge:
        return SyncGate(store, POLICY)

    @initialize(target=versions)
    def setup(self):  # type: ignore[no-untyped-def]
        self.store: Store = open_store(self.url)
        self.model = Model()
        self.gate = self.make_gate(self.store)
        self.fresh = FreshnessOnly(self.store.aio, POLICY)
        self.refused_stale: set[str] = set()  # plans refused as stale (replan or block)
        first = []
        for i, key in enumerate(KEYS):
            self.store.own(key, f"owner{i}")
            rec = self.store.put(key, {"v": 0}, author=f"owner{i}")
            self.model.add(rec.id, key, ())
            self.model.heads[key] = rec.id
            first.append(rec.id)
        return multiple(*first)

    def teardown(self) -> None:
        if hasattr(self, "store"):
            self.store.close()

    @rule(target=versions, key=st.sampled_from(KEYS), n=st.integers(0, 10**6))
    def revise(self, key: str, n: int) -> str:
        owner = f"owner{KEYS.index(key)}"
        prev = self.model.heads[key]
        rec = self.store.put(key, {"v": n}, author=owner, parents=[prev])
        self.model.add(rec.id, key, rec.parents)
        self.model.heads[key] = rec.id
        return rec.id

    @rule(target=plans, reads=st.lists(versions, min_size=1, max_size=4), via_quote=st.booleans())
    def derive_plan(self, reads: list[str], via_quote: bool) -> str:
        parents = list(dict.fromkeys(reads))
        if via_quote:
            quote = self.store.add(
                "quotes/q", {"n": len(parents)}, author="quoter", parents=parents
            )
            self.model.add(quote.id, quote.key, quote.parents)
            parents = [quote.id]
        plan = create_plan_sync(self.store, author="planner", parents=parents)
        self.model.add(plan.id, plan.key, plan.parents)
        return plan.id

    @precondition(lambda self: any(len(self.model.versions[k]) > 1 for k in KEYS))
    @rule(target=plans, data=st.data(), via_quote=st.booleans())
    def derive_plan_two_versions(self, data: st.DataObject, via_quote: bool) -> str:
        """A plan that cites the current head of every key and, beside it, an older version of
        one of them: stale for any tool that depends on that key, though its head is cited."""
        revised = [k for k in KEYS if len(self.model.versions[k]) > 1]
        key = data.draw(st.sampled_from(revised), label="key")
        older = data.draw(st.sampled_from(self.model.versions[key][:-1]), label="older")
        parents = [self.model.heads[k] for k in KEYS] + [older]
        if via_quote:
            quote = self.store.add("quotes/q", {"two": key}, author="quoter", parents=parents)
            self.model.add(quote.id, quote.key, quote.parents)
            parents = [quote.id]
        plan = create_plan_sync(self.store, author="planner", parents=parents)
        self.model.add(plan.id, plan.key, plan.parents)
        if data.draw(st.booleans(), label="act at once"):  # as agents do: plan, then act
            uses_key = sorted(t for t, deps in TOOLS.items() if key in deps)
            self.act(plan.id, data.draw(st.sampled_from(uses_key), label="tool"))
        return plan.id

    @rule(target=plans, old=plans)
    def replan_current(self, old: str) -> str:
        parents = [self.model.heads[k] for k in KEYS]
        plan = create_plan_sync(self.store, author="planner", parents=parents, supersedes=old)
        self.model.add(plan.id, plan.key, plan.parents)
        return plan.id

    @rule(plan=plans, tool=st.sampled_from(sorted(TOOLS)))
    def act(self, plan: str, tool: str) -> None:
        expected_valid = self.model.valid(plan, tool)
        frontier = self.model.frontier(plan, TOOLS[tool])
        if any(len(frontier[k]) > 1 for k in TOOLS[tool]):
            event("acted on a plan citing two versions of one key")
        verdict = self.gate.check(ToolCall(tool, {}, plan))
        if verdict.allowed:
            assert expected_valid, f"gate allowed {tool} on a stale or incomplete plan {plan}"
        elif expected_valid:
            raise AssertionError(f"gate refused a current plan: {verdict.reason}")
        superseded = self.store.get(plan).supersedes
        if verdict.verdict == "replan":
            assert superseded not in self.refused_stale, "a second replan was granted"
        if verdict.reason in ("stale_dependencies", "stale_after_replan"):
            self.refused_stale.add(plan)
        baseline = self.store._run(self.fresh.check(ToolCall(tool, {}, plan)))
        assert baseline.allowed  # the freshness-only baseline acts whatever the lineage

    @rule(plan=plans, n=st.integers(1, 3))
    def read_only_calls(self, plan: str, n: int) -> None:
        """Ungated calls carrying a plan id are logged too; they must not erase refusals."""
        for _ in range(n):
            assert self.gate.check(ToolCall("read_only", {}, plan)).allowed

    @rule(plan=consumes(plans))
    def forget(self, plan: str) -> None:
        """Plans go out of use; keeps the bundle small."""

    @invariant()
    def heads_match_model(self) -> None:
        if hasattr(self, "store"):
            assert self.store.heads(KEYS) == self.model.heads


GateMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGateOnMemory = GateMachine.TestCase


class SQLiteGateMachine(GateMachine):
    counter = 0

    @initialize(target=GateMachine.versions)
    def setup(self):  # type: ignore[no-untyped-def]
        SQLiteGateMachine.counter += 1
        self.url = f"sqlite:///{TMP / f'gate-{SQLiteGateMachine.counter}.db'}"
        return super().setup()


TMP = Path("/tmp")


@pytest.fixture(autouse=True)
def _tmp_dir(tmp_path: Path) -> None:
    global TMP
    TMP = tmp_path


SQLiteGateMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
TestGateOnSQLite = SQLiteGateMachine.TestCase


class HeadInFrontierMachine(GateMachine):
    def make_gate(self, store: Store) -> Judge:
        return HeadInFrontierGate(store)


class FreshnessMachine(GateMachine):
    def make_gate(self, store: Store) -> Judge:
        return FreshnessGate(store)


@pytest.mark.parametrize("machine", [HeadInFrontierMachine, FreshnessMachine])
def test_the_machine_fails_a_wrong_gate(machine: type[GateMachine]) -> None:
    """Controls: with the same settings as the real run, the machine finds a stale allow for a
    gate that allows when the head is anywhere in the frontier, and for the baseline."""
    control = settings(
        GateMachine.TestCase.settings,
        database=None,
        phases=(Phase.generate,),
        print_blob=False,
    )
    with pytest.raises(AssertionError, match="gate allowed"):
        run_state_machine_as_test(machine, settings=control)


@settings(max_examples=30, deadline=None)
@given(
    revisions=st.lists(st.sampled_from(KEYS), min_size=1, max_size=5),
    tool=st.sampled_from(sorted(TOOLS)),
)
def test_freshness_only_acts_on_stale_plans_planfence_never_does(
    revisions: list[str], tool: str
) -> None:
    """Plan, then revise: freshness allows exactly when planfence refuses."""
    with open_store("memory://") as store:
        ids = {}
        for i, key in enumerate(KEYS):
            store.own(key, f"o{i}")
            ids[key] = store.put(key, {"v": 0}, author=f"o{i}").id
        plan = create_plan_sync(store, author="p", parents=list(ids.values()))
        for key in revisions:
            store.put(key, {"v": 1}, author=f"o{KEYS.index(key)}")
        stale = bool(set(revisions) & set(TOOLS[tool]))
        gate = SyncGate(store, POLICY).check(ToolCall(tool, {}, plan.id))
        fresh = store._run(FreshnessOnly(store.aio, POLICY).check(ToolCall(tool, {}, plan.id)))
        assert fresh.allowed  # the baseline always acts
        assert gate.allowed == (not stale)
