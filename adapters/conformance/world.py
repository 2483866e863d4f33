"""One case's world: a store with one shared record, the tools whose side effects are recorded,
the scripted model every framework runs, and a store that can be made to fail.

The scripted model behaves the same in every framework: on each turn another agent may commit
while it thinks (`meanwhile`); then, until one of its calls has run, it calls its tool with the
destination it read last in what it was shown; once a call ran, it answers with text.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from planfence.fence import FenceToken, current
from planfence.plugins.gate import ALLOW, Policy, ToolCall, Verdict, find_decisions
from planfence.plugins.gate.call import Checker
from planfence.plugins.gate.checkers import gate_checker
from planfence.shared_memory import (
    AsyncStore,
    Record,
    StoreUnavailableError,
    WriteBatch,
    open_async_store,
)

KEY = "trip/42/requirements"
"""The shared record the model plans from (owned by the customer)."""
BOOK = "book_flight"
"""The gated tool: D(book_flight) = {KEY}."""
WEATHER = "check_weather"
"""The ungated tool."""
OWNER = "customer"
AGENT = "booker"
TASK = "Book the flight for trip 42."
NOWHERE = "nowhere"
"""The destination the model uses when it was shown no record."""

POLICY_TOML = f"""
[tools.{BOOK}]
depends_on = ["{KEY}"]

[tools.{WEATHER}]
ungated = true
"""
POLICY = Policy.coerce(POLICY_TOML)

_DESTINATION = re.compile(r'"destination"\s*:\s*"([^"]*)"')


class Outage(AsyncStore):
    """A store that forwards to the real one until `down` is set; then every read and write
    fails as a lost database would (fault injection for case f)."""

    def __init__(self, inner: AsyncStore) -> None:
        super().__init__(limits=inner.limits)
        self.inner = inner
        self.url = inner.url
        self.down = False
        # The backend's own answers and lease support, as this instance's (they are class-level).
        self._answered_ops = inner._answered_ops
        vars(self)["supports_leases"] = inner.supports_leases

    def _fail(self) -> None:
        if self.down:
            raise StoreUnavailableError("injected: the database went away")

    async def _read(self, ops: Sequence[Any]) -> list[Any]:
        self._fail()
        return await self.inner._read(ops)

    async def _write(self, batch: WriteBatch) -> Any:
        self._fail()
        return await self.inner._write(batch)

    async def _wait_for_change(self, since: int, timeout: float) -> None:
        await self.inner._wait_for_change(since, timeout)


@dataclass(frozen=True)
class Effect:
    """One side effect a tool had: what ran, with which arguments, under which fencing token."""

    tool: str
    args: Mapping[str, Any]
    fence: Mapping[str, Any] | None


class Effects:
    """The tools' side effects, appended to a JSON-lines file (tools in other processes, such as
    an MCP upstream server, write to the same file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def record(self, tool: str, args: Mapping[str, Any], fence: Mapping[str, Any] | None) -> None:
        line = json.dumps({"tool": tool, "args": dict(args), "fence": fence})
        with self._lock, self.path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")

    def all(self) -> list[Effect]:
        if not self.path.exists():
            return []
        rows = [json.loads(line) for line in self.path.read_text("utf-8").splitlines() if line]
        return [Effect(r["tool"], r["args"], r["fence"]) for r in rows]

    def of(self, tool: str) -> list[Effect]:
        return [e for e in self.all() if e.tool == tool]


def _token(token: FenceToken | None) -> dict[str, Any] | None:
    return token.to_wire() if token is not None else None


@dataclass
class World:
    """Everything one case runs against. Harnesses build their agent over `store` with
    `policy`, and wrap `book_flight` and `check_weather` as their framework's tools; processes
    they start reach the same store at `url`.

    `shared` is the same database as the other agents reach it, through a connection of their
    own: the customer's revisions and the case's reads of the journal go through it, and a
    harness whose planner is not part of the adapter (a client that stamps its own plans) plans
    through it. A case that breaks or closes `store` (the adapter's handle) leaves it working.
    """

    store: AsyncStore
    url: str
    dir: Path
    effects: Effects
    policy: Policy = POLICY
    key: str = KEY
    shared: AsyncStore | None = None

    def __post_init__(self) -> None:
        if self.shared is None:
            self.shared = self.store

    @property
    def others(self) -> AsyncStore:
        """The store as the other agents reach it (`shared`)."""
        assert self.shared is not None
        return self.shared

    def with_store(self, store: AsyncStore) -> World:
        """This world with the adapter reaching the database through `store`."""
        return replace(self, store=store, shared=self.others)

    @property
    def policy_file(self) -> Path:
        path = self.dir / "policy.toml"
        if not path.exists():
            path.write_text(POLICY_TOML, encoding="utf-8")
        return path

    async def book_flight(self, destination: str) -> str:
        """Book the flight for the trip to `destination`."""
        self.effects.record(BOOK, {"destination": destination}, _token(current()))
        return f"booked a flight to {destination}"

    async def check_weather(self, destination: str) -> str:
        """Look up the weather at `destination`."""
        self.effects.record(WEATHER, {"destination": destination}, _token(current()))
        return f"weather at {destination}: sunny"

    def tools(self) -> dict[str, Callable[[str], Awaitable[str]]]:
        """Tool name -> the async function that runs it (one `destination: str` argument)."""
        return {BOOK: self.book_flight, WEATHER: self.check_weather}

    async def revise(self, destination: str) -> Record:
        """The customer commits a new version of the requirements (the head moves)."""
        return await self.others.put(KEY, {"destination": destination}, author=OWNER)

    async def head(self) -> str | None:
        return await self.others.head(KEY)

    async def gate_log(self) -> list[tuple[str, str, str]]:
        """(tool, verdict, reason) of every decision in the audit log, oldest first."""
        found = await find_decisions(self.others, limit=1000)
        return [(d.tool or "", d.verdict, d.reason) for d in reversed(found)]

    async def aclose(self) -> None:
        await self.others.aclose()


