"""`planfence bench replay`: coordination stall per action as the update rate grows, and safety.

A controlled replay of one event stream against four executors, on loopback and on an emulated
AT&T cellular link (the relay of `planfence bench link`, paced by a mahimahi trace).

The team:
- a shared key space (default 16 keys) split among several owners (default 4; key i belongs to
  owner i mod 4), each owner answering for its keys over HTTP (the app `planfence serve-owner`
  runs, one process per owner, with the same connection keep-alive as the replica endpoints);
- N executor replicas (default 3), each with a push endpoint (a small Starlette app in its own
  process) that verifies and acknowledges eager updates;
- one planner that derives each plan from the current heads of the keys the action needs.

The stream (pure, seeded: `schedule`): A actions (default 10); action i is taken by a replica
drawn at random and calls a tool that depends on 1 or 2 distinct keys (D(a), declared by policy).
round(r * A) owner updates, each to a key drawn uniformly, are placed at uniform random times over
the A action windows, at r updates per action in {0.25, 0.5, 1, 2, 4, 8, 16}. Window i runs:

    plan P_i from the heads of D(a_i)  ->  `post` updates land  ->  check P_i
        -> (replan: new plan, then the `late` updates land, then check again)  ->  act or block
        -> (no replan: the `late` updates land after the action)

An update lands in `post` when it falls in the first 80% of its window (between planning and the
check: a post-plan revision), in `late` otherwise (the time the replan or the tool call takes).
The action stream is the same at every rate; only the updates differ. Whether an action's plan is
stale, and whether its replan is overtaken too, follows from the stream alone (`expect`), which
the replay checks its results against.

The executors (three replicas each, in their own key space, the four runs interleaved window by
window so each meets the same link conditions; on the AT&T path every rate gets a fresh emulated
link that replays the trace from its start, so every rate meets the same stretch of it):
- planfence: `Gate` with `HttpOwnerHeads`; asks only the owners of D(a). Nothing on update path.
- eager: `EagerSync` + `EagerExecutor`; every update is signed and POSTed with its record to every
  replica's endpoint in parallel, and counts once all have acknowledged. That wait is the update
  path's stall; the action path is a local check.
- allkeys: `Gate` with `AllKeysHeads` over the same owner services (every shared key, every time).
- freshness: owner-head freshness, as in the paper's staged replay: asks the owners of D(a) for
  their heads and brings its replica up to date (`FreshnessOnly`), never checks the plan.

Measured per executor and rate:
- coordination stall per action = the action path (wall time of every check of the action,
  including the re-check after a replan; planning itself is not counted) + the update path
  attributable to that action (eager: the push waits of the updates in its window). p50 and
  mean over actions; the mean is the per-action cost the rate claim is about.
- HTTP messages and bytes per action (owner head requests; eager pushes with their acks).
- replans; blocks, by reason (`stale_after_replan` when the replan was overtaken too; any other
  reason is an executor failing closed, e.g. an owner that did not answer in time); invalid
  actions: an executed action is invalid when, by the store's change feed at the moment the tool
  ran, some key of D(a) had a head other than the version its plan used (walked from the plan's
  parents apart from the gate's own code, by `demos.workflows.used_versions`).
- the crossover: the lowest rate from which planfence's mean stall stays below eager's, on the
  grid, and interpolated linearly between the two grid rates around it.

The paper's claim this reproduces: at low update rates eager sync stalls less; as churn grows
PlanFence avoids repeated coordination on the update path, and stalls less than the safe
proactive alternative once the update rate is >= 4 per action; every method that enforces exact
lineage issues zero invalid actions while freshness-only acts on stale plans.

Choices to know when reading the numbers:
- eager pushes carry the new record (default 1 KiB value: a replica must hold the version to
  plan from it); owner answers carry record ids only. `--value-bytes` changes the record size.
- eager fans each update out to all replicas at once (the strongest form of the baseline), over
  kept-alive connections; so do the head requests.
- the gate is audited as shipped (each decision is written to the store before the call runs);
  the eager executor keeps no audit log.
- on the emulated link, both the executors' head requests and the writers' pushes travel on the
  trace's uplink, answers and acks on its downlink (one shared bottleneck per direction).
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import math
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from planfence.adapters.cli.common import UsageError, add_output, non_negative_int, positive_int
from planfence.adapters.owner_service import (
    KEYRING_ENV,
    Keyring,
    KeyringError,
    load_keyring,
)
from planfence.adapters.owner_service.wire import signature
from planfence.demos.baselines import (
    AllKeysHeads,
    EagerExecutor,
    EagerReplica,
    EagerSync,
    FreshnessOnly,
    store_key_space,
)
from planfence.demos.workflows import heads_as_of, used_versions
from planfence.plugins.gate import (
    BLOCK,
    Gate,
    GuardedExecutor,
    HeadSource,
    Policy,
    Replanned,
    ScopeError,
    Verdict,
    create_plan,
)
from planfence.shared_memory import (
    AsyncStore,
    Change,
    PlanFenceError,
    Record,
    Replica,
    canonical_json,
    open_async_store,
)

from .._support import Progress
from . import services
from .common import (
    add_bench_store,
    add_quick,
    bench_store,
    check_store,
    new_results,
    percentile,
    pick,
    print_context,
    run_bench,
)
from .link import Link, LinkRelay, Trace, add_link_arguments, describe_trace, load_traces
from .wire import CountedOwnerHeads

HELP = "controlled replay: coordination stall per action vs update rate, and invalid actions"

RATES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
EXECUTORS = ("planfence", "eager", "allkeys", "freshness")
SAFE = ("planfence", "eager", "allkeys")
PATHS = ("loopback", "att")
DEFAULT_KEYS = 16
DEFAULT_OWNERS = 4
DEFAULT_REPLICAS = 3
DEFAULT_ACTIONS = 10
QUICK_ACTIONS = 4
DEFAULT_VALUE_BYTES = 1024
LATE_SHARE = 0.2
CLAIM_RATE = 4.0
HTTP_TIMEOUT_S = 30.0
KEEPALIVE_S = 120.0
PLANNER = "planner"
REPLICA_ENV = "PLANFENCE_REPLAY_REPLICA"
PUSH_PURPOSE = b"planfence-replay-push/1\n"
TOOL_1, TOOL_2 = "act1", "act2"


# ---- the stream (pure, seeded)


@dataclass(frozen=True)
class Window:
    """Action `index`, taken by replica `replica`, on a tool depending on keys `keys` (indexes).

    Its plan is derived at the start of the window; the updates to `post` land between planning
    and the check, those to `late` after the check (during a replan, else after the action).
    """

    index: int
    replica: int
    keys: tuple[int, ...]
    post: tuple[int, ...]
    late: tuple[int, ...]

    @property
    def updates(self) -> int:
        return len(self.post) + len(self.late)

    @property
    def stale(self) -> bool:
        """A post-plan revision touched D(a): the plan is stale at its check."""
        return bool(set(self.post) & set(self.keys))

    @property
    def overtaken(self) -> bool:
        """Stale, and a late update touched D(a) again while the replan was written."""
        return self.stale and bool(set(self.late) & set(self.keys))


def schedule(
    rate: float,
    actions: int,
    *,
    keys: int = DEFAULT_KEYS,
    replicas: int = DEFAULT_REPLICAS,
    seed: int = 1,
    late_share: float = LATE_SHARE,
) -> list[Window]:
    """The replayed stream at `rate` updates per action: the same actions at every rate."""
    if rate < 0 or actions < 1 or keys < 2 or replicas < 1 or not 0.0 <= late_share < 1.0:
        raise ValueError(
            "need rate >= 0, actions >= 1, keys >= 2, replicas >= 1 and late_share in [0, 1)"
        )
    draw = random.Random(f"replay-actions:{seed}:{keys}:{replicas}")
    acts = []
    for _ in range(actions):
        replica = draw.randrange(replicas)
        deps = draw.choice((1, 2))
        acts.append((replica, tuple(sorted(draw.sample(range(keys), deps)))))
    draw = random.Random(f"replay-updates:{seed}:{keys}:{float(rate)!r}")
    total = math.floor(rate * actions + 0.5)
    placed = sorted((draw.random() * actions, draw.randrange(keys)) for _ in range(total))
    post: list[list[int]] = [[] for _ in range(actions)]
    late: list[list[int]] = [[] for _ in range(actions)]
    for at, key in placed:
        i = min(int(at), actions - 1)
        (late if at - i >= 1.0 - late_share else post)[i].append(key)
    return [
        Window(i, replica, deps, tuple(post[i]), tuple(late[i]))
        for i, (replica, deps) in enumerate(acts)
    ]


@dataclass(frozen=True)
class Expected:
    """What the stream implies for every executor, independent of timing."""

    actions: int
    updates: int
    stale: int  # plans stale at their check: safe executors replan, freshness acts invalidly
    overtaken: int  # of those, replans overtaken by a late update: safe executors block


def expect(windows: Sequence[Window]) -> Expected:
    return Expected(
        actions=len(windows),
        updates=sum(w.updates for w in windows),
        stale=sum(w.stale for w in windows),
        overtaken=sum(w.overtaken for w in windows),
    )


def crossover(
    points: Iterable[tuple[float, float, float]],
) -> tuple[float | None, float | None]:
    """From (rate, planfence, rival) points: the lowest grid rate from which planfence stays
    below the rival at every higher rate, and where the two cross between that grid rate and the
    one below it, interpolated linearly in the rate (an update path's cost grows linearly with
    it). The second value is None when planfence is already below at the lowest rate, or never."""
    pts = sorted(points)
    start = len(pts)
    while start > 0 and pts[start - 1][1] < pts[start - 1][2]:
        start -= 1
    if start == len(pts):
        return None, None
    if start == 0:
        return pts[0][0], None
    (r0, p0, q0), (r1, p1, q1) = pts[start - 1], pts[start]
    d0, d1 = p0 - q0, p1 - q1  # d0 >= 0 > d1
    return r1, round(r0 + (r1 - r0) * d0 / (d0 - d1), 3)


async def _together(steps: Sequence[Coroutine[Any, Any, None]]) -> None:
    """Run `steps` side by side; if one fails (or the run is cancelled), stop the others and
    wait for them before the error goes on."""
    tasks = [asyncio.ensure_future(step) for step in steps]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


# ---- eager pushes over HTTP: the replica endpoint and the writer's side


def create_replica_app(name: str, keyring: Keyring) -> Starlette:
    """One executor replica's push endpoint: verify a writer's signed update and acknowledge it.

    POST /push  {writer, replica, change, record, sig} -> 200 {replica, seq} | 4xx {error}
    GET /health -> {replica, received}
    """
    state: dict[str, Any] = {"received": 0, "heads": {}}

    async def push(request: Request) -> Response:
        try:
            data = json.loads(await request.body())
            sig = data.pop("sig")
            writer, change, record = data["writer"], data["change"], data["record"]
            rec = Record.from_dict(record)
        except (ValueError, KeyError, TypeError, AttributeError, PlanFenceError):
            return JSONResponse({"error": "malformed"}, status_code=400)
        secret = keyring.get(writer) if isinstance(writer, str) else None
        if secret is None or not isinstance(sig, str):
            return JSONResponse({"error": "unknown_writer"}, status_code=401)
        if not hmac.compare_digest(signature(secret, PUSH_PURPOSE, data), sig):
            return JSONResponse({"error": "bad_signature"}, status_code=401)
        if data.get("replica") != name:
            return JSONResponse({"error": "wrong_replica"}, status_code=403)
        if rec.id != change.get("head") or rec.key != change.get("key"):
            return JSONResponse({"error": "record_mismatch"}, status_code=400)
        state["heads"][rec.key] = rec.id
        state["received"] += 1
        return JSONResponse({"replica": name, "seq": change.get("seq")})

    async def health(request: Request) -> Response:
        return JSONResponse({"replica": name, "received": state["received"]})

    return Starlette(
        routes=[
            Route("/push", push, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
        ]
    )


def replica_app() -> Starlette:
    """App factory (see `services`): the replica named by $PLANFENCE_REPLAY_REPLICA, with the
    keyring of $PLANFENCE_KEYRING."""
    keyring = load_keyring()
    if not isinstance(keyring, Keyring):  # the eager-push baseline signs with shared secrets
        raise KeyringError(f"{keyring.source}: the push replica needs a shared-secret keyring")
    return create_replica_app(os.environ[REPLICA_ENV], keyring)


class PushRefused(RuntimeError):
    """A replica did not acknowledge an update."""


def _wire_bytes(response: httpx.Response, body_len: int) -> int:
    """HTTP/1.1 bytes of one exchange: request and status lines, headers, bodies."""
    req = response.request
    sent = len(req.method) + 1 + len(req.url.raw_path) + len(b" HTTP/1.1\r\n") + 2 + body_len
    sent += sum(len(k) + len(v) + 4 for k, v in req.headers.raw)
    got = len(b"HTTP/1.1 200 \r\n") + len(response.reason_phrase) + 2 + len(response.content)
    got += sum(len(k) + len(v) + 4 for k, v in response.headers.raw)
    return sent + got


class Pusher:
    """The writer's side of eager sync: signs each new version and POSTs it to one replica.

    `push` is the `EagerSync` hook; it returns when that replica acknowledged the update.
    """

    def __init__(
        self,
        urls: Mapping[str, str],
        keyring: Keyring,
        *,
        timeout: float = HTTP_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.urls = {name: url.rstrip("/") for name, url in urls.items()}
        self.keyring = keyring
        self.requests = 0
        self.bytes = 0
        self._names: dict[int, str] = {}
        self._replicas: list[EagerReplica] = []
        self._client = httpx.AsyncClient(
            timeout=timeout,
            transport=transport,
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_S),
        )

    def bind(self, replica: EagerReplica, name: str) -> None:
        self._replicas.append(replica)
        self._names[id(replica)] = name

    async def push(self, replica: EagerReplica, change: Change, record: Record) -> None:
        name = self._names[id(replica)]
        fields: dict[str, Any] = {
            "writer": record.author,
            "replica": name,
            "change": change.to_dict(),
            "record": record.to_dict(),
        }
        sig = signature(self.keyring[record.author], PUSH_PURPOSE, fields)
        body = canonical_json({**fields, "sig": sig}).encode()
        response = await self._client.post(
            f"{self.urls[name]}/push",
            content=body,
            headers={"content-type": "application/json", "accept-encoding": "identity"},
        )
        self.requests += 1
        self.bytes += _wire_bytes(response, len(body))
        if response.status_code != 200 or response.json().get("seq") != change.seq:
            raise PushRefused(f"{name} refused update {change.seq}: {response.text[:200]}")

    async def warm(self) -> None:
        """Open the kept-alive connection to every replica before anything is timed."""

        async def health(url: str) -> None:
            (await self._client.get(f"{url}/health")).raise_for_status()

        await _together([health(url) for url in self.urls.values()])

    async def aclose(self) -> None:
        await self._client.aclose()


# ---- the executors


class OwnerHeadFreshness(FreshnessOnly):
    """Freshness-only, owner-head form: asks the owners of D(a) for their heads and brings the
    local replica up to date before acting; never checks which records produced the plan."""

    name = "freshness"

    def __init__(
        self,
        store: AsyncStore,
        policy: Policy,
        heads: HeadSource,
        owner_of: Mapping[str, str],
        prefix: str,
    ) -> None:
        super().__init__(store, policy)
        self.replica = Replica(store, prefix=prefix)
        self.heads = heads
        self.owner_of = owner_of

    async def check(
        self,
        tool: str,
        args: Mapping[str, Any],
        plan_id: Any,
        *,
        agent: str | None = None,
        replan_spent: bool = False,
    ) -> Verdict:
        declared = self.policy.get(tool)
        try:
            scope = declared.scope(args) if declared is not None else ()
        except ScopeError:
            scope = ()
        owners: dict[str, list[str]] = {}
        for key in scope:
            if key in self.owner_of:
                owners.setdefault(self.owner_of[key], []).append(key)
        if owners:
            await self.heads.heads({o: tuple(ks) for o, ks in owners.items()})
        return await super().check(tool, args, plan_id, agent=agent, replan_spent=replan_spent)


class Timed(GuardedExecutor):
    """Wraps an executor; adds up the wall time of its checks (the action path's stall)."""

    def __init__(self, inner: GuardedExecutor) -> None:
        self.inner = inner
        self.name = inner.name
        self.spent = 0.0

    async def check(
        self,
        tool: str,
        args: Mapping[str, Any],
        plan_id: Any,
        *,
        agent: str | None = None,
        replan_spent: bool = False,
    ) -> Verdict:
        t0 = time.perf_counter()
        try:
            return await self.inner.check(
                tool, args, plan_id, agent=agent, replan_spent=replan_spent
            )
        finally:
            self.spent += time.perf_counter() - t0


def replay_policy() -> Policy:
    return (
        Policy()
        .declare(TOOL_1, ["rp/{space}/{x}"])
        .declare(TOOL_2, ["rp/{space}/{x}", "rp/{space}/{y}"])
    )


@dataclass(frozen=True)
class Team:
    owners: tuple[str, ...]
    replicas: tuple[str, ...]
    secrets: Mapping[str, str]

    @property
    def keyring(self) -> Keyring:
        return Keyring(self.secrets, source="<replay>")


@dataclass(frozen=True)
class Config:
    rates: tuple[float, ...]
    actions: int
    keys: int
    owners: int
    replicas: int
    value_bytes: int
    seed: int
    paths: tuple[str, ...]
    up: Trace | None
    down: Trace | None
    trace_kind: str | None
    delay_ms: float

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rates": list(self.rates),
            "actions": self.actions,
            "keys": self.keys,
            "owners": self.owners,
            "replicas": self.replicas,
            "value_bytes": self.value_bytes,
            "seed": self.seed,
            "paths": list(self.paths),
            "late_share": LATE_SHARE,
            "executors": list(EXECUTORS),
        }
        if self.up is not None and self.down is not None:
            out.update(
                trace_kind=self.trace_kind,
                trace_up=self.up.source,
                trace_down=self.down.source,
                trace_up_mean_mbps=round(self.up.mean_mbps, 3),
                trace_down_mean_mbps=round(self.down.mean_mbps, 3),
                delay_ms=self.delay_ms,
            )
        return out


