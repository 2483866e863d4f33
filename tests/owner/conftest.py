"""Fixtures for the owner-service tests: a keyring, a seeded team store, owner processes.

The team: `planner` owns the trip's requirements, `reviser` owns its budget, `executor` runs the
gate, `intruder` is a known agent that owns nothing.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from planfence.adapters.owner_service import KEYRING_ENV, Keyring
from planfence.plugins.gate import Policy, create_plan_sync
from planfence.shared_memory import open_store

REQ = "trip/42/requirements"
BUDGET = "trip/42/budget"
AGENTS = ("planner", "reviser", "executor", "intruder")
POLICY = Policy().declare("book_trip", ["trip/{trip}/requirements", "trip/{trip}/budget"])
HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def secrets_by_agent() -> dict[str, str]:
    return {agent: secrets.token_hex(24) for agent in AGENTS}


@pytest.fixture
def keyring(secrets_by_agent: dict[str, str]) -> Keyring:
    return Keyring(secrets_by_agent, source="<test keyring>")


@dataclass
class Team:
    url: str
    requirements: str  # record id of the current requirements
    budget: str
    plan: str  # a plan derived from both


def seed_team(url: str) -> Team:
    with open_store(url) as store:
        store.own(REQ, "planner")
        store.own(BUDGET, "reviser")
        r = store.put(REQ, {"destination": "Lisbon"}, author="planner")
        b = store.put(BUDGET, {"eur": 900}, author="reviser")
        plan = create_plan_sync(store, author="planner", parents=[r.id, b.id], value={"go": 1})
    return Team(url, r.id, b.id, plan.id)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    base_url: str
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_server(args: list[str], env: dict[str, str], log: Path, port: int) -> Server:
    """Start a server process and wait until it answers /health."""
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Server(proc, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + 30
    with httpx.Client(timeout=1.0) as client:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {log.read_text(errors='replace')[-2000:]}")
            try:
                if client.get(f"{server.base_url}/health").status_code == 200:
                    return server
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"server did not start: {log.read_text(errors='replace')}")
            time.sleep(0.05)


@dataclass
class Owners:
    team: Team
    directory: dict[str, str]  # the honest owners
    fault_url: str  # the misbehaving reviser; append /{mode}
    down_url: str  # nothing listens there


@pytest.fixture(scope="module")
def owners(
    tmp_path_factory: pytest.TempPathFactory, secrets_by_agent: dict[str, str]
) -> Iterator[Owners]:
    """`planner` and `reviser` served by `planfence serve-owner` processes over one SQLite file,
    and a fault-injecting reviser in a third process."""
    tmp = tmp_path_factory.mktemp("owners")
    team = seed_team(f"sqlite:///{tmp / 'team.db'}")
    env = {**os.environ, KEYRING_ENV: json.dumps(secrets_by_agent)}
    servers: list[Server] = []
    try:
        for agent in ("planner", "reviser"):
            port = free_port()
            cmd = [sys.executable, "-m", "planfence.demos.cli", "serve-owner"]
            cmd += ["--agent", agent, "--store", team.url, "--port", str(port)]
            servers.append(start_server(cmd, env, tmp / f"{agent}.log", port))
        port = free_port()
        cmd = [sys.executable, str(HERE / "fault_owner.py"), "--agent", "reviser"]
        cmd += ["--store", team.url, "--port", str(port), "--impostor", "intruder"]
        fault = start_server(cmd, env, tmp / "fault.log", port)
        servers.append(fault)
        yield Owners(
            team,
            {"planner": servers[0].base_url, "reviser": servers[1].base_url},
            fault.base_url,
            f"http://127.0.0.1:{free_port()}",
        )
    finally:
        for server in servers:
            server.stop()
