"""`planfence bench gate`: what the gate costs on the allow path, and what it sends.

Latency: `Gate.check` on plans that are current (the allow path, audit on, as shipped) for
|D(a)| = 1, 4, 16 and lineage depth 1, 10, 100, with heads from the store (SQLite, PostgreSQL) and
from owner services over loopback HTTP. Each check is interleaved with a bare read of the same
heads (`store.states(keys)`, or the signed HTTP head requests alone); `ratio_p50` is the allow
path's median over the bare read's.

Depth N: the plan sits N derived records above the facts (1: the plan cites the facts; 10: it
cites a chain of 9 intermediate derived records, the lowest of which cites the facts).

Traffic: bytes on the wire per validation (HTTP/1.1 request and answer, headers included) when
the gate asks owners for D(a) only, versus the batch all-key check (every shared key), for key
spaces of 8, 32 and 128 keys.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from planfence.adapters.owner_service import KEYRING_ENV, HttpOwnerHeads, Keyring
from planfence.plugins.gate import (
    ALLOW,
    AllKeysHeads,
    Gate,
    HeadSource,
    Policy,
    create_plan,
    store_key_space,
)
from planfence.shared_memory import AsyncStore, open_async_store

from .common import percentile, write_json

HELP = "gate allow-path latency vs a bare head read, and head traffic vs the all-key check"

DEPS = (1, 4, 16)
DEPTHS = (1, 10, 100)
KEY_SPACES = (8, 32, 128)
OWNERS = ("owner-a", "owner-b")
REQUESTER = "executor"
PG_ENV = "PLANFENCE_BENCH_POSTGRES_URL"
PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="FILE", default=None, help="also write results here")
    parser.add_argument("--quick", action="store_true", help="a few iterations (smoke run)")
    parser.add_argument(
        "--iterations",
        type=int,
        default=None,
        metavar="N",
        help="timed checks per row (default 300; 5 with --quick)",
    )
    parser.add_argument(
        "--postgres",
        default=None,
        metavar="URL",
        help=f"PostgreSQL server (default ${PG_ENV} or {PG_DEFAULT}); a throwaway schema is used",
    )


def run(args: argparse.Namespace) -> int:
    iterations = args.iterations or (5 if args.quick else 300)
    pg_url = args.postgres or os.environ.get(PG_ENV) or PG_DEFAULT
    result = asyncio.run(_bench(iterations, quick=args.quick, pg_url=pg_url))
    _print_tables(result)
    write_json(args.json, result)
    return 0


# ---- the team the benchmark runs against


@dataclass(frozen=True)
class Case:
    tool: str
    deps: int
    depth: int
    plan: str
    owners: dict[str, tuple[str, ...]]  # owner -> keys of D(a), as the gate groups them
    space: int = 0  # size of the shared key space (traffic cases)

    @property
    def keys(self) -> list[str]:
        return [k for ks in self.owners.values() for k in ks]


def _owner_of(i: int) -> str:
    return OWNERS[i % len(OWNERS)]


async def _seed_keys(store: AsyncStore, prefix: str, n: int) -> list[str]:
    """n owned keys under `prefix`, owners alternating, one fact each; their record ids."""
    facts = []
    for i in range(n):
        key = f"{prefix}/k{i:03d}"
        await store.own(key, _owner_of(i))
        facts.append((await store.put(key, {"i": i}, author=_owner_of(i))).id)
    return facts


async def _plan_at_depth(store: AsyncStore, facts: list[str], depth: int, tag: str) -> str:
    parents = facts
    for level in range(depth - 1):
        note = await store.add(
            f"bench/derived/{tag}",
            {"level": level},
            author=OWNERS[0],
            parents=parents,
            kind="derived",
        )
        parents = [note.id]
    return (await create_plan(store, author=OWNERS[0], parents=parents, value={"tag": tag})).id


def _grouped(keys: list[str]) -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for key in keys:
        out.setdefault(_owner_of(int(key.rsplit("k", 1)[1])), []).append(key)
    return {o: tuple(sorted(ks)) for o, ks in sorted(out.items())}


async def _seed_latency(store: AsyncStore) -> tuple[Policy, list[Case]]:
    keys = [f"lat/k{i:03d}" for i in range(max(DEPS))]
    facts = await _seed_keys(store, "lat", max(DEPS))
    policy = Policy()
    cases = []
    for deps in DEPS:
        tool = f"act_{deps}"
        policy = policy.declare(tool, keys[:deps])
        for depth in DEPTHS:
            plan = await _plan_at_depth(store, facts[:deps], depth, f"lat-{deps}-{depth}")
            cases.append(Case(tool, deps, depth, plan, _grouped(keys[:deps])))
    return policy, cases


async def _seed_traffic(store: AsyncStore, policy: Policy) -> tuple[Policy, list[Case]]:
    cases = []
    for n in KEY_SPACES:
        facts = await _seed_keys(store, f"t{n}", n)
        keys = [f"t{n}/k{i:03d}" for i in range(n)]
        for deps in (d for d in DEPS if d < n):
            tool = f"traffic_{n}_{deps}"
            policy = policy.declare(tool, keys[:deps])
            plan = await _plan_at_depth(store, facts[:deps], 1, f"t{n}-{deps}")
            cases.append(Case(tool, deps, 1, plan, _grouped(keys[:deps]), space=n))
    return policy, cases


# ---- owner services on loopback


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def _owner_services(
    store_url: str, keyring: Mapping[str, str], logs: Path
) -> Iterator[dict[str, str]]:
    """One `planfence serve-owner` process per owner; yields owner -> base URL."""
    env = {**os.environ, KEYRING_ENV: json.dumps(dict(keyring))}
    procs: list[subprocess.Popen[bytes]] = []
    directory: dict[str, str] = {}
    try:
        for owner in OWNERS:
            port = _free_port()
            cmd = [sys.executable, "-m", "planfence.demos.cli", "serve-owner", "--agent", owner]
            cmd += ["--store", store_url, "--port", str(port)]
            with (logs / f"{owner}.log").open("wb") as log:
                procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
            directory[owner] = f"http://127.0.0.1:{port}"
        for proc, (owner, url) in zip(procs, directory.items(), strict=True):
            _wait_ready(proc, url, logs / f"{owner}.log")
        yield directory
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + 30
    with httpx.Client(timeout=1.0) as client:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"owner service exited: {log.read_text(errors='replace')}")
            try:
                if client.get(f"{url}/health").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"owner service at {url} did not start")
            time.sleep(0.05)


# ---- measurement


async def _measure(
    gate: Gate,
    case: Case,
    bare: Callable[[], Awaitable[object]],
    iterations: int,
) -> dict[str, Any]:
    """Interleave allow-path checks (audited, as shipped, and without the audit write) with bare
    reads; alternate which goes first."""
    allow_s: list[float] = []
    quiet_s: list[float] = []
    bare_s: list[float] = []
    quiet = Gate(
        gate.store,
        gate.policy,
        heads=gate.head_source,
        max_records=gate.max_records,
        audit=False,
        agent=gate.agent,
    )

    async def one_check() -> None:
        for g, samples in ((gate, allow_s), (quiet, quiet_s)):
            t0 = time.perf_counter()
            verdict = await g.check(case.tool, {}, case.plan)
            samples.append(time.perf_counter() - t0)
            if verdict.verdict != ALLOW:
                raise RuntimeError(
                    f"benchmark plan was not allowed: {verdict.reason} {verdict.message}"
                )

    async def one_read() -> None:
        t0 = time.perf_counter()
        await bare()
        bare_s.append(time.perf_counter() - t0)

    warmup = max(2, iterations // 10)
    for i in range(warmup + iterations):
        if i % 2:
            await one_check()
            await one_read()
        else:
            await one_read()
            await one_check()
        if i == warmup - 1:
            allow_s.clear()
            quiet_s.clear()
            bare_s.clear()
    allow_p50 = percentile(allow_s, 50) * 1000
    quiet_p50 = percentile(quiet_s, 50) * 1000
    bare_p50 = percentile(bare_s, 50) * 1000
    return {
        "deps": case.deps,
        "depth": case.depth,
        "allow_p50_ms": round(allow_p50, 4),
        "allow_p99_ms": round(percentile(allow_s, 99) * 1000, 4),
        "bare_read_p50_ms": round(bare_p50, 4),
        "ratio_p50": round(allow_p50 / bare_p50, 3) if bare_p50 > 0 else None,
        "no_audit_p50_ms": round(quiet_p50, 4),
        "no_audit_ratio_p50": round(quiet_p50 / bare_p50, 3) if bare_p50 > 0 else None,
    }


async def _store_rows(
    name: str, store: AsyncStore, policy: Policy, cases: list[Case], iterations: int
) -> list[dict[str, Any]]:
    gate = Gate(store, policy, agent=REQUESTER)
    rows = []
    for case in cases:
        keys = case.keys

        async def bare(keys: list[str] = keys) -> object:
            return await store.states(keys)

        rows.append({"heads_from": name, **await _measure(gate, case, bare, iterations)})
    return rows


async def _http_rows(
    store: AsyncStore,
    policy: Policy,
    cases: list[Case],
    iterations: int,
    directory: dict[str, str],
    keyring: Keyring,
) -> list[dict[str, Any]]:
    heads = HttpOwnerHeads(directory, keyring, agent=REQUESTER, timeout=10.0)
    gate = Gate(store, policy, heads=heads, agent=REQUESTER)
    rows = []
    try:
        for case in cases:
            owners = case.owners

            async def bare(owners: dict[str, tuple[str, ...]] = owners) -> object:
                answers = await heads.heads(owners)
                if any(a.error for a in answers.values()):
                    raise RuntimeError(f"owner refused the benchmark: {answers}")
                return answers

            rows.append({"heads_from": "http", **await _measure(gate, case, bare, iterations)})
    finally:
        await gate.aclose()
    return rows


async def _traffic(
    store: AsyncStore,
    policy: Policy,
    cases: list[Case],
    repeats: int,
    directory: dict[str, str],
    keyring: Keyring,
) -> list[dict[str, Any]]:
    rows = []
    for case in cases:
        n = case.space
        per: dict[str, int] = {}
        for label in ("planfence", "allkeys"):
            http = HttpOwnerHeads(directory, keyring, agent=REQUESTER, timeout=10.0)
            source: HeadSource = http
            if label == "allkeys":
                source = AllKeysHeads(http, store_key_space(store, f"t{n}/"))
            gate = Gate(store, policy, heads=source, agent=REQUESTER)
            try:
                for _ in range(repeats):
                    verdict = await gate.check(case.tool, {}, case.plan)
                    if verdict.verdict != ALLOW:
                        raise RuntimeError(f"traffic plan not allowed: {verdict.message}")
            finally:
                await gate.aclose()
            per[label] = round(http.stats.total_bytes / repeats)
        rows.append(
            {
                "keys": n,
                "deps": case.deps,
                "planfence_bytes": per["planfence"],
                "allkeys_bytes": per["allkeys"],
            }
        )
    return rows


async def _open_postgres(url: str) -> tuple[AsyncStore | None, str, str]:
    """A store in a fresh schema, or None and why not."""
    schema = f"pf_bench_{uuid.uuid4().hex[:10]}"
    full = f"{url}{'&' if '?' in url else '?'}schema={schema}"
    try:
        store = await asyncio.wait_for(open_async_store(full), 15)
    except Exception as exc:
        return None, schema, f"{type(exc).__name__}: {exc}".strip()
    return store, schema, ""


def _drop_schema(url: str, schema: str) -> None:
    try:
        import psycopg

        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    except Exception as exc:
        print(f"note: could not drop PostgreSQL schema {schema}: {exc}", file=sys.stderr)


async def _bench(iterations: int, *, quick: bool, pg_url: str) -> dict[str, Any]:
    keyring_text = {a: secrets.token_hex(24) for a in (*OWNERS, REQUESTER)}
    keyring = Keyring(keyring_text, source="<bench>")
    rows: list[dict[str, Any]] = []
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="planfence-bench-")))
        sqlite_url = f"sqlite:///{tmp / 'bench.db'}"
        sqlite = await open_async_store(sqlite_url)
        try:
            policy, cases = await _seed_latency(sqlite)
            policy, traffic_cases = await _seed_traffic(sqlite, policy)
            rows += await _store_rows("sqlite", sqlite, policy, cases, iterations)

            pg, schema, why = await _open_postgres(pg_url)
            if pg is None:
                print(f"note: PostgreSQL rows skipped, no server at {pg_url} ({why})")
            else:
                try:
                    pg_policy, pg_cases = await _seed_latency(pg)
                    rows += await _store_rows("postgres", pg, pg_policy, pg_cases, iterations)
                finally:
                    await pg.aclose()
                    _drop_schema(pg_url, schema)

            directory = stack.enter_context(_owner_services(sqlite_url, keyring_text, tmp))
            rows += await _http_rows(sqlite, policy, cases, iterations, directory, keyring)
            traffic = await _traffic(
                sqlite, policy, traffic_cases, 2 if quick else 10, directory, keyring
            )
        finally:
            await sqlite.aclose()
    return {"rows": rows, "traffic": traffic}


def _print_tables(result: Mapping[str, Any]) -> None:
    print("Allow-path latency of Gate.check vs a bare read of the same heads")
    print("(audited = as shipped, the decision durably recorded before the call may run;")
    print(" no audit = Gate(audit=False), the lineage check alone)")
    print(
        f"{'heads from':<10} {'|D(a)|':>6} {'depth':>5} {'allow p50':>10} {'allow p99':>10} "
        f"{'bare p50':>9} {'ratio':>6} {'no-audit p50':>12} {'ratio':>6}"
    )
    for r in result["rows"]:
        ratio = f"{r['ratio_p50']:.2f}x" if r["ratio_p50"] is not None else "-"
        quiet = r.get("no_audit_ratio_p50")
        quiet_ratio = f"{quiet:.2f}x" if quiet is not None else "-"
        print(
            f"{r['heads_from']:<10} {r['deps']:>6} {r['depth']:>5} "
            f"{r['allow_p50_ms']:>7.3f} ms {r['allow_p99_ms']:>7.3f} ms "
            f"{r['bare_read_p50_ms']:>6.3f} ms {ratio:>6} "
            f"{r['no_audit_p50_ms']:>9.3f} ms {quiet_ratio:>6}"
        )
    print()
    print("Head traffic per validation (HTTP/1.1 bytes, both directions)")
    print(f"{'keys':>5} {'|D(a)|':>6} {'planfence':>10} {'all-key':>10} {'saving':>7}")
    for t in result["traffic"]:
        saving = t["allkeys_bytes"] / t["planfence_bytes"] if t["planfence_bytes"] else 0.0
        print(
            f"{t['keys']:>5} {t['deps']:>6} {t['planfence_bytes']:>8} B "
            f"{t['allkeys_bytes']:>8} B {saving:>6.1f}x"
        )