@dataclass
class Tally:
    action_s: list[float] = field(default_factory=list)  # per window
    update_s: list[float] = field(default_factory=list)  # per window
    push_s: list[float] = field(default_factory=list)  # per update (eager)
    replans: int = 0
    blocks: int = 0
    executed: int = 0
    updates: int = 0
    block_reasons: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Acted:
    tool: str
    args: Mapping[str, Any]
    plan_id: str
    seq: int


class Run:
    """One executor's replicas replaying one stream in their own key space."""

    def __init__(
        self,
        store: AsyncStore,
        policy: Policy,
        team: Team,
        config: Config,
        executor: str,
        path: str,
        rate: float,
        windows: list[Window],
        owner_urls: Mapping[str, str],
        replica_urls: Mapping[str, str],
    ) -> None:
        self.store = store
        self.policy = policy
        self.team = team
        self.executor = executor
        self.path = path
        self.rate = rate
        self.windows = windows
        self.owner_urls = owner_urls
        self.replica_urls = replica_urls
        self.space_id = f"{path}-r{rate:g}-{executor}"  # one key segment
        self.space = f"rp/{self.space_id}"
        self.keys = [f"{self.space}/k{i:02d}" for i in range(config.keys)]
        self.owner_of = {k: team.owners[i % len(team.owners)] for i, k in enumerate(self.keys)}
        self.pad = "." * config.value_bytes
        self.versions = [0] * config.keys
        self.tally = Tally()
        self.acted: list[Acted] = []
        self.executors: list[Timed] = []
        self.heads: list[CountedOwnerHeads] = []
        self.sync: EagerSync | None = None
        self.pusher: Pusher | None = None
        self.start_seq = 0
        self._sent = (0, 0)

    # -- set-up and tear-down

    async def setup(self) -> None:
        self.start_seq = await self.store.last_seq()
        for i, key in enumerate(self.keys):
            await self.store.own(key, self.owner_of[key])
            await self.store.put(key, self._value(i), author=self.owner_of[key])
        keyring = self.team.keyring
        if self.executor == "eager":
            self.pusher = Pusher(self.replica_urls, keyring)
            self.sync = EagerSync(self.store, push=self.pusher.push)
        for name in self.team.replicas:
            self.executors.append(Timed(self._executor(name, keyring)))
        await self._warm()
        self._sent = self._traffic()

    def _executor(self, name: str, keyring: Keyring) -> GuardedExecutor:
        if self.executor == "eager":
            assert self.sync is not None and self.pusher is not None
            eager = EagerExecutor(self.store, self.policy, self.sync)
            self.pusher.bind(eager.replica, name)
            return eager
        http = CountedOwnerHeads(
            self.owner_urls,
            keyring,
            agent=name,
            timeout=HTTP_TIMEOUT_S,
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_S),
        )
        self.heads.append(http)
        if self.executor == "planfence":
            return Gate(self.store, self.policy, heads=http, agent=name)
        if self.executor == "allkeys":
            space = store_key_space(self.store, self.space + "/")
            return Gate(self.store, self.policy, heads=AllKeysHeads(http, space), agent=name)
        if self.executor == "freshness":
            return OwnerHeadFreshness(
                self.store, self.policy, http, self.owner_of, self.space + "/"
            )
        raise ValueError(f"unknown executor {self.executor!r}")

    async def _warm(self) -> None:
        """Open every connection and fill every cache that a first timed action would pay for."""
        one_key = {
            owner: (next(k for k, o in self.owner_of.items() if o == owner),)
            for owner in self.team.owners
        }

        async def ask(http: CountedOwnerHeads) -> None:
            answers = await http.heads(one_key)
            bad = [a for a in answers.values() if a.error]
            if bad:
                raise RuntimeError(f"owner service refused the replay: {bad[0]}")

        # untimed, so the connections open side by side (over the link, one after another
        # would cost a round trip each)
        await _together([ask(http) for http in self.heads])
        if self.pusher is not None:
            await self.pusher.warm()
        for ex in self.executors:
            if isinstance(ex.inner, OwnerHeadFreshness):
                await ex.inner.replica.sync()

    def _traffic(self) -> tuple[int, int]:
        if self.pusher is not None:
            return self.pusher.requests, self.pusher.bytes
        return (
            sum(h.stats.requests for h in self.heads),
            sum(h.stats.total_bytes for h in self.heads),
        )

    async def aclose(self) -> None:
        if self.pusher is not None:
            await self.pusher.aclose()
        for heads in self.heads:
            await heads.aclose()

    # -- the stream

    def _value(self, i: int) -> dict[str, Any]:
        return {"n": self.versions[i], "pad": self.pad}

    async def _update(self, indexes: tuple[int, ...]) -> float:
        """The owners commit new versions; the update path's stall (eager: push waits)."""
        stall = 0.0
        for i in indexes:
            key, owner = self.keys[i], self.owner_of[self.keys[i]]
            self.versions[i] += 1
            current = await self.store.head(key)
            parents = [current] if current else []
            if self.sync is not None:
                before = self.sync.stall_s
                await self.sync.put(key, self._value(i), author=owner, parents=parents)
                self.tally.push_s.append(self.sync.stall_s - before)
                stall += self.sync.stall_s - before
            else:
                await self.store.put(key, self._value(i), author=owner, parents=parents)
            self.tally.updates += 1
        return stall

    async def _plan(
        self, indexes: tuple[int, ...], supersedes: str | None = None
    ) -> tuple[str, str, dict[str, Any]]:
        """The planner reads the current versions of D(a) and derives a plan citing them."""
        keys = [self.keys[i] for i in indexes]
        states = await self.store.states(keys)
        heads = [states[k].head for k in keys]
        records = await self.store.get_many(h for h in heads if h)
        tool = TOOL_1 if len(indexes) == 1 else TOOL_2
        args: dict[str, Any] = {"space": self.space_id, "x": f"k{indexes[0]:02d}"}
        if len(indexes) == 2:
            args["y"] = f"k{indexes[1]:02d}"
        args["basis"] = [records[h].value["n"] for h in heads if h]
        plan = await create_plan(
            self.store,
            author=PLANNER,
            parents=[h for h in heads if h],
            value={"tool": tool, "args": args},
            supersedes=supersedes,
        )
        return plan.id, tool, args

    async def window(self, w: Window) -> None:
        ex = self.executors[w.replica]
        plan_id, tool, args = await self._plan(w.keys)
        update_s = await self._update(w.post)
        late_done = False

        async def replan(verdict: Verdict) -> Replanned:
            nonlocal late_done, update_s
            new_id, _, new_args = await self._plan(w.keys, supersedes=verdict.plan)
            update_s += await self._update(w.late)  # revisions land while the replan is made
            late_done = True
            return Replanned(new_id, new_args)

        ran_at: list[int] = []

        async def call(a: Mapping[str, Any]) -> dict[str, Any]:
            ran_at.append(await self.store.last_seq())  # the tool's effect happens here
            return {"ok": True}

        spent = ex.spent
        outcome = await ex.run(
            tool, args, plan_id, call, replan, agent=self.team.replicas[w.replica]
        )
        action_s = ex.spent - spent
        if not late_done:
            update_s += await self._update(w.late)
        self.tally.action_s.append(action_s)
        self.tally.update_s.append(update_s)
        self.tally.replans += outcome.replans
        if outcome.executed:
            assert outcome.plan_id is not None
            self.tally.executed += 1
            self.acted.append(Acted(tool, dict(outcome.args), outcome.plan_id, ran_at[0]))
        elif outcome.final.verdict == BLOCK:
            self.tally.blocks += 1
            reason = outcome.final.reason
            self.tally.block_reasons[reason] = self.tally.block_reasons.get(reason, 0) + 1
        else:  # pragma: no cover - the executors above allow, replan or block
            raise RuntimeError(f"unexpected verdict {outcome.final.verdict}")

    # -- judging and reporting

    async def invalid_actions(self) -> int:
        """Executed actions whose plan was not on the heads when the tool ran, by the store's
        change feed (not by any executor's own verdict)."""
        changes: list[Change] = []
        since = self.start_seq
        while batch := await self.store.changes(since, 1000):
            changes.extend(c for c in batch if c.key.startswith(self.space + "/"))
            since = batch[-1].seq
        invalid = 0
        for act in self.acted:
            declared = self.policy.get(act.tool)
            assert declared is not None
            scope = declared.scope(act.args)
            used = await used_versions(self.store, act.plan_id, scope)
            heads = heads_as_of(changes, act.seq)
            if not all(used[k] == {heads.get(k)} for k in scope):
                invalid += 1
        return invalid

    async def row(self) -> dict[str, Any]:
        t = self.tally
        n = len(t.action_s)
        stall_ms = [(a + u) * 1000 for a, u in zip(t.action_s, t.update_s, strict=True)]
        requests, sent = self._traffic()
        exp = expect(self.windows)
        return {
            "path": self.path,
            "rate": self.rate,
            "executor": self.executor,
            "actions": n,
            "updates": t.updates,
            "stall_p50_ms": round(percentile(stall_ms, 50), 3),
            "stall_mean_ms": round(statistics.fmean(stall_ms), 3),
            "action_path_mean_ms": round(statistics.fmean(t.action_s) * 1000, 3),
            "update_path_mean_ms": round(statistics.fmean(t.update_s) * 1000, 3),
            "push_p50_ms": round(percentile(t.push_s, 50) * 1000, 3) if t.push_s else None,
            "messages_per_action": round((requests - self._sent[0]) / n, 3),
            "bytes_per_action": round((sent - self._sent[1]) / n, 1),
            "replans": t.replans,
            "blocks": t.blocks,
            "block_reasons": dict(sorted(t.block_reasons.items())),
            "executed": t.executed,
            "invalid": await self.invalid_actions(),
            "expected_stale": exp.stale,
            "expected_overtaken": exp.overtaken,
            "trace_ms": None,  # on the emulated link: how much of the trace this rate replayed
        }


