"""The replay across rates and paths: the processes it runs (owner services, replica endpoints),
the emulated link each rate meets afresh, and the rows each rate leaves."""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from planfence.adapters.owner_service.keyring import KEYRING_ENV
from planfence.demos.bench.harness.stats import percentile, rotate
from planfence.demos.bench.harness.stores import open_bench_store
from planfence.demos.bench.harness.tasks import together
from planfence.demos.bench.netem.relay import Link, LinkRelay, drained
from planfence.demos.support import Progress
from planfence.plugins.gate import Policy
from planfence.shared_memory import AsyncStore

from ..harness import services
from ..harness.scratch import scratch_folder
from ..harness.services import port_of
from . import push
from .config import Config, Team
from .executors import EXECUTORS
from .push import KEEPALIVE_S, REPLICA_ENV
from .run import Run, replay_policy
from .schedule import schedule


async def replay_rate(
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
        await together([run.setup() for run in runs])  # untimed: side by side
        for w in windows:
            for run in rotate(runs, w.index):
                await run.window(w)
            progress.advance(f"{path} r={rate:g} action {w.index + 1}", line=False)
        return [await run.row() for run in runs]
    finally:
        for run in runs:
            await run.aclose()


# ---- processes: owner services and replica endpoints


def replay_services(team: Team, store_url: str, folder: Path) -> dict[str, services.Service]:
    """An owner service per owner (its private key in a file of `folder` only it reads) and a
    push endpoint per replica (the owners' public keys), all with the same connection
    keep-alive."""
    out: dict[str, services.Service] = {}
    jwks = team.keyring.to_jwks()
    for owner in team.owners:
        key_file = folder / f"{owner}.jwk"
        team.keys[owner].save(key_file)
        out[owner] = services.owner_service(
            owner, store_url, jwks, signing_key=key_file, keep_alive_s=KEEPALIVE_S
        )
    owners_only = json.dumps(team.owner_keyring.to_jwks())
    for name in team.replicas:
        env = {KEYRING_ENV: owners_only, REPLICA_ENV: name}
        out[name] = services.Service(f"{push.__name__}:replica_app", env, keep_alive_s=KEEPALIVE_S)
    return out


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
            relay = LinkRelay(link, "127.0.0.1", port_of(url))
            via[name] = (await stack.enter_async_context(relay)).url
            mine.append(relay)
        relays += mine
        owners = {o: via[o] for o in team.owners}
        replicas = {r: via[r] for r in team.replicas}
        rows = await replay_rate(
            store, policy, team, config, "att", rate, owners, replicas, progress
        )
        await drained(mine)
    for row in rows:
        row["trace_ms"] = round(link.now_ms())
    return rows


async def replay_all(config: Config, store_url: str | None, results: dict[str, Any]) -> None:
    """Fill `results` in, one rate at a time; every store, folder, relay and process is released
    on the way out, also when the run is cancelled by Ctrl-C."""
    owners = tuple(f"owner-{i}" for i in range(config.owners))
    replicas = tuple(f"executor-{i}" for i in range(config.replicas))
    team = Team.generate(owners, replicas)
    policy = replay_policy()
    rows: list[dict[str, Any]] = results["rows"]
    links: list[Link] = []
    relays: list[LinkRelay] = []
    async with AsyncExitStack() as stack:
        target, store = await open_bench_store(stack, store_url, results)
        logs = stack.enter_context(scratch_folder("planfence-replay-"))
        specs = replay_services(team, target.url, logs)
        direct = stack.enter_context(services.running(specs, logs))
        owner_urls = {o: direct[o] for o in owners}
        replica_urls = {r: direct[r] for r in replicas}
        stack.callback(link_statistics, results["settings"], links, relays)
        windows = len(config.paths) * len(config.rates) * config.actions
        progress = stack.enter_context(Progress("bench replay", windows))
        for path in config.paths:
            for rate in config.rates:
                if path == "loopback":
                    rows += await replay_rate(
                        store, policy, team, config, path, rate, owner_urls, replica_urls, progress
                    )
                else:
                    rows += await _replay_rate_over_link(
                        store, policy, team, config, rate, direct, links, relays, progress
                    )
                progress.advance(f"{path} r={rate:g}: {config.actions} actions done", 0, line=True)


def link_statistics(settings: dict[str, Any], links: list[Link], relays: list[LinkRelay]) -> None:
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
