"""Helpers for the owner-service tests: the team, its store, server processes.

The team: `planner` owns the trip's requirements, `reviser` owns its budget, `executor` runs the
gate, `intruder` is a known agent that owns nothing.
"""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from planfence.plugins.gate import Policy
from planfence.plugins.gate.plans import create_plan_sync
from planfence.shared_memory import open_store

REQ = "trip/42/requirements"
BUDGET = "trip/42/budget"
AGENTS = ("planner", "reviser", "executor", "intruder")
POLICY = Policy().declare("book_trip", ["trip/{trip}/requirements", "trip/{trip}/budget"])
HERE = Path(__file__).parent


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