def _rotate(items: Sequence[Any], by: int) -> list[Any]:
    by %= len(items)
    return [*items[by:], *items[:by]]


async def _replay_rate(
    store: AsyncStore,
    policy: Policy,
    team: Team,
    config: Config,
    path: str,
    rate: float,
    owner_urls: Mapping[str, str],
    replica_urls: Mapping[str, str],
    progress: Progress,
) -> list[dict[str, Any]]:
    """The four executors replay the stream at `rate`, every one playing window i before any
    plays window i + 1 (in rotating order), so they meet the same conditions."""
    windows = schedule(
        rate, config.actions, keys=config.keys, replicas=config.replicas, seed=config.seed
    )
    runs = [
        Run(store, policy, team, config, ex, path, rate, windows, owner_urls, replica_urls)
        for ex in EXECUTORS
    ]
    try:
        await _together([run.setup() for run in runs])  # untimed: side by side
        for w in windows:
            for run in _rotate(runs, w.index):
                await run.window(w)
            progress.advance(f"{path} r={rate:g} action {w.index + 1}", line=False)
        return [await run.row() for run in runs]
    finally:
        for run in runs:
            await run.aclose()


# ---- processes: owner services and replica endpoints


def _services(team: Team, store_url: str) -> dict[str, services.Service]:
    """An owner service per owner and a push endpoint per replica, all with the same
    connection keep-alive."""
    out: dict[str, services.Service] = {}
    for owner in team.owners:
        out[owner] = services.owner_service(
            owner, store_url, team.secrets, keep_alive_s=KEEPALIVE_S
        )
    keyring = json.dumps(dict(team.secrets))
    for name in team.replicas:
        env = {KEYRING_ENV: keyring, REPLICA_ENV: name}
        out[name] = services.Service(f"{__name__}:replica_app", env, keep_alive_s=KEEPALIVE_S)
    return out