def _store_url(path: Path) -> str:
    path.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path / 'store.db'}"


async def open_world(path: Path) -> World:
    """A fresh SQLite store in `path` with the requirements at Lisbon."""
    url = _store_url(path)
    inner = await open_async_store(url)
    try:
        await inner.own(KEY, OWNER)
        await inner.put(KEY, {"destination": "Lisbon"}, author=OWNER)
    except BaseException:
        await inner.aclose()
        raise
    return World(inner, url, path, Effects(path / "effects.jsonl"))


@dataclass(frozen=True)
class Call:
    """A tool call the scripted model makes."""

    tool: str
    args: dict[str, Any]


Meanwhile = Mapping[int, Callable[[], Awaitable[Any]]]
MALFORMED = "to"
"""The argument a malformed call sends instead of `destination` (the tools reject it)."""


@dataclass
class Script:
    """The scripted model's decisions, shared by every harness's model.

    Args:
        tool: the tool it calls.
        meanwhile: turn number -> what another agent does while the model thinks on that turn
            (turns of the first run).
        max_calls: calls it makes at most, per run, before it gives up and answers.
        malformed: how many of its first calls send a malformed argument (`{"to": ...}`), which
            the framework rejects before the tool runs (its own retry).
        later: the `meanwhile` of each further run (case j), in order.
    """

    tool: str = BOOK
    meanwhile: Meanwhile = field(default_factory=dict)
    max_calls: int = 3
    malformed: int = 0
    later: Sequence[Meanwhile] = ()
    turns: int = 0
    calls: int = 0
    runs: int = 1
    shown: list[list[str]] = field(default_factory=list)
    results: list[str | None] = field(default_factory=list)

    def new_run(self) -> None:
        """A harness calls this before each run after the first, on the same agent: the model
        starts over on the task (its turns counted afresh, with the next run's `meanwhile`)."""
        self.meanwhile = self.later[self.runs - 1] if len(self.later) >= self.runs else {}
        self.runs += 1
        self.turns = self.calls = 0

    async def next(self, shown: Sequence[str], last_result: str | None = None) -> Call | None:
        """One model turn. `shown` is what the framework put before the model (instructions,
        records, messages; not the model's own calls), `last_result` the latest tool result it
        sees. Returns the call to make, or None for a final text answer."""
        turn, self.turns = self.turns, self.turns + 1
        self.shown.append([*shown, *([last_result] if last_result is not None else [])])
        self.results.append(last_result)
        if last_result is not None and (_ran(last_result) or _blocked(last_result)):
            return None
        if self.calls >= self.max_calls:
            return None
        hook = self.meanwhile.get(turn)
        if hook is not None:
            await hook()
        self.calls += 1
        destination = self.destination(shown, last_result)
        if self.malformed > 0:
            self.malformed -= 1
            return Call(self.tool, {MALFORMED: destination})
        return Call(self.tool, {"destination": destination})

    @staticmethod
    def destination(shown: Sequence[str], last_result: str | None) -> str:
        """The destination in the latest text that names one (a refusal names the new value)."""
        for text in [*([last_result] if last_result else []), *reversed(shown)]:
            found = destinations(text)
            if found:
                return found[-1]
        return NOWHERE

    FINAL = "Done."


def destinations(text: str) -> list[str]:
    """The destinations a text names (as JSON: `"destination": "..."`, also inside a JSON
    string), in order."""
    return [str(d) for d in _DESTINATION.findall(text.replace('\\"', '"'))]


BLOCKED = "This action will not run."
"""How a block ends in words (`explain`); a structured refusal says `"verdict": "block"`."""
_BLOCK_VERDICT = re.compile(r'"verdict"\s*:\s*"block"')


def _blocked(result: str) -> bool:
    """The model accepts a block and stops calling."""
    return BLOCKED in result or _BLOCK_VERDICT.search(result) is not None


def _ran(result: str) -> bool:
    return result.startswith(("booked a flight", "weather at"))


class FreshnessOnly:
    """The control checker of case (d): it allows every declared call that carries a plan,
    against the heads as they are now, without looking at which records produced the plan."""

    def __init__(self, store: AsyncStore, policy: Policy) -> None:
        self.store = store
        self.policy = policy

    name = "freshness"

    async def check(self, call: ToolCall) -> Verdict:
        declared = self.policy.get(call.tool)
        scope = () if declared is None or declared.ungated else declared.scope(call.args)
        heads = await self.store.heads(list(scope))
        return call.verdict(ALLOW, "fresh_state", scope=scope, heads=heads)


def freshness_only(store: AsyncStore, policy: Policy, agent: str | None = None) -> Checker:
    """The control's checker factory (`checker=freshness_only`)."""
    return FreshnessOnly(store, policy)


def unavailable(store: AsyncStore, policy: Policy, agent: str | None = None) -> Checker:
    """Case (f)'s checker factory: the gate, over a store that fails every read and write."""
    down = Outage(store)
    down.down = True
    return gate_checker(down, policy, agent)