async def _drained(relays: Sequence[LinkRelay], timeout_s: float = 30.0) -> None:
    """Let the connections the clients closed finish their teardown across the emulated link
    (the far side's close travels the link too) before the relays stop: a relay stopped during a
    teardown can leave that connection's sockets unclosed."""
    open_connections = [task for relay in relays for task in relay._tasks]
    if open_connections:
        await asyncio.wait(open_connections, timeout=timeout_s)


def _port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def _replay_rate_over_link(
    store: AsyncStore,
    policy: Policy,
    team: Team,
    config: Config,
    rate: float,
    direct: Mapping[str, str],
    links: list[Link],
    relays: list[LinkRelay],
    progress: Progress,
) -> list[dict[str, Any]]:
    """One rate over a fresh emulated link: every rate replays the trace from its start, and
    every owner service and replica endpoint sits behind its own relay on that one link."""
    assert config.up is not None and config.down is not None
    link = Link(config.up, config.down, delay_ms=config.delay_ms)
    links.append(link)
    async with AsyncExitStack() as stack:
        via: dict[str, str] = {}
        mine: list[LinkRelay] = []
        for name, url in direct.items():
            relay = LinkRelay(link, "127.0.0.1", _port_of(url))
            via[name] = (await stack.enter_async_context(relay)).url
            mine.append(relay)
        relays += mine
        owners = {o: via[o] for o in team.owners}
        replicas = {r: via[r] for r in team.replicas}
        rows = await _replay_rate(
            store, policy, team, config, "att", rate, owners, replicas, progress
        )
        await _drained(mine)
    for row in rows:
        row["trace_ms"] = round(link.now_ms())
    return rows


async def _bench(config: Config, store_url: str | None, results: dict[str, Any]) -> None:
    """Fill `results` in, one rate at a time; every store, folder, relay and process is released
    on the way out, also when the run is cancelled by Ctrl-C."""
    owners = tuple(f"owner-{i}" for i in range(config.owners))
    replicas = tuple(f"executor-{i}" for i in range(config.replicas))
    team = Team(owners, replicas, {a: secrets.token_hex(24) for a in (*owners, *replicas)})
    policy = replay_policy()
    rows: list[dict[str, Any]] = results["rows"]
    links: list[Link] = []
    relays: list[LinkRelay] = []
    async with AsyncExitStack() as stack:
        target = bench_store(store_url, shared=True)
        stack.callback(target.cleanup)
        results["stores"].append(target.describe())
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="planfence-replay-")))
        store = await open_async_store(target.url)
        stack.push_async_callback(store.aclose)
        direct = stack.enter_context(services.running(_services(team, target.url), logs))
        owner_urls = {o: direct[o] for o in owners}
        replica_urls = {r: direct[r] for r in replicas}
        stack.callback(_link_statistics, results["settings"], links, relays)
        windows = len(config.paths) * len(config.rates) * config.actions
        progress = stack.enter_context(Progress("bench replay", windows))
        for path in config.paths:
            for rate in config.rates:
                if path == "loopback":
                    rows += await _replay_rate(
                        store, policy, team, config, path, rate, owner_urls, replica_urls, progress
                    )
                else:
                    rows += await _replay_rate_over_link(
                        store, policy, team, config, rate, direct, links, relays, progress
                    )
                progress.advance(f"{path} r={rate:g}: {config.actions} actions done", 0, line=True)


def _link_statistics(settings: dict[str, Any], links: list[Link], relays: list[LinkRelay]) -> None:
    if links:
        late = [ms for r in relays for ms in r.late_ms]
        settings.update(
            {
                "link_up_packets": sum(link.up.packets for link in links),
                "link_down_packets": sum(link.down.packets for link in links),
                "relay_late_p50_ms": round(percentile(late, 50), 3),
                "relay_late_p99_ms": round(percentile(late, 99), 3),
            }
        )


def summarise(results: dict[str, Any], paths: Sequence[str]) -> None:
    """Crossover and safety from the rows measured (all of them, or those before Ctrl-C)."""
    measured = [p for p in paths if any(r["path"] == p for r in results["rows"])]
    results["crossover"] = _crossovers(results["rows"], measured)
    results["safety"] = _safety(results["rows"])


def _crossovers(rows: list[dict[str, Any]], paths: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in paths:
        by = {(r["rate"], r["executor"]): r for r in rows if r["path"] == path}
        rates = sorted({rate for rate, _ in by})
        entry: dict[str, Any] = {}
        for rival in ("eager", "allkeys"):
            pts = [
                (r, by[(r, "planfence")]["stall_mean_ms"], by[(r, rival)]["stall_mean_ms"])
                for r in rates
            ]
            grid, interp = crossover(pts)
            entry[f"vs_{rival}"] = grid
            entry[f"vs_{rival}_interpolated"] = interp
            entry[f"planfence_lower_than_{rival}_at"] = [r for r, p, q in pts if p < q]
        stall = {
            r: (by[(r, "planfence")]["stall_mean_ms"], by[(r, "eager")]["stall_mean_ms"])
            for r in rates
        }
        high = [stall[r] for r in rates if r >= CLAIM_RATE]
        low = stall[rates[0]]
        entry["eager_lower_at_lowest_rate"] = low[1] < low[0]
        entry["planfence_lower_than_eager_from_4"] = bool(high) and all(p < q for p, q in high)
        out[path] = entry
    return out


def _safety(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"scheduled_actions": {}, "invalid": {}, "replans": {}, "blocks": {}}
    for ex in EXECUTORS:
        mine = [r for r in rows if r["executor"] == ex]
        out["scheduled_actions"][ex] = sum(r["actions"] for r in mine)
        out["invalid"][ex] = sum(r["invalid"] for r in mine)
        out["replans"][ex] = sum(r["replans"] for r in mine)
        out["blocks"][ex] = sum(r["blocks"] for r in mine)
    out["stale_plans_scheduled"] = sum(
        r["expected_stale"] for r in rows if r["executor"] == "freshness"
    )
    out["exact_lineage_invalid"] = sum(out["invalid"][ex] for ex in SAFE)
    return out


# ---- the command


def at_least_two(text: str) -> int:
    value = positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"must be at least 2, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_quick(parser, f"{QUICK_ACTIONS} actions per rate")
    parser.add_argument(
        "--actions",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"actions per rate and executor, the length of the replayed stream "
        f"(default: {DEFAULT_ACTIONS}; {QUICK_ACTIONS} with --quick)",
    )
    parser.add_argument(
        "--rates",
        default=",".join(f"{r:g}" for r in RATES),
        help="update rates, updates per action, separated by commas",
    )
    parser.add_argument(
        "--paths",
        default=",".join(PATHS),
        help="loopback and/or att (the emulated cellular link), separated by commas",
    )
    parser.add_argument("--keys", type=at_least_two, default=DEFAULT_KEYS, help="shared keys")
    parser.add_argument("--owners", type=positive_int, default=DEFAULT_OWNERS, help="owners")
    parser.add_argument(
        "--replicas", type=positive_int, default=DEFAULT_REPLICAS, help="executor replicas"
    )
    parser.add_argument(
        "--value-bytes",
        type=non_negative_int,
        default=DEFAULT_VALUE_BYTES,
        help="size of each record's value",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the stream")
    add_bench_store(parser)
    add_output(parser)
    parser.add_argument(
        "--plot", metavar="FILE", help="also save a figure (needs planfence[bench])"
    )
    add_link_arguments(parser)


def _config(args: argparse.Namespace) -> Config:
    try:
        rates = tuple(sorted({float(x) for x in args.rates.split(",") if x.strip()}))
    except ValueError:
        raise UsageError(f"--rates takes numbers separated by commas, got {args.rates!r}") from None
    paths = tuple(dict.fromkeys(p.strip() for p in args.paths.split(",") if p.strip()))
    if not rates or any(not r >= 0 or math.isinf(r) for r in rates):
        raise UsageError("--rates needs at least one non-negative rate")
    if not paths or any(p not in PATHS for p in paths):
        raise UsageError(f"--paths takes {' and/or '.join(PATHS)}, got {args.paths!r}")
    actions = pick(args.actions, args.quick, DEFAULT_ACTIONS, QUICK_ACTIONS)
    up = down = None
    kind = None
    if "att" in paths:
        up, down, kind = load_traces(args)
    return Config(
        rates=rates,
        actions=actions,
        keys=args.keys,
        owners=args.owners,
        replicas=args.replicas,
        value_bytes=args.value_bytes,
        seed=args.seed,
        paths=paths,
        up=up,
        down=down,
        trace_kind=kind,
        delay_ms=args.delay_ms,
    )


def run(args: argparse.Namespace) -> int:
    config = _config(args)
    check_store(args.store, shared=True)
    results = new_results(
        settings=config.as_json(), stores=[], rows=[], crossover={}, safety=_safety([])
    )

    def measure() -> None:
        try:
            asyncio.run(_bench(config, args.store, results))
        finally:
            summarise(results, config.paths)

    code = run_bench(args, results, measure, _print_tables)
    if args.plot and results["rows"]:
        plot(results, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr if args.json else sys.stdout)
    return code


def _fmt_rate(rate: float) -> str:
    return f"{rate:g}"


def _print_tables(result: Mapping[str, Any]) -> None:
    print_context(result)
    s = result["settings"]
    print(
        f"Controlled replay: {s['actions']} actions per rate and executor, {s['keys']} keys, "
        f"{s['owners']} owners, {s['replicas']} executor replicas, {s['value_bytes']} B values"
    )
    if "trace_up" in s:
        print(f"att {describe_trace(s)}")
    if "relay_late_p50_ms" in s:
        print(
            f"att link: {s['delay_ms']:g} ms one way; relay late "
            f"{s['relay_late_p50_ms']:.2f} ms p50 / {s['relay_late_p99_ms']:.2f} ms p99"
        )
    for path in result["crossover"]:
        rows = [r for r in result["rows"] if r["path"] == path]
        by = {(r["rate"], r["executor"]): r for r in rows}
        rates = sorted({r["rate"] for r in rows})
        print()
        print(f"[{path}] coordination stall per action, ms: mean (p50)")
        print(f"{'rate':>6} " + " ".join(f"{ex:>17}" for ex in EXECUTORS))
        for rate in rates:
            cells = " ".join(
                f"{by[(rate, ex)]['stall_mean_ms']:>8.2f} ({by[(rate, ex)]['stall_p50_ms']:>6.2f})"
                for ex in EXECUTORS
            )
            print(f"{_fmt_rate(rate):>6} {cells}")
        c = result["crossover"][path]
        grid = c["vs_eager"]
        where = "never" if grid is None else f"r >= {_fmt_rate(grid)}"
        if c["vs_eager_interpolated"] is not None:
            where += f" (interpolated {c['vs_eager_interpolated']:g})"
        print(
            f"planfence below eager from: {where}; below all-key at rates: "
            f"{', '.join(_fmt_rate(r) for r in c['planfence_lower_than_allkeys_at']) or 'none'}"
        )
        print()
        print(f"[{path}] per action: HTTP messages / bytes; counts: replans, blocks, invalid")
        print(
            f"{'rate':>6} {'executor':<10} {'msgs':>6} {'bytes':>8} {'act ms':>8} {'upd ms':>8} "
            f"{'replans':>7} {'blocks':>6} {'invalid':>7}"
        )
        for rate in rates:
            for ex in EXECUTORS:
                r = by[(rate, ex)]
                print(
                    f"{_fmt_rate(rate):>6} {ex:<10} {r['messages_per_action']:>6.2f} "
                    f"{r['bytes_per_action']:>8.0f} {r['action_path_mean_ms']:>8.2f} "
                    f"{r['update_path_mean_ms']:>8.2f} {r['replans']:>7} {r['blocks']:>6} "
                    f"{r['invalid']:>7}"
                )
    odd = [
        f"{r['path']} r={_fmt_rate(r['rate'])} {r['executor']}: {r['block_reasons']}"
        for r in result["rows"]
        if set(r["block_reasons"]) - {"stale_after_replan"}
    ]
    if odd:
        print()
        print("Blocks other than an overtaken replan (failing closed): " + "; ".join(odd))
    safety = result["safety"]
    print()
    print(
        "Invalid actions (judged from the store's history): "
        + ", ".join(
            f"{ex} {safety['invalid'][ex]}/{safety['scheduled_actions'][ex]}" for ex in EXECUTORS
        )
    )


def plot(result: Mapping[str, Any], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import NullFormatter, ScalarFormatter
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'planfence[bench]'") from None
    paths = list(result["crossover"])
    fig, axes = plt.subplots(1, len(paths), figsize=(6 * len(paths), 4.5), squeeze=False)
    for ax, name in zip(axes[0], paths, strict=True):
        rows = [r for r in result["rows"] if r["path"] == name]
        for ex in EXECUTORS:
            mine = sorted((r["rate"], r["stall_mean_ms"]) for r in rows if r["executor"] == ex)
            ax.plot([x for x, _ in mine], [y for _, y in mine], marker="o", label=ex)
        cross = result["crossover"][name]
        at = cross["vs_eager_interpolated"] or cross["vs_eager"]
        if at:
            ax.axvline(at, color="grey", linestyle=":", label=f"crossover ~{at:g}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        rates = sorted({r["rate"] for r in rows})
        ax.set_xticks(rates, [f"{r:g}" for r in rates])
        ax.set_xlabel("updates per action")
        ax.set_ylabel("coordination stall per action (ms, mean)")
        ax.set_title(name)
        ax.legend()
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


__all__ = [
    "EXECUTORS",
    "RATES",
    "Expected",
    "OwnerHeadFreshness",
    "Pusher",
    "Window",
    "create_replica_app",
    "crossover",
    "expect",
    "replay_policy",
    "schedule",
]
